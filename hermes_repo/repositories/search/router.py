"""The one search router: which route a query takes, written once for every backend.

The routes, ranking and paging policy are the package's (:mod:`hermes_repo.repositories.
search`); each backend's :class:`SearchDialect` only builds and runs the statements of a
route (FTS5 or PostgreSQL), so the two backends cannot drift apart in what they decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ...codec import scrub
from ...schema.fts import has_cjk
from .hits import SearchHit
from .query import has_word_char
from .request import SearchQuery

__all__ = [
    "CANDIDATE_CAP",
    "COMPACTED_REASON",
    "LIVE_OR_COMPACTED",
    "RANK_CUTOFF",
    "Probe",
    "SearchDialect",
    "SearchRouter",
    "filters",
]

#: The most recent matches of a word query that are ranked (the rest follow, newest first).
CANDIDATE_CAP = 200
#: A term with more hits than this is not ranked: results come newest first.
RANK_CUTOFF = 2000
#: The rows a search covers unless asked for every row: the live ones, and history Hermes
#: compacted away (imported as archived with this reason). Hermes' own search finds
#: compacted history by default, so after a migration it is still found; rows rewound,
#: undone, deleted in the source or archived by a repair here stay out.
COMPACTED_REASON = "hermes: compacted"
LIVE_OR_COMPACTED = f"(m.active = 1 OR m.archive_reason = '{COMPACTED_REASON}')"


@dataclass(frozen=True)
class Probe:
    """What a dialect learnt in one round trip before the search ran.

    ``live``: the index may be read (False: detached, search the rows themselves).
    ``searchable``: for each word term, whether the index holds a word of it (None:
    every term). ``common``: whether a term reached the count bound (None: not
    counted). ``long_rows``: the indexes that have rows beyond their cap. ``counts``:
    each term's bounded count, when the dialect's ranked statement uses them.
    """

    live: bool = True
    searchable: tuple[bool, ...] | None = None
    common: bool | None = None
    long_rows: frozenset[str] = frozenset()
    counts: tuple[int, ...] | None = None


class SearchDialect(Protocol):
    """How one backend runs the routes of a search; the router chose the route.

    Every method returns hits newest first unless ``ranked``, merged with the hits of
    the rows beyond the index's cap (which the index does not hold whole).
    """

    def accepts(self, query: SearchQuery) -> bool:
        """Whether any row can match the filters at all (False: no hit, no statement)."""

    def probe(self, query: SearchQuery, words: list[str], *, bound: int | None) -> Probe:
        """Whether the index is live, which of the word terms ``words`` it holds and,
        with a ``bound``, whether one of them has at least ``bound`` hits."""

    def count(self, probe: Probe, words: list[str], *, bound: int) -> Probe:
        """``probe`` with the counts it lacks (an index not live when last seen)."""

    def words(
        self,
        query: SearchQuery,
        words: list[str],
        signs: list[str],
        probe: Probe,
        *,
        ranked: bool,
    ) -> list[SearchHit]:
        """Every word of ``words`` through the word index, each of ``signs`` (terms
        without a word for that index) as a substring of the same rows."""

    def trigram(
        self,
        query: SearchQuery,
        long_terms: list[str],
        short: list[str],
        probe: Probe,
    ) -> list[SearchHit]:
        """``long_terms`` (3+ characters) through the substring index, ``short`` as
        substrings of the same rows."""

    def like(self, query: SearchQuery) -> list[SearchHit]:
        """Every term as an escaped substring of the rows themselves (no index)."""


def filters(query: SearchQuery) -> tuple[str, dict[str, Any]]:
    """The filters' SQL (``AND ...`` on ``messages AS m``) and parameters, alike on both
    backends; the keyset bound of a page is each dialect's own."""
    clauses, params = [], {}
    if not query.include_inactive:
        clauses.append(LIVE_OR_COMPACTED)
    if query.session_id is not None:
        clauses.append("m.session_id = :session_id")
        params["session_id"] = scrub(query.session_id)  # a lone surrogate cannot be bound
    if query.role is not None:
        clauses.append("m.role = :role")
        params["role"] = scrub(query.role)
    return "".join(f" AND {c}" for c in clauses), params


class SearchRouter:
    """Routes each query (see :mod:`hermes_repo.repositories.search`) and has
    ``dialect`` run the route's statements."""

    __slots__ = ("dialect",)

    def __init__(self, dialect: SearchDialect) -> None:
        self.dialect = dialect

    def search(self, query: SearchQuery, *, use_fts: bool = True) -> list[SearchHit]:
        """The hits of ``query``; ``use_fts=False`` answers from the rows alone (LIKE)."""
        d = self.dialect
        terms = query.terms
        if not terms or query.limit <= 0 or not d.accepts(query):
            return []
        if not use_fts:
            return d.like(query)
        # ASCII terms (most queries) hold no CJK: the regex runs only on the others.
        cjk = any(not t.isascii() and has_cjk(t) for t in terms)
        word_terms = [] if cjk else [t for t in terms if has_word_char(t)]
        bound = None if query.paged else RANK_CUTOFF + 1
        probe = d.probe(query, word_terms, bound=bound)
        if not probe.live:
            return d.like(query)
        if word_terms:
            return self._words(query, word_terms, probe)
        if not cjk:
            # Only signs (no letter or digit): no index holds them for every role (tool
            # rows without CJK are not in the trigram index), so the rows are scanned.
            return d.like(query)
        return self._substrings(query, probe)

    def _words(self, query: SearchQuery, word_terms: list[str], probe: Probe) -> list[SearchHit]:
        d = self.dialect
        found = probe.searchable
        if found is None:
            words = word_terms
        else:
            words = [t for t, f in zip(word_terms, found, strict=True) if f]
        # A term the word index holds no word of (emoji, "?", U+FFFD) is checked as a
        # substring of the rows the index finds, which covers every role.
        signs = [t for t in query.terms if t not in words]
        if not words:
            hits = d.like(query)
        else:
            ranked = not query.paged
            if ranked and probe.common is None:
                probe = d.count(probe, words, bound=RANK_CUTOFF + 1)
            if probe.common:
                # Ranking walks every row of every term before it scores one candidate:
                # past RANK_CUTOFF hits that alone costs more than the rest of the query.
                ranked = False
            hits = d.words(query, words, signs, probe, ranked=ranked)
        if hits or any(len(t) < 3 for t in word_terms):
            return hits
        # The substring fallback is decided for the whole query, never per page: a word
        # query with hits newer than this page has simply run out of them.
        if (
            query.paged
            and words
            and d.words(query.page(None, 1), words, signs, probe, ranked=False)
        ):
            return []
        return self._substrings(query, probe)

    def _substrings(self, query: SearchQuery, probe: Probe) -> list[SearchHit]:
        terms = query.terms
        long_terms = [t for t in terms if len(t) >= 3]
        # Tool rows are in the substring index only when they hold CJK, so only a query
        # with CJK can find every matching tool row there.
        if long_terms and (query.role != "tool" or any(has_cjk(t) for t in long_terms)):
            short = [t for t in terms if len(t) < 3]
            return self.dialect.trigram(query, long_terms, short, probe)
        return self.dialect.like(query)
