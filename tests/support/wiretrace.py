"""What a PostgreSQL store's connections send on the wire: libpq's protocol trace.

The server-side counterpart of :mod:`tests.support.sqltrace`: every statement a client
sent (simple queries and the Parse of extended-protocol ones) and its round trips (each
simple query and each Sync waits for the server), whichever layer sent them (SQLAlchemy,
or the driver's cursor on the append's kept connection).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from psycopg import pq
from sqlalchemy import Engine, event

__all__ = ["Wire", "wire"]

_QUERY = re.compile(r'^F\t\d+\tQuery\t "(.*)"$')
_PARSE = re.compile(r'^F\t\d+\tParse\t "[^"]*" "(.*)" \d+')
_SYNC = re.compile(r"^F\t\d+\tSync")


@dataclass
class Wire:
    """The statements sent (in order) and the round trips they took."""

    statements: list[str] = field(default_factory=list)
    round_trips: int = 0


@contextmanager
def wire(engine: Engine) -> Iterator[Wire]:
    """Everything the connections ``engine`` hands out while the block runs send, from
    their checkout on (the pool's ping before it is not seen); filled in at the end."""
    out = Wire()
    traced: list[tuple[Any, Any]] = []

    def on_checkout(dbapi: Any, _record: Any, _proxy: Any) -> None:
        f = tempfile.TemporaryFile("w+b")  # noqa: SIM115 - closed when the block ends
        dbapi.pgconn.trace(f.fileno())
        dbapi.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
        traced.append((dbapi, f))

    event.listen(engine.pool, "checkout", on_checkout)
    try:
        yield out
    finally:
        event.remove(engine.pool, "checkout", on_checkout)
        for dbapi, f in traced:
            if not dbapi.closed:
                dbapi.pgconn.untrace()
            f.seek(0)
            for line in f.read().decode("utf-8", "replace").splitlines():
                if m := _QUERY.match(line):
                    out.statements.append(m.group(1))
                    out.round_trips += 1
                elif m := _PARSE.match(line):
                    out.statements.append(m.group(1))
                elif _SYNC.match(line):
                    out.round_trips += 1
            f.close()
