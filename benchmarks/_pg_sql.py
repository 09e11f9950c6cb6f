"""The SQL a hand-written psycopg program runs for the PostgreSQL benchmarks, written
out here on purpose, and the check that the library sends exactly that.

The library's statements are captured with SQLAlchemy's ``before_cursor_execute`` event;
the raw side's are recorded as it sends them. Any difference stops the benchmark (a
ratio between different statements would measure different work).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from _common import INSERT_COLUMNS, SqlMismatch
from sqlalchemy import event
from sqlalchemy.engine import Engine

from hermes_repo.codec import MESSAGE_COLUMNS

# The casts psycopg's SQLAlchemy dialect renders for each bound column (timestamp is a
# float: no cast).
_CAST = {"timestamp": "", "token_count": "::BIGINT", "display_only": "::INTEGER"}

#: What every write unit of the store sends first: its lock wait bounded by the rest of
#: its budget (the value differs per unit; :func:`_norm` compares the statement alone).
RAW_LOCK_TIMEOUT = "SET LOCAL lock_timeout = 20000"
RAW_BUMP = (
    "UPDATE sessions SET message_count=(sessions.message_count + %(n_messages)s::BIGINT), "
    "tool_call_count=(sessions.tool_call_count + %(n_calls)s::BIGINT) "
    "WHERE sessions.id = %(sid)s::VARCHAR"
)
_VALUES = ", ".join(f"%({c})s{_CAST.get(c, '::VARCHAR')}" for c in INSERT_COLUMNS)
RAW_INSERT_MANY = f"INSERT INTO messages ({', '.join(INSERT_COLUMNS)}) VALUES ({_VALUES})"
RAW_INSERT_ONE = RAW_INSERT_MANY + " RETURNING messages.id"
RAW_LOAD = (
    "SELECT "
    + ", ".join(f"messages.{c}" for c in MESSAGE_COLUMNS)
    + " FROM messages WHERE messages.session_id = %(sid)s::VARCHAR "
    "AND messages.active = %(active)s::INTEGER ORDER BY messages.id"
)

Sent = list[tuple[str, bool]]


@contextmanager
def library_sql(engine: Engine) -> Iterator[Sent]:
    """Every statement the library sends on ``engine``: ``(sql, executemany)``."""
    seen: Sent = []

    def before(
        _conn: Any, _cursor: Any, statement: str, _params: Any, _ctx: Any, many: bool
    ) -> None:
        seen.append((statement, many))

    event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", before)


class RecordingCursor:
    """A psycopg cursor that notes what it sends (the raw side of the check)."""

    def __init__(self, cursor: Any, seen: Sent | None = None) -> None:
        self.cursor = cursor
        self.seen = seen

    def execute(self, sql: str, params: Any = None) -> Any:
        if self.seen is not None:
            self.seen.append((sql, False))
        return self.cursor.execute(sql, params)

    def executemany(self, sql: str, params: Any) -> Any:
        if self.seen is not None:
            self.seen.append((sql, True))
        return self.cursor.executemany(sql, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cursor, name)


def _norm(sql: str) -> str:
    text = re.sub(r"\s+", " ", sql).strip()
    return re.sub(r"^SET LOCAL lock_timeout = \d+$", "SET LOCAL lock_timeout = N", text)


def require_same_sql(label: str, library: Sequence[tuple[str, bool]], raw: Sent) -> bool:
    """Exit (status 1) unless the library sent exactly the raw side's statements, in the
    same order, each as a single execute or an executemany alike. An empty capture is a
    mismatch too: a check that saw nothing proves nothing."""
    got = [(_norm(s), m) for s, m in library]
    want = [(_norm(s), m) for s, m in raw]
    if got != want or not got:
        raise SqlMismatch(
            f"ERROR [{label}]: the library's SQL differs from the raw psycopg side's, so "
            "the ratio would compare different work; make the raw side run what the "
            "library runs (or fix the library), then rerun.\n"
            f"  library: {got}\n  raw:     {want}"
        )
    return True
