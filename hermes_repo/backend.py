"""What differs between the databases a store runs on, answered in one place.

The SQLite rules of the write core (quarantine of a damaged file, detaching a damaged
FTS5 index, the driver-cursor fast paths, ``BEGIN IMMEDIATE``) belong to a store
*file*. On a PostgreSQL server none of them applies: the server keeps its own files,
full-text search is kept by the database, and writers interleave. The small statements
that differ (an upsert's construct, a session insert racing another host, a row lock's
wait, the id sequence after explicit ids, text that refuses U+0000) differ here too.

One :class:`Backend` subclass per dialect, one instance each (:data:`SQLITE`,
:data:`POSTGRESQL`); :func:`backend_of` is the one place that maps a connection to its
backend. Code elsewhere asks the backend, never the dialect's name. SQLAlchemy is
imported by the operations that use it, not here: the CLI loads this module to start.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .errors import IntegrityViolation

if TYPE_CHECKING:
    from sqlalchemy import Table
    from sqlalchemy.engine import Connection, Dialect
    from sqlalchemy.orm import Session

__all__ = ["POSTGRESQL", "SQLITE", "Backend", "PostgresBackend", "SqliteBackend", "backend_of"]


class Backend:
    """The database a store runs on, as the write core and the repositories see it."""

    __slots__ = ()

    #: The SQLAlchemy dialect's name (what :func:`backend_of` maps from).
    name: ClassVar[Literal["sqlite", "postgresql"]]
    #: An embedded database file (SQLite): the store owns its bytes, a holder lock file
    #: sits next to it, and its snapshots, salvage and file checks apply.
    is_file: ClassVar[bool]
    #: A structurally damaged file is quarantined (never on a server: its files are the
    #: server's, and it reports damage as errors of its own).
    may_quarantine: ClassVar[bool]
    #: Search is kept by FTS5 triggers that a damaged index makes the store detach.
    has_fts_triggers: ClassVar[bool]
    #: Which dialect of :mod:`hermes_repo.repositories.search` runs the store's searches.
    search_dialect: ClassVar[Literal["fts5", "postgresql"]]
    #: The one-message append and the hot reads run their SQL straight on the driver's
    #: cursor. On SQLite SQLAlchemy's per-statement cost exceeded SQLite's own work; on
    #: a server the round trips dominate, so PostgreSQL takes the SQLAlchemy Core path
    #: (its events and disconnect handling included).
    cursor_fast_path: ClassVar[bool]
    #: A read transaction that starts writing after another writer committed is refused
    #: (SQLite: one writer at a time, a stale snapshot cannot write). On a server,
    #: transactions interleave: a read-then-write unit must lock what it read.
    refuses_stale_writes: ClassVar[bool]
    #: Text columns cannot hold U+0000 (PostgreSQL): a row holding it is refused before
    #: the write, naming the field, instead of failing in the driver on every replay.
    refuses_nul_text: ClassVar[bool]
    #: An insert's new key is the cursor's ``lastrowid`` (else: the dialect's RETURNING).
    has_lastrowid: ClassVar[bool]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def insert(self, table: Table) -> Any:
        """An INSERT of ``table`` with the dialect's ``ON CONFLICT`` clauses (an upsert:
        ``on_conflict_do_update`` / ``on_conflict_do_nothing``)."""
        raise NotImplementedError

    def insert_racing(
        self, db: Connection | Session, create: Callable[[], object], exists: Callable[[], bool]
    ) -> bool:
        """Run ``create`` (an insert checked absent just before); True when it inserted,
        False when another writer inserted the same key in between."""
        raise NotImplementedError

    def limit_lock_wait(self, conn: Connection, ms: int) -> None:
        """Make the transaction wait at most ``ms`` for any one row lock (SQLite: its
        busy timeout covers the whole database, nothing to set)."""

    def continue_ids(self, conn: Connection, table: str, column: str) -> None:
        """After rows were inserted with explicit ids, make the next generated id follow
        the largest one (SQLite's rowid does by itself)."""

    def take_turns(self, conn: Connection, key: str) -> None:
        """Until the transaction ends, hold a lock named ``key`` that other transactions
        taking the same key wait for (SQLite: a writer holds the whole database already,
        BEGIN IMMEDIATE, nothing to take)."""


class SqliteBackend(Backend):
    """An SQLite store file."""

    __slots__ = ()

    name = "sqlite"
    is_file = True
    may_quarantine = True
    has_fts_triggers = True
    search_dialect = "fts5"
    cursor_fast_path = True
    refuses_stale_writes = True
    refuses_nul_text = False
    has_lastrowid = True

    def insert(self, table: Table) -> Any:
        from sqlalchemy.dialects import sqlite

        return sqlite.insert(table)

    def insert_racing(
        self, db: Connection | Session, create: Callable[[], object], exists: Callable[[], bool]
    ) -> bool:
        # Writers are serialised (BEGIN IMMEDIATE): nobody inserts it in between.
        create()
        return True


class PostgresBackend(Backend):
    """A PostgreSQL server."""

    __slots__ = ()

    name = "postgresql"
    is_file = False
    may_quarantine = False
    has_fts_triggers = False
    search_dialect = "postgresql"
    cursor_fast_path = False
    refuses_stale_writes = False
    refuses_nul_text = True
    has_lastrowid = False

    def insert(self, table: Table) -> Any:
        # Imported on a server only, where its engine has loaded it already: it costs a
        # tenth of a second, a SQLite command's whole budget.
        from sqlalchemy.dialects import postgresql

        return postgresql.insert(table)

    def insert_racing(
        self, db: Connection | Session, create: Callable[[], object], exists: Callable[[], bool]
    ) -> bool:
        # Another host may insert it between the check and the insert (the first flush
        # of a session on several hosts at once): the insert runs in a savepoint, and
        # losing that race means the row exists, as asked.
        from sqlalchemy.exc import IntegrityError

        try:
            with db.begin_nested():
                create()
        except (IntegrityError, IntegrityViolation):
            if exists():
                return False
            raise
        return True

    def limit_lock_wait(self, conn: Connection, ms: int) -> None:
        # SET LOCAL: the transaction's own setting, so safe behind a transaction-mode
        # pooler. SET takes no bind parameters; the value is an int of ours.
        from sqlalchemy import text

        conn.execute(text(f"SET LOCAL lock_timeout = {int(ms)}"))

    def take_turns(self, conn: Connection, key: str) -> None:
        # Writers interleave under READ COMMITTED: a transaction-scoped advisory lock
        # orders the ones that name the same key (released at COMMIT or ROLLBACK).
        from sqlalchemy import text

        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:key))"), {"key": key})

    def continue_ids(self, conn: Connection, table: str, column: str) -> None:
        # Explicit ids do not move the id sequence: the next insert would reuse one.
        from sqlalchemy import text

        conn.execute(
            text(
                f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'), "
                f"(SELECT max({column}) FROM {table}))"
            )
        )


SQLITE: Backend = SqliteBackend()
POSTGRESQL: Backend = PostgresBackend()
_BY_DIALECT: dict[str, Backend] = {SQLITE.name: SQLITE, POSTGRESQL.name: POSTGRESQL}


def backend_of(db: Connection | Session | Dialect | Any) -> Backend:
    """The backend of a connection, an ORM session (its bind) or a dialect: the one
    place a dialect's name is read."""
    dialect: Any = getattr(db, "dialect", None)
    if dialect is None:
        get_bind = getattr(db, "get_bind", None)
        dialect = db if get_bind is None else get_bind().dialect
    return _BY_DIALECT[dialect.name]
