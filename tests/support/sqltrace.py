"""SQL as SQLite runs it for a store's connections (``set_trace_callback``): what a test
counts to see how many transactions a flush made, the driver-cursor path included."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event

__all__ = ["count", "traced", "write_commits"]


@contextmanager
def traced(engine: Engine) -> Iterator[list[str]]:
    """Every statement SQLite runs for the store's connections while the block runs
    (the driver-cursor path included); FTS5's own statements left out."""
    seen: list[str] = []
    conns: list[Any] = []

    def record(sql: str) -> None:
        text = " ".join(sql.split())
        # SQLite reports a statement again as each of its triggers starts.
        if not text.startswith("--") and not (seen and seen[-1] == text):
            seen.append(text)

    def on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        dbapi_conn.set_trace_callback(record)
        conns.append(dbapi_conn)

    event.listen(engine.pool, "checkout", on_checkout)
    try:
        yield seen
    finally:
        event.remove(engine.pool, "checkout", on_checkout)
        for conn in conns:
            conn.set_trace_callback(None)


def count(seen: list[str], prefix: str) -> int:
    return sum(1 for sql in seen if sql.upper().startswith(prefix))


def write_commits(seen: list[str]) -> int:
    """How many write transactions (``BEGIN IMMEDIATE`` ... ``COMMIT``) committed; read
    transactions (plain ``BEGIN``) are not counted."""
    commits = 0
    writing = False
    for sql in seen:
        upper = sql.upper()
        if upper.startswith("BEGIN"):
            writing = upper == "BEGIN IMMEDIATE"
        elif upper == "COMMIT":
            commits += writing
            writing = False
        elif upper == "ROLLBACK":
            writing = False
    return commits
