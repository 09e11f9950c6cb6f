"""Store folders for tests: copies of a closed store, stores filled with sessions, and the
digests that prove a command left a store's bytes alone."""

from __future__ import annotations

import shutil
import sqlite3
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.walcheck import wal_header_problem
from tests.support import damage

__all__ = [
    "WAL_ONLY_MESSAGES",
    "copy_store",
    "file_mode",
    "fill_early_and_late",
    "fill_session",
    "home_with_session",
    "new_session",
    "paths_under",
    "read_only_rows",
    "session_with_messages",
    "store_digests",
    "store_with_wal_only_session",
]

ROOT = Path(__file__).resolve().parents[2]
WAL_ONLY_MESSAGES = 40  # rows of session "walonly", committed only in the -wal


def copy_store(src: Path, dest: Path) -> Path:
    """Copy a closed, checkpointed store folder's ``state.db`` into ``dest`` (0700, 0600).

    A file copy is only a faithful copy of a closed store: a live WAL store keeps
    committed pages in its ``-wal``, which is not copied.
    """
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    shutil.copyfile(src / "state.db", dest / "state.db")
    (dest / "state.db").chmod(0o600)
    return dest


def new_session(store: StateStore, session_id: str | None = None, **fields: Any) -> str:
    """A session created in ``store`` in a unit of its own (source ``cli`` unless
    ``fields`` say otherwise; ``session_id`` generated when None); returns its id."""
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id=session_id, **fields)
        uow.commit()
    return sid


def session_with_messages(
    store: StateStore, contents: Iterable[str], session_id: str | None = None
) -> str:
    """:func:`new_session`, then one user message per item of ``contents``, each
    appended on its own (``store.append_message``); returns the session's id."""
    sid = new_session(store, session_id)
    for content in contents:
        store.append_message(sid, {"role": "user", "content": content})
    return sid


def home_with_session(home: Path, contents: Iterable[str]) -> str:
    """:func:`session_with_messages` in the store in ``home``, closed again after."""
    with StateStore.open(home) as store:
        return session_with_messages(store, contents)


def fill_early_and_late(home: Path, per_session: int = 600) -> Path:
    """Two sessions over many pages, then checkpoint and close; returns ``state.db``.

    Session "early" owns the first leaves of ``messages`` and session "late" the last
    ones, so page damage can be aimed at one session's rows.
    """
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        for sid in ("early", "late"):
            uow.sessions.create(id=sid)
            uow.messages.append_many(
                sid,
                [
                    {"role": "user", "content": f"{sid} message {i} " + "pad " * 30}
                    for i in range(per_session)
                ],
            )
        uow.commit()
    db = home / "state.db"
    # The library the store uses: two SQLite libraries in one process do not see each
    # other's POSIX locks.
    damage.checkpoint_and_close(db, module=select_driver().module)
    return db


def fill_session(home: Path, session_id: str, count: int, label: str) -> None:
    """One committed session of ``count`` alternating user and assistant turns whose
    contents are ``f"{label} {i}"``; the store is closed again."""
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        uow.sessions.create(id=session_id)
        uow.messages.append_many(
            session_id,
            [
                {"role": "user" if i % 2 == 0 else "assistant", "content": f"{label} {i}"}
                for i in range(count)
            ],
        )
        uow.commit()


def store_with_wal_only_session(home: Path) -> Path:
    """Session "old" (30 rows) in ``state.db``, session "walonly" committed only in the
    ``-wal``, as a crashed agent leaves it; returns ``state.db``.

    The writer is a real process that ends with ``os._exit``: no close, so no checkpoint.
    """
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        uow.sessions.create(id="old")
        uow.messages.append_many(
            "old", [{"role": "user", "content": f"old {i}"} for i in range(30)]
        )
        uow.commit()
    db = home / "state.db"
    damage.checkpoint_and_close(db, module=select_driver().module)
    script = textwrap.dedent(
        f"""
        import os
        from hermes_repo import StateStore
        store = StateStore.open({str(home)!r})
        with store.unit_of_work() as uow:
            uow.sessions.create(id="walonly")
            uow.messages.append_many(
                "walonly",
                [{{"role": "user", "content": f"only in the wal {{i}}"}}
                 for i in range({WAL_ONLY_MESSAGES})],
            )
            uow.commit()
        os._exit(0)  # no close: the commit lives only in the -wal
        """
    )
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=120)
    wal = Path(f"{db}-wal")
    assert wal.stat().st_size > 32 and wal_header_problem(wal) is None
    return db


def store_digests(home: Path) -> dict[str, str | None]:
    """Digests of ``state.db`` and ``state.db-wal`` (None: absent); an empty ``-wal``
    counts as none.

    A read-only reader of a WAL store creates an empty ``-wal`` where there is none: that
    changes no content of the store.
    """
    digests = {}
    for name in ("state.db", "state.db-wal"):
        path = home / name
        empty_wal = name != "state.db" and path.exists() and path.stat().st_size == 0
        digests[name] = None if empty_wal else damage.file_digest(path)
    return digests


def file_mode(path: Path) -> int:
    """The permission bits of ``path`` (``0o600``...)."""
    return stat.S_IMODE(path.stat().st_mode)


def paths_under(root: Path) -> set[str]:
    """Every file and folder under ``root``, relative to it."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def read_only_rows(path: Path, sql: str) -> list[dict[str, Any]]:
    """The rows of ``sql`` on the SQLite file at ``path``, opened read-only (the file is
    another program's: a Hermes Agent ``state.db``)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql)]
    finally:
        conn.close()
