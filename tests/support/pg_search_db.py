"""Throwaway PostgreSQL databases holding the store's tables and the search objects.

The server comes from ``HERMES_TEST_PG_URL`` (any database of it: the tests create and
drop their own, named ``pgsearch_*``), through ``tests.support.pg.required_url``: the
tests that use it are marked ``pg``, and skip without a server. The schema comes from
the migrations, as a store's does: revision 0004 adds the search objects
(``search=False`` stops just before it).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.pool import NullPool

from hermes_repo.schema import migrate
from tests.support.pg import required_url

__all__ = ["MESSAGE_COLUMNS", "copy_rows", "pg_database", "server_url"]

# The revision before the PostgreSQL search objects.
_BEFORE_SEARCH = "0003_session_extra"

MESSAGE_COLUMNS = (
    "id",
    "session_id",
    "uid",
    "role",
    "content",
    "content_parts",
    "content_text",
    "tool_calls",
    "calls_text",
    "tool_name",
    "timestamp",
    "active",
)


def server_url() -> str:
    """The server's URL, or a skip naming the variable that would enable the test."""
    return required_url()


@contextmanager
def pg_database(*, search: bool = True, revision: str = "head") -> Iterator[Engine]:
    """A fresh database with the store's tables (and the search objects), dropped after;
    built up to ``revision`` (an older store to upgrade)."""
    base = make_url(server_url())
    name = f"pgsearch_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine = create_engine(base.set(database=name), poolclass=NullPool)
    try:
        migrate.upgrade(engine, revision if search else _BEFORE_SEARCH)
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def copy_rows(engine: Engine, sessions: Sequence[str], messages: Sequence[Sequence[Any]]) -> None:
    """Insert sessions and message rows (:data:`MESSAGE_COLUMNS`, ids kept) as they are."""
    cols = ", ".join(MESSAGE_COLUMNS)
    binds = ", ".join(f":{c}" for c in MESSAGE_COLUMNS)
    with engine.begin() as conn:
        for sid in sessions:
            conn.execute(text("INSERT INTO sessions (id, started_at) VALUES (:id, 0)"), {"id": sid})
        if messages:
            conn.execute(
                text(f"INSERT INTO messages ({cols}) VALUES ({binds})"),
                [dict(zip(MESSAGE_COLUMNS, row, strict=True)) for row in messages],
            )
        # Ids were given: the sequence must continue after them.
        conn.execute(
            text(
                "SELECT setval(pg_get_serial_sequence('messages', 'id'),"
                " coalesce((SELECT max(id) FROM messages), 0) + 1, false)"
            )
        )
        conn.execute(text("ANALYZE messages"))
