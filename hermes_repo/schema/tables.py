"""The canonical tables, and counting their rows the same way everywhere."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["CANONICAL_TABLES", "COUNT_SQL", "store_counts", "table_counts"]

#: The tables whose rows are the store's data. Everything else (the FTS indexes, the
#: Alembic version) is derived or rebuilt, so damage checks and counts look at these.
CANONICAL_TABLES = ("sessions", "messages", "state_meta")

#: What an operator compares before and after a repair, a restore or a salvage.
COUNT_SQL = {
    "sessions": "SELECT count(*) FROM sessions",
    "messages": "SELECT count(*) FROM messages",
    "active_messages": "SELECT count(*) FROM messages WHERE active = 1",
}


class _Cursorish(Protocol):
    def execute(self, sql: str, /) -> Any: ...


def _scalar(conn: Any, sql: str) -> int:
    # A SQLAlchemy Connection runs raw SQL through exec_driver_sql; a DB-API
    # connection (a read-only copy, a backup target) through execute.
    run = getattr(conn, "exec_driver_sql", None)
    if run is not None:
        return int(run(sql).scalar_one())
    return int(conn.execute(sql).fetchone()[0])


def store_counts(conn: Any) -> dict[str, int]:
    """``sessions``, ``messages`` and ``active_messages`` of a store.

    ``conn`` is a SQLAlchemy ``Connection`` or a DB-API connection.
    """
    return {name: _scalar(conn, sql) for name, sql in COUNT_SQL.items()}


def table_counts(conn: Any, tables: tuple[str, ...] = CANONICAL_TABLES) -> dict[str, int]:
    """Row counts of ``tables`` (default: the canonical ones)."""
    return {name: _scalar(conn, f'SELECT count(*) FROM "{name}"') for name in tables}
