"""Full-text search with a safe query language: one router, a dialect per backend.

Any text is a valid query. It is split into terms on whitespace (a balanced "double
quoted" run is one term); every term must match. Terms are passed to FTS5 as quoted
strings, so nothing a user types (quotes, ``NEAR(``, ``*``, ``-``, ``:``, ``^``,
``AND/OR/NOT``) acts as an operator, and LIKE patterns are escaped, so ``%``, ``_`` and
``\\`` are plain characters.

Layout: :class:`~.request.SearchQuery` is one search's arguments (also the page
cursor's fingerprint, :mod:`.paging`); :class:`~.router.SearchRouter` decides the route
below, once for every backend; a :class:`~.router.SearchDialect` builds and runs the
route's statements: :class:`~.fts5.Fts5Dialect` (SQLite's FTS5 indexes, whose liveness
:class:`~.liveness.IndexLiveness` tracks) and :class:`~.postgres.PostgresDialect`
(a generated tsvector and pg_trgm: its index words differ, see docs/search.md).
:mod:`.on_store` runs a store's searches (detaching a damaged FTS5 index once).

Routing (as the FTS5 dialect runs it):

* words (no CJK): the unicode61 index, ranked within bounds. A bounded count of each
  term's rows (it stops at :data:`RANK_CUTOFF` + 1) decides:

  - every term has at most :data:`RANK_CUTOFF` hits: the candidates are the most
    recent :data:`CANDIDATE_CAP` matches (after the filters), ordered by bm25 (ties:
    newest first); snippets are cut for the returned rows only. With a ``limit`` above
    :data:`CANDIDATE_CAP`, the hits older than the oldest candidate follow, newest
    first: the cap bounds what is ranked, never what a caller gets.
  - a term has more: no ranking, every hit newest first. FTS5's bm25 walks every row
    of every term to weigh it (whatever the candidate set), and so does the count:
    bounding both by RANK_CUTOFF keeps every term frequency within a small factor of a
    selective term's time (no cliff at the cutoff).

  The count is of each term's rows in the whole index, before the filters. A word
  query with no hit and terms of 3+ characters falls back to substring search. A term
  without letters or digits (emoji, ``?``, U+FFFD), which unicode61 drops, becomes an
  escaped LIKE condition on the rows the word index finds, so it narrows the hits in
  every role.
* Only such terms (no word, no CJK): a LIKE scan of every row, newest first; the
  trigram index would miss the tool rows it does not hold.
* CJK text and substrings: the trigram index for terms of 3+ characters, most recent
  first; terms of 1-2 characters (which trigram cannot match) become escaped LIKE
  conditions, alone or on top of the trigram candidates. The trigram index holds tool
  rows only when they carry CJK text, so a CJK query finds tool output too, while a
  substring query without CJK restricted to tool rows is a LIKE scan.
* Paging (``before_id``): every route above, newest first by message id, restricted
  to ``message_id < before_id`` (FTS-native ``rowid < ?``), ``limit`` rows; never
  ranked. Whether a word query falls back to substring search is decided for the
  whole query (a page past its last word hit is empty), so pages never mix the two.
* Text beyond an index's cap (``fts.WORD_CAP``, ``fts.TRIGRAM_CAP`` characters of a
  row): the rows longer than the cap, listed by a partial index, are scanned with an
  escaped LIKE and their hits merged in (newest first; after the ranked hits of a
  word query). Only those rows are read, so the scan costs nothing in a store without
  huge messages.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from ..statements import Cursor, Db
from .fts5 import Fts5Dialect
from .hits import SearchHit, merge_hits
from .postgres import PostgresDialect
from .query import (
    MAX_QUERY_CHARS,
    SNIPPET_CLOSE,
    SNIPPET_OPEN,
    fts_phrase,
    like_pattern,
    parse_query,
)
from .request import SearchQuery
from .router import (
    CANDIDATE_CAP,
    COMPACTED_REASON,
    LIVE_OR_COMPACTED,
    RANK_CUTOFF,
    SearchDialect,
    SearchRouter,
)

__all__ = [
    "CANDIDATE_CAP",
    "COMPACTED_REASON",
    "LIVE_OR_COMPACTED",
    "MAX_QUERY_CHARS",
    "RANK_CUTOFF",
    "SNIPPET_CLOSE",
    "SNIPPET_OPEN",
    "Fts5Dialect",
    "PgSearchRepository",
    "PostgresDialect",
    "SearchDialect",
    "SearchHit",
    "SearchQuery",
    "SearchRepository",
    "SearchRouter",
    "fts_phrase",
    "like_pattern",
    "merge_hits",
    "parse_query",
]


class SearchRepository:
    """Searches on one connection (SQLite: also a driver cursor), in the caller's
    transaction or none: :class:`SearchRouter` over the dialect of ``db`` (FTS5 unless
    one is given). The store's own searches go through its write core instead, which
    also tracks and detaches a damaged FTS5 index."""

    def __init__(self, db: Db | Cursor, dialect: SearchDialect | None = None) -> None:
        self._router = SearchRouter(Fts5Dialect(db) if dialect is None else dialect)

    def search(
        self, query: str | SearchQuery, *, use_fts: bool = True, **arguments: Any
    ) -> list[SearchHit]:
        """The hits of ``query``: a :class:`SearchQuery`, or its text with the other
        fields of :class:`SearchQuery` as keywords (``limit``, ``session_id``, ``role``,
        ``include_inactive``, ``before_id``). ``use_fts=False`` answers from the rows
        alone (LIKE)."""
        if not isinstance(query, SearchQuery):
            query = SearchQuery(query, **arguments)
        return self._router.search(query, use_fts=use_fts)


class PgSearchRepository(SearchRepository):
    """:class:`SearchRepository` on a PostgreSQL connection."""

    def __init__(self, db: Connection) -> None:
        super().__init__(db, PostgresDialect(db))
