"""The SQL a hand-written psycopg program runs for the PostgreSQL benchmarks, written
out here on purpose, and the check that the library sends exactly that.

The library's statements are captured with SQLAlchemy's ``before_cursor_execute`` event;
the raw side's are recorded as it sends them. The one-message append runs on psycopg's
own connection (no SQLAlchemy event fires), so both of its sides are captured on the
wire instead: libpq's protocol trace of each connection, every statement and every
round trip the client sent (:func:`wire_sql`). Any difference stops the benchmark (a
ratio between different statements would measure different work).
"""

from __future__ import annotations

import re
import tempfile
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


# libpq's trace of a message the client sent: a simple query, or the Parse of an
# extended-protocol one (its statement name, then its text); a Sync ends a round trip.
_WIRE_QUERY = re.compile(r'^F\t\d+\tQuery\t "(.*)"$')
_WIRE_PARSE = re.compile(r'^F\t\d+\tParse\t "[^"]*" "(.*)" \d+')
_WIRE_SYNC = re.compile(r"^F\t\d+\tSync")


def _wire_statements(trace: str) -> tuple[Sent, int]:
    """The statements a protocol trace shows the client sending, and its round trips
    (each simple query and each Sync waits for the server's answer)."""
    sent: Sent = []
    trips = 0
    for line in trace.splitlines():
        if m := _WIRE_QUERY.match(line):
            sent.append((m.group(1), False))
            trips += 1
        elif m := _WIRE_PARSE.match(line):
            sent.append((m.group(1), False))
        elif _WIRE_SYNC.match(line):
            trips += 1
    return sent, trips


@contextmanager
def wire_sql(engine: Engine | None = None, conn: Any = None) -> Iterator[list[Sent | int]]:
    """Every statement sent on the wire while the block runs, with the round trips:
    by the connections ``engine`` hands out in it (traced from their checkout, after
    the pool's ping), or by the psycopg connection ``conn``. Yields ``[statements,
    round_trips]``, filled in when the block ends."""
    from psycopg import pq

    out: list[Sent | int] = [[], 0]
    files: list[tuple[Any, Any]] = []

    def trace(dbapi: Any) -> None:
        f = tempfile.TemporaryFile("w+b")  # noqa: SIM115 - closed when the block ends
        dbapi.pgconn.trace(f.fileno())
        dbapi.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        files.append((dbapi, f))

    def on_checkout(dbapi: Any, _record: Any, _proxy: Any) -> None:
        trace(dbapi)

    if engine is not None:
        event.listen(engine.pool, "checkout", on_checkout)
    if conn is not None:
        trace(conn)
    try:
        yield out
    finally:
        if engine is not None:
            event.remove(engine.pool, "checkout", on_checkout)
        sent: Sent = []
        trips = 0
        for dbapi, f in files:
            dbapi.pgconn.untrace()
            f.seek(0)
            got, n = _wire_statements(f.read().decode("utf-8", "replace"))
            f.close()
            sent.extend(got)
            trips += n
        out[:] = [sent, trips]


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
