"""Stores for the copy tests: one holding every odd value a column can hold, the rows of
a whole store to compare two, and PostgreSQL databases made for one test."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import Connection, make_url

from hermes_repo import StateStore
from hermes_repo.models import messages_table, sessions_table, state_meta_table
from hermes_repo.schema.fts import STALE_KEY
from hermes_repo.transfer.copy import DERIVED_META_KEYS, copy_store
from tests.support.pg import required_url
from tests.support.processes import reaped

__all__ = [
    "HUGE",
    "PgEnd",
    "copy_worker_main",
    "fill_odd_store",
    "fill_plain_store",
    "kill_copy_midway",
    "message_count",
    "meta_value",
    "new_home",
    "pg_target",
    "set_meta",
    "store_rows",
    "store_with_session",
]

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
HUGE = "長い" + "x" * (3 * 1024 * 1024) + "終"  # beyond both full-text caps


def fill_odd_store(store: StateStore) -> None:
    """Sessions and messages holding every kind of value the columns keep."""
    with store.unit_of_work() as uow:
        # The child's id sorts before its parent's: parents cannot simply go first by id.
        uow.sessions.create("telegram", id="z-root", title="根 session", user_id="u1")
        uow.sessions.create("cli", id="a-child", parent_session_id="z-root", model="m")
        uow.sessions.create("cli", id="lonely", extra={"hermes": {"k": [1, 2]}})
        uow.commit()
    odd = [
        {"role": "system", "content": "You are helpful. 你好，世界。日本語のテキスト"},
        {"role": "user", "content": "cut mid-emoji \ud83d and \udc80 here"},
        {"role": "user", "content": [{"type": "text", "text": "part \ud800"}, {"x": 1}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
            "reasoning": "think \udcff",
            "reasoning_details": [{"type": "summary", "text": "短い"}],
            "finish_reason": "tool_calls",
            "token_count": 2**40,
        },
        {"role": "tool", "tool_call_id": "c1", "tool_name": "f\ufdd0", "content": HUGE},
        {"role": "assistant", "content": "shown", "display_only": True},
        {"role": "assistant", "content": "sent", "api_content": '{"exact": "payload"}'},
        {"role": "user", "content": "kept key", "vendor_field": {"a": None}, "id": "msg_1"},
    ]
    for message in odd:
        store.append_message("z-root", message)
    for i in range(30):
        store.append_message("a-child", {"role": "user", "content": f"child {i} データ"})
    with store.unit_of_work() as uow:
        uid = next(iter(uow.messages.uids("a-child")))
        uow.messages.set_active("a-child", uid, False, reason="repair: orphan")
        uow.messages.recount("a-child")
        uow.sessions.end("z-root", "user_exit")
        uow.meta.set("hermes_import.state_meta", '{"k": "値"}')
        uow.meta.set(STALE_KEY, "derived: never copied")  # describes this file only
        uow.commit()


def fill_plain_store(store: StateStore, sessions: int, per_session: int) -> None:
    """``sessions`` sessions of ``per_session`` short messages each, bulk-inserted."""
    for s in range(sessions):
        with store.unit_of_work() as uow:
            sid = f"s{s:04d}"
            uow.sessions.create("cli", id=sid)
            uow.messages.append_many(
                sid,
                (
                    {"role": "user" if i % 2 else "assistant", "content": f"{sid} message {i}"}
                    for i in range(per_session)
                ),
            )
            uow.commit()


def _all_rows(conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {
        "sessions": [tuple(r) for r in conn.execute(select(sessions_table).order_by("id"))],
        "messages": [tuple(r) for r in conn.execute(select(messages_table).order_by("id"))],
        "state_meta": [
            tuple(r)
            for r in conn.execute(
                select(state_meta_table)
                .where(state_meta_table.c.key.not_in(sorted(DERIVED_META_KEYS)))
                .order_by("key")
            )
        ],
    }


def message_count(end: Any) -> int:
    """Rows of ``messages`` in a store (archived ones included)."""
    return int(end.read(lambda c: c.execute(text("SELECT count(*) FROM messages")).scalar()))


def store_rows(end: Any) -> dict[str, list[tuple[Any, ...]]]:
    """Every canonical row of a store (derived markers left out), in key order."""
    rows: dict[str, list[tuple[Any, ...]]] = end.read(_all_rows)
    return rows


@dataclass
class PgEnd:
    """A store on a throwaway PostgreSQL database, and the URL it was opened with."""

    store: StateStore
    url: str


@contextmanager
def pg_target() -> Iterator[Any]:
    """A store on a new PostgreSQL database (built at head by its open), dropped after."""
    server = make_url(required_url())
    name = f"copy_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        with StateStore.open(url=url) as store:
            yield PgEnd(store, url)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def new_home(tmp_path: Path, name: str) -> Path:
    """A folder for a new store (created at head by its first open)."""
    home = tmp_path / name
    home.mkdir(mode=0o700)
    return home


def copy_worker_main(source: str, target: str, batch_size: str, signal_at: str) -> None:
    """Run in a child process: copy ``source`` into ``target`` (store folders) and print
    ``copied N`` (flushed) after each batch once ``signal_at`` messages are copied."""
    threshold = int(signal_at)

    def progress(done: int, total: int) -> None:
        if done >= threshold:
            print(f"copied {done} of {total}", flush=True)

    dst = (
        StateStore.open(url=target)
        if target.startswith("postgresql")
        else StateStore.open(target, url="sqlite")
    )
    try:
        with StateStore.open(source) as src:
            copy_store(src, dst, batch_size=int(batch_size), progress=progress)
    finally:
        dst.close()
    print("finished", flush=True)


def kill_copy_midway(source: Path, target: str, *, after: int, batch_size: int = 10) -> None:
    """Copy ``source`` into ``target`` (a folder or a PostgreSQL URL) in a child process
    and SIGKILL it once ``after`` messages are copied: no cleanup, maybe mid-transaction."""
    code = (
        "import sys; from tests.support.copying import copy_worker_main; "
        "copy_worker_main(*sys.argv[1:])"
    )
    args = [str(source), target, str(batch_size), str(after)]
    procs: list[subprocess.Popen[str]] = []
    with reaped(procs):
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("copied"), first
        proc.kill()
        proc.wait()


def store_with_session(home: Path, session_id: str, started_at: float | None = None) -> None:
    """A store in ``home`` holding one empty session."""
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        uow.sessions.create("cli", id=session_id, started_at=started_at)
        uow.commit()


def meta_value(end: Any, key: str) -> str | None:
    """The ``state_meta`` value of ``key`` in a store (None when absent)."""
    stmt = select(state_meta_table.c.value).where(state_meta_table.c.key == key)
    value: str | None = end.read(lambda c: c.execute(stmt).scalar_one_or_none())
    return value


def set_meta(end: Any, key: str, value: str) -> None:
    """Set a ``state_meta`` row of a store."""
    with end.unit_of_work() as uow:
        uow.meta.set(key, value)
        uow.commit()
