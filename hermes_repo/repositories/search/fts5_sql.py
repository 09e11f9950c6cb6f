"""The SQLite search's statements, and how they are sent.

See :mod:`hermes_repo.repositories.search` for the routing and ranking policy, and
:mod:`.fts5` for the dialect that sends them.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

from sqlalchemy.engine import Connection

from ...schema import fts
from ..statements import Cursor, Db, fetch

__all__ = [
    "PROBE",
    "RANK_ALL",
    "RANK_TOP",
    "facts_sql",
    "inline_counts",
    "is_cursor",
    "run_query",
]

PROBE = (
    "SELECT count(*) FROM (SELECT 1 FROM messages_fts WHERE messages_fts MATCH :phrase LIMIT :n)"
)


@lru_cache(maxsize=64)
def facts_sql(phrases: int, guarded: bool) -> str:
    # The schema cookie, whether any row exceeds each index's cap (the partial index's
    # own condition, so SQLite reads that index: one seek) and the bounded count of
    # each term, in one statement. A count is taken only while the cookie is the one the
    # index was seen live at: SQLite evaluates a CASE branch's subquery only when the
    # branch is taken, so an index another process detached is never read here.
    cols = ["v.schema_version"]
    cols += [
        f"EXISTS (SELECT 1 FROM messages AS m WHERE {fts.long_row_condition('m', ix.cap)})"
        for ix in fts.INDEXES
    ]
    for i in range(phrases):
        probe = (
            "(SELECT count(*) FROM (SELECT 1 FROM messages_fts"
            f" WHERE messages_fts MATCH :ph{i} LIMIT :n))"
        )
        cols.append(f"CASE WHEN v.schema_version = :seen THEN {probe} END" if guarded else probe)
    return "SELECT " + ", ".join(cols) + " FROM pragma_schema_version() AS v"


# Rank the CANDIDATE_CAP newest matches by bm25, snippets cut in the same scan.
RANK_ALL = (
    "SELECT c.id, c.session_id, c.role, c.snip, c.timestamp FROM ("
    " SELECT m.id AS id, m.session_id AS session_id, m.role AS role,"
    " m.timestamp AS timestamp, bm25(messages_fts) AS score, {snip} AS snip"
    " FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid"
    " WHERE messages_fts MATCH :match{filters}"
    " ORDER BY messages_fts.rowid DESC LIMIT :cap"
    ") AS c ORDER BY c.score, c.id DESC LIMIT :limit"
)
# The same ranking; snippets only for the top :limit, from a second scan of the
# candidates' rowid range (MATERIALIZED keeps SQLite from turning that scan into one
# full-text query per row, and ``+`` keeps the IN list out of the index constraints).
RANK_TOP = (
    "WITH c AS MATERIALIZED ("
    " SELECT messages_fts.rowid AS id, bm25(messages_fts) AS score"
    " FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid"
    " WHERE messages_fts MATCH :match{filters}"
    " ORDER BY messages_fts.rowid DESC LIMIT :cap),"
    " t AS MATERIALIZED (SELECT id, score FROM c ORDER BY score, id DESC LIMIT :limit),"
    " s AS MATERIALIZED ("
    " SELECT messages_fts.rowid AS id, {snip} AS snip FROM messages_fts"
    " WHERE messages_fts MATCH :match AND messages_fts.rowid >= (SELECT min(id) FROM t)"
    " AND +messages_fts.rowid IN (SELECT id FROM t))"
    " SELECT m.id, m.session_id, m.role, s.snip, m.timestamp"
    " FROM t JOIN s ON s.id = t.id JOIN messages AS m ON m.id = t.id"
    " ORDER BY t.score, t.id DESC"
)


# Row counts written into the text: with a bound LIMIT SQLite plans the query without
# knowing it, and the bounded count ran 2x slower (0.059 ms against 0.031 ms on a
# 10-hit term); LIMIT and the candidate cap are ints of the library's own, never text.
_INLINED = re.compile(r":(limit|cap|n)\b")


@lru_cache(maxsize=512)
def inline_counts(sql: str, limit: int | None, cap: int | None, n: int | None) -> str:
    """``sql`` with its row counts (``:limit``, ``:cap``, ``:n``) written into the text."""
    values = {"limit": limit, "cap": cap, "n": n}

    def value(m: re.Match[str]) -> str:
        v = values[m.group(1)]
        return m.group(0) if v is None else str(int(v))

    return _INLINED.sub(value, sql)


def run_query(db: Db | Cursor, sql: str, params: dict[str, Any]) -> list[Any]:
    """Every row of a search statement, its row counts (``:limit``, ``:cap``, ``:n``)
    written into the text."""
    get = params.get
    return fetch(db, inline_counts(sql, get("limit"), get("cap"), get("n")), params)


def is_cursor(db: Db | Cursor) -> bool:
    """Whether ``db`` is a driver cursor (statements sent as text, rows in one fetch)."""
    # As statements.fetch decides: neither a Connection nor an ORM Session has fetchall.
    return not isinstance(db, Connection) and hasattr(db, "fetchall")
