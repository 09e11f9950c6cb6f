"""Helpers for the flush, spool and recovery tests: raw handles, per-connection faults,
and the store-wide checks every fault test ends with."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.transcript import spool
from tests.support.pg import RawPg, store_url

__all__ = [
    "FTS_INDEXES",
    "MODULE",
    "check_store",
    "convo",
    "fts_integrity_errors",
    "on_store_connections",
    "pending_files",
    "raw",
    "stored",
    "stored_contents",
    "uids",
    "write_spool",
]

MODULE = select_driver().module
FTS_INDEXES = ("messages_fts", "messages_fts_trigram")


def convo(n: int, start: int = 0, size: int = 20) -> list[dict[str, Any]]:
    """Messages ``start`` .. ``start + n - 1`` of a conversation: alternating user and
    assistant turns of ``size`` padding characters."""
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i} " + "x" * size}
        for i in range(start, start + n)
    ]


def uids(messages: list[dict[str, Any]]) -> list[str]:
    """The ``uid`` a flush stamped on each message, in order."""
    return [m["uid"] for m in messages]


def raw(home: Path, *, timeout: float = 0.0) -> Any:
    """A raw driver connection on the store, in autocommit (we send BEGIN ourselves).

    Usable from any thread: a test may release a lock from a timer thread.
    """
    return MODULE.connect(
        str(home / "state.db"), isolation_level=None, timeout=timeout, check_same_thread=False
    )


@contextmanager
def on_store_connections(
    store: StateStore, *statements: str | Callable[[Any], object]
) -> Iterator[None]:
    """Run ``statements`` on every connection the store opens while the block runs (a
    callable is called with the driver connection, for what SQL cannot set).

    The pool is emptied on entry and exit, so the store's next write uses a connection
    configured (then no longer configured) this way.
    """

    def configure(dbapi_conn: Any, _record: Any) -> None:
        for sql in statements:
            if callable(sql):
                sql(dbapi_conn)
            else:
                dbapi_conn.execute(sql)

    event.listen(store.engine, "connect", configure)
    store.engine.dispose()
    try:
        yield
    finally:
        event.remove(store.engine, "connect", configure)
        store.engine.dispose()


def stored(home: Path, session_id: str) -> list[dict[str, Any]]:
    """The session's rows as (uid, role, content...) dicts in id order, read raw."""
    url = store_url()
    if url is not None:
        pg = RawPg(url, as_dicts=True)
        try:
            sql = "SELECT * FROM messages WHERE session_id = ? ORDER BY id"
            return list(pg.execute(sql, (session_id,)).fetchall())
        finally:
            pg.close()
    con = raw(home)
    try:
        con.row_factory = MODULE.Row
        rows = con.execute(
            "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (session_id,)
        ).fetchall()
        return [dict(r) for r in rows]
    finally:
        con.close()


def stored_contents(home: Path, session_id: str) -> list[str]:
    """The ``content`` of each of the session's rows (:func:`stored`), in id order."""
    return [r["content"] for r in stored(home, session_id)]


def pending_files(home: Path) -> list[str]:
    folder = spool.sessions_dir(home)
    if not folder.exists():
        return []
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(spool.PENDING_SUFFIX))


def write_spool(
    home: Path, session_id: str, lines: Sequence[Any], *, raw_tail: bytes = b""
) -> Path:
    """Write a spool file by hand: dicts become JSON lines, bytes are written as is."""
    folder = spool.sessions_dir(home)
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / (session_id + spool.PENDING_SUFFIX)
    data = b"".join(
        line if isinstance(line, bytes) else json.dumps(line, ensure_ascii=False).encode() + b"\n"
        for line in lines
    )
    path.write_bytes(data + raw_tail)
    path.chmod(0o600)
    return path


def fts_integrity_errors(con: Any, indexes: Sequence[str] = FTS_INDEXES) -> dict[str, str]:
    """FTS5 ``'integrity-check'`` with ``rank = 1`` on a raw driver connection.

    Returns {index: error} for the failing indexes. ``rank = 1`` also compares each index
    with its content rows; without it FTS5 checks only the index's own structure, so an
    index that fell behind (a row added while the insert trigger was missing) passes.
    """
    failures: dict[str, str] = {}
    for ix in indexes:
        try:
            con.execute(f"INSERT INTO {ix}({ix}, rank) VALUES ('integrity-check', 1)")
        except Exception as exc:  # the driver's DatabaseError, whichever driver
            failures[ix] = str(exc)
    return failures


def check_store(home: Path) -> dict[str, int]:
    """The invariants every fault test ends with; returns uid -> row count.

    ``PRAGMA integrity_check`` is ok, both FTS indexes agree with their content rows
    (:func:`fts_integrity_errors`), no uid is stored twice in a session, and every
    session's counter equals its active rows.
    """
    con = raw(home, timeout=5.0)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        stale = fts_integrity_errors(con)
        assert stale == {}, f"full-text index out of step with its rows: {stale}"
        dupes = con.execute(
            "SELECT session_id, uid, count(*) FROM messages GROUP BY session_id, uid "
            "HAVING count(*) > 1"
        ).fetchall()
        assert dupes == [], f"uids stored twice: {dupes[:5]}"
        drift = con.execute(
            "SELECT s.id, s.message_count, (SELECT count(*) FROM messages m "
            "WHERE m.session_id = s.id AND m.active = 1) AS n FROM sessions s "
            "WHERE s.message_count != n"
        ).fetchall()
        assert drift == [], f"session counters differ from their rows: {drift[:5]}"
        return {uid: 1 for (uid,) in con.execute("SELECT uid FROM messages")}
    finally:
        con.close()
