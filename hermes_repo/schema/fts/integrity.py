"""Checking the full-text indexes, and recreating them from the canonical rows.

These run in the caller's transaction; a failed recreate raises and the caller rolls
the whole thing back. The *rebuild* (the guarded operation that decides when an index
may be recreated, backs the store up and records its attempts) is
:mod:`hermes_repo.maintenance.fts_rebuild`, which calls :func:`recreate`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .ddl import INDEXES, FtsIndex, trigger_statements
from .stale import STALE_KEY

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection


def integrity_errors(conn: Connection, indexes: Iterable[FtsIndex] = INDEXES) -> dict[str, str]:
    """Run each index's ``'integrity-check'``; returns {index: error} for the failing ones.

    The check runs with ``rank = 1``, which also compares the index with its content
    view, so it catches an index that silently fell behind the canonical rows. Without
    that argument FTS5 checks only the index's internal consistency: an index missing
    rows, or with a zeroed structure or a lost averages record, passes.
    """
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    failures: dict[str, str] = {}
    for ix in indexes:
        try:
            with conn.begin_nested():
                conn.execute(
                    text(f"INSERT INTO {ix.name}({ix.name}, rank) VALUES ('integrity-check', 1)")
                )
        except DBAPIError as exc:
            failures[ix.name] = str(exc.orig).splitlines()[0] if exc.orig else str(exc)
    return failures


def reset_shadow_tables(conn: Connection, ix: FtsIndex) -> None:
    """Put an index's shadow tables back to the state of a new, empty index.

    When the structure record (id 10) or the config version is damaged, FTS5's
    constructor fails, and with it ``DROP TABLE`` and ``'rebuild'``. Writing the empty
    structure record and a valid version by hand makes the table constructible again.
    """
    from sqlalchemy import text

    data, idx, docsize, config = ix.shadow_tables
    conn.execute(text(f"INSERT OR REPLACE INTO {config} (k, v) VALUES ('version', 4)"))
    conn.execute(text(f"DELETE FROM {data}"))
    conn.execute(text(f"DELETE FROM {idx}"))
    conn.execute(text(f"DELETE FROM {docsize}"))
    conn.execute(text(f"INSERT INTO {data} (id, block) VALUES (1, x''), (10, x'00000000000000')"))


def recreate(conn: Connection, indexes: Iterable[FtsIndex] = INDEXES) -> None:
    """Recreate the indexes from the runtime DDL and refill them, in the caller's transaction.

    Order: make each table constructible, drop it and its view, create both anew, run
    ``'rebuild'`` from the canonical rows, verify with ``'integrity-check'``, and only
    then create the triggers. Any failure raises; the caller rolls the whole thing back.
    """
    from sqlalchemy import text

    present = {
        r[0] for r in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))
    }
    for ix in indexes:
        for name in ix.trigger_names:
            conn.execute(text(f"DROP TRIGGER IF EXISTS {name}"))
        if set(ix.shadow_tables) <= present:
            reset_shadow_tables(conn, ix)
        conn.execute(text(f"DROP TABLE IF EXISTS {ix.name}"))
        conn.execute(text(f"DROP VIEW IF EXISTS {ix.source_view}"))
        conn.execute(text(ix.view_ddl()))
        conn.execute(text(ix.table_ddl()))
        conn.execute(text(f"INSERT INTO {ix.name}({ix.name}) VALUES ('rebuild')"))
    failures = integrity_errors(conn, indexes)
    if failures:
        raise RuntimeError(f"FTS integrity-check failed after rebuild: {failures}")
    for statement in trigger_statements(indexes):
        conn.execute(text(statement))
    conn.execute(text("DELETE FROM state_meta WHERE key = :k"), {"k": STALE_KEY})
