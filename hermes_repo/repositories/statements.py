"""One statement, two ways to run it: through SQLAlchemy, or on the driver's cursor.

The hot paths (one append per transaction, a selective search) run their statements
straight on the DB-API cursor: there SQLAlchemy's per-statement machinery costs more
than SQLite's own work. Every other caller runs the same statements through
SQLAlchemy (its events classify errors and guard a quarantined file). A repository is
built on either; the choice between the two is made here, from what it was given, and
nowhere else. Driver errors from a cursor surface unwrapped: the write core classifies
them (see :mod:`hermes_repo.database`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from sqlalchemy import text
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.engine.interfaces import DBAPICursor
from sqlalchemy.sql.expression import Executable, TextClause

from ..backend import backend_of

if TYPE_CHECKING:
    # Only a type here: the read commands search on a driver cursor and must not load
    # the ORM (an ORM session is told from a cursor without its class, see _on_cursor).
    from sqlalchemy.orm import Session

__all__ = ["Cursor", "Db", "Statement", "execute", "fetch", "on_cursor", "on_server_cursor", "rows"]

# Both drivers (sqlite3, pysqlite3) take named parameters (":name") with a mapping.
_DIALECT = SQLiteDialect_pysqlite(paramstyle="named")


Cursor = DBAPICursor
"""A DB-API cursor (of the store's driver)."""

Db: TypeAlias = "Connection | Session | Cursor"
"""What a repository runs on: an SQLAlchemy connection or ORM session, or a driver cursor."""


class Statement:
    """A statement defined once (as SQLAlchemy Core) with its SQL text for a cursor.

    The text is compiled once, at import: building or compiling a statement per call
    cost more than executing it.
    """

    __slots__ = ("_keys", "_server_sql", "clause", "sql")

    def __init__(self, clause: Executable, *, column_keys: Sequence[str] | None = None) -> None:
        self.clause = clause
        keys = list(column_keys) if column_keys is not None else None
        self._keys = keys
        self.sql = str(clause.compile(dialect=_DIALECT, column_keys=keys))  # type: ignore[attr-defined]
        self._server_sql: str | None = None

    @property
    def server_sql(self) -> str:
        """The text for a PostgreSQL (psycopg) cursor, compiled on first use: exactly
        what SQLAlchemy's psycopg dialect sends for :attr:`clause` (its parameter casts
        included), so the cursor path and the SQLAlchemy path run the same statement."""
        if self._server_sql is None:
            from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

            dialect = PGDialect_psycopg()  # type: ignore[no-untyped-call]
            compiled = self.clause.compile(  # type: ignore[attr-defined]
                dialect=dialect, column_keys=self._keys
            )
            self._server_sql = str(compiled)
        return self._server_sql

    @classmethod
    def of_text(cls, sql: str) -> Statement:
        """A statement written as SQL text (named parameters)."""
        return cls(text(sql))


def _on_cursor(db: Db) -> bool:
    # A DB-API cursor fetches; neither a Connection nor an ORM Session has fetchall.
    return not isinstance(db, Connection) and hasattr(db, "fetchall")


def on_cursor(db: Db) -> bool:
    """True for a DB-API cursor (the store's fast paths), False through SQLAlchemy."""
    return _on_cursor(db)


def on_server_cursor(db: Db) -> bool:
    """True for a psycopg cursor (the one-message append's path on a server)."""
    return type(db).__module__.split(".", 1)[0] == "psycopg"


def execute(
    db: Db, stmt: Statement, params: Mapping[str, Any] | Sequence[Mapping[str, Any]]
) -> tuple[int, int | None]:
    """Run a statement (many times for a list of parameter sets); its rowcount and the
    last inserted row id (None after a list). Parameters are the driver's values (what
    a cursor is given), never values needing SQLAlchemy's type processing."""
    if _on_cursor(db):
        cursor = cast(Cursor, db)
        if on_server_cursor(db):
            if not isinstance(params, Mapping):
                cursor.executemany(stmt.server_sql, params)
                return cursor.rowcount, None
            # psycopg has no lastrowid: an INSERT written with RETURNING gives its key.
            cursor.execute(stmt.server_sql, params)
            if cursor.description is None:
                return cursor.rowcount, None
            found = cursor.fetchone()
            return cursor.rowcount, None if found is None else found[0]
        if isinstance(params, Mapping):
            cursor.execute(stmt.sql, params)
        else:
            cursor.executemany(stmt.sql, params)
        return cursor.rowcount, cursor.lastrowid
    if (
        not isinstance(params, Mapping)
        and isinstance(db, Connection)
        and backend_of(db).cursor_fast_path
    ):
        # Many rows through SQLAlchemy's driver-level call: the same events (error
        # classification, the quarantine guard) without its per-row parameter
        # processing, which cost a sixth of a bulk insert. The values are already the
        # driver's (as on a cursor), and SQLite's drivers bind the named parameters.
        many = db.exec_driver_sql(stmt.sql, list(params))
        return many.rowcount, None
    result = cast(CursorResult[Any], cast("Connection | Session", db).execute(stmt.clause, params))
    if backend_of(result.context.dialect).has_lastrowid:
        return result.rowcount, result.lastrowid
    # psycopg has no lastrowid: the dialect's RETURNING gave the new key of an insert.
    if not result.is_insert or result.context.executemany:
        return result.rowcount, None
    key = result.inserted_primary_key
    return result.rowcount, None if key is None else key[0]


def fetch(db: Db, sql: str | TextClause, params: Mapping[str, Any]) -> list[Any]:
    """Every row a query returns."""
    if _on_cursor(db):
        cursor = cast(Cursor, db)
        cursor.execute(sql if isinstance(sql, str) else sql.text, params)
        return list(cursor.fetchall())
    clause = text(sql) if isinstance(sql, str) else sql
    return list(cast("Connection | Session", db).execute(clause, params))


def rows(db: Db, stmt: Statement, params: Mapping[str, Any]) -> Sequence[Any]:
    """Every row of a query defined as a :class:`Statement`, as tuples (or rows that
    unpack like them).

    On a cursor the rows come in one ``fetchall``: the driver builds them in C, where
    SQLAlchemy's result fetched and wrapped them one at a time (most of a long load).
    """
    if _on_cursor(db):
        cursor = cast(Cursor, db)
        cursor.execute(stmt.sql, params)
        return cursor.fetchall()
    return cast("Connection | Session", db).execute(stmt.clause, params).all()
