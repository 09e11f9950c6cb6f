"""Full-text search with a safe query language.

Any text is a valid query. It is split into terms on whitespace (a balanced "double
quoted" run is one term); every term must match. Terms are passed to FTS5 as quoted
strings, so nothing a user types (quotes, ``NEAR(``, ``*``, ``-``, ``:``, ``^``,
``AND/OR/NOT``) acts as an operator, and LIKE patterns are escaped, so ``%``, ``_`` and
``\\`` are plain characters.

Routing:

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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from ..codec import scrub
from ..schema import fts
from ..schema.fts import text_projection
from .search_query import (
    MAX_QUERY_CHARS,
    SNIPPET_CLOSE,
    SNIPPET_OPEN,
    fts_phrase,
    has_word_char,
    like_pattern,
    like_snippet,
    parse_query,
)
from .search_sql import PROBE, RANK_ALL, RANK_TOP, Facts, facts_sql, run_query
from .statements import Cursor

__all__ = [
    "CANDIDATE_CAP",
    "COMPACTED_REASON",
    "LIVE_OR_COMPACTED",
    "MAX_QUERY_CHARS",
    "RANK_CUTOFF",
    "SNIPPET_CLOSE",
    "SNIPPET_OPEN",
    "SearchHit",
    "SearchRepository",
    "fts_phrase",
    "like_pattern",
    "merge_hits",
    "parse_query",
]

CANDIDATE_CAP = 200
#: The rows a search covers unless asked for every row: the live ones, and history Hermes
#: compacted away (imported as archived with this reason). Hermes' own search finds
#: compacted history by default, so after a migration it is still found; rows rewound,
#: undone, deleted in the source or archived by a repair here stay out.
COMPACTED_REASON = "hermes: compacted"
LIVE_OR_COMPACTED = f"(m.active = 1 OR m.archive_reason = '{COMPACTED_REASON}')"
# A term with more hits than this is not ranked: results come newest first.
RANK_CUTOFF = 2000
_SNIPPET_TOKENS = 12
_WORDS, _TRIGRAM = fts.INDEXES


@dataclass(frozen=True)
class SearchHit:
    """One matching message. ``snippet`` marks the hit with >>> and <<<."""

    message_id: int
    session_id: str
    role: str
    snippet: str
    #: Epoch seconds; None when the stored value is not a number (a row written by
    #: another tool or edited by hand: ``hermes-repo doctor`` names it).
    timestamp: float | None


_new = object.__new__
_set = object.__setattr__


def _hit(r: Any) -> SearchHit:
    """A hit from an (id, session, role, snippet, timestamp) row.

    The frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``:
    for 20 hits that cost more than the pool checkout of a search. One ``__dict__`` set
    builds the same object (equal, hashed and immutable alike).
    """
    hit = _new(SearchHit)
    _set(
        hit,
        "__dict__",
        {
            "message_id": int(r[0]),
            "session_id": r[1],
            "role": r[2],
            "snippet": r[3] or "",
            "timestamp": r[4] if r[4].__class__ is float else _time(r[4]),
        },
    )
    return hit


def _time(stored: Any) -> float | None:
    """A stored timestamp that is not a float: an integer as a float; anything else (text
    or bytes that another tool or a hand edit left there) as None, so one such row never
    fails a search (``hermes-repo doctor`` names it)."""
    if isinstance(stored, int | float) and not isinstance(stored, bool):
        return float(stored)
    return None


# Characters of context read around a LIKE hit's first term (the snippet is cut from it).
_WINDOW_CHARS = 120


def merge_hits(
    hits: list[SearchHit], more: list[SearchHit], limit: int, *, by_recency: bool = False
) -> list[SearchHit]:
    """Add the hits of the rows beyond an index's cap that the index did not return.

    Newest first when both lists are (trigram, LIKE); after the ranked ones otherwise.
    """
    seen = {h.message_id for h in hits}
    extra = [h for h in more if h.message_id not in seen]
    if not extra:
        return hits
    merged = hits + extra
    if by_recency:
        merged.sort(key=lambda h: h.message_id, reverse=True)
    return merged[:limit]


# The keyset bound of an unbounded newest-first query: above every rowid.
_ABOVE_ALL = 2**63 - 1


class SearchRepository:
    """Runs searches on a connection (a read transaction, or none: each query is one
    consistent read on its own), or on a driver cursor (see :mod:`.statements`): a
    selective search costs ~0.1 ms in SQLite and SQLAlchemy's per-statement machinery
    would triple it. On a cursor, driver errors surface unwrapped; the caller classifies
    them (FTS damage, quarantine).

    ``live_at`` and ``is_live`` tie the search to its caller's view of the FTS indexes:
    ``live_at`` is the schema cookie at which they were last seen live (None: not live,
    or not known), ``is_live(cookie)`` says whether they are live at the cookie the
    search reads. Without ``is_live`` the indexes are taken as live.
    """

    def __init__(
        self,
        db: Connection | Cursor,
        *,
        live_at: int | None = None,
        is_live: Callable[[int], bool] | None = None,
    ) -> None:
        self._db = db
        self._live_at = live_at
        self._is_live = is_live
        self._known = Facts(0, frozenset(ix.name for ix in fts.INDEXES), None)

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return run_query(self._db, sql, params)

    def search(
        self,
        query: str,
        *,
        limit: int = 20,
        session_id: str | None = None,
        role: str | None = None,
        include_inactive: bool = False,
        use_fts: bool = True,
        before_id: int | None = None,
    ) -> list[SearchHit]:
        """Search; ``use_fts=False`` answers from the canonical rows alone (LIKE).

        ``before_id`` None: the relevance policy (module docstring). An int: a keyset
        page, the hits with ``message_id < before_id``, newest first, ``limit`` of them.
        """
        terms = parse_query(query)
        if not terms or limit <= 0:
            return []
        filters, params = self._filters(session_id, role, include_inactive)
        params["limit"] = int(limit)
        paged = before_id is not None
        if paged:
            params["before"] = int(before_id)  # type: ignore[arg-type]
        cjk = any(fts.has_cjk(t) for t in terms)
        word_terms = [t for t in terms if has_word_char(t)]
        probed = [] if not use_fts or paged or cjk else word_terms
        self._known = self._facts([fts_phrase(t) for t in probed])
        if use_fts and self._is_live is not None:
            use_fts = self._is_live(self._known.cookie)
        if not use_fts:
            return self._like(terms, filters, params)
        if not cjk and word_terms:
            # A token without letters or digits (emoji, "?", U+FFFD) is no word to
            # unicode61, and the trigram index skips most tool rows: it is checked with
            # LIKE on the rows the word index finds, which covers every role.
            signs = [t for t in terms if not has_word_char(t)]
            hits = self._word_hits(word_terms, signs, terms, filters, params)
            if hits or any(len(t) < 3 for t in word_terms):
                return hits
            if paged:
                # The fallback is decided for the whole query, never per page: a word
                # query with hits older than this page has simply run out of them.
                first = {k: v for k, v in params.items() if k != "before"}
                if self._word_hits(word_terms, signs, terms, filters, {**first, "limit": 1}):
                    return []
        elif not cjk:
            # Only signs: no index holds them for every role (tool rows without CJK are
            # not in the trigram index), so the rows are scanned, newest first.
            return self._like(terms, filters, params)
        long_terms = [t for t in terms if len(t) >= 3]
        # Tool rows are in the trigram index only when they hold CJK, so only a query
        # with CJK can find every matching tool row there.
        if long_terms and (role != "tool" or any(fts.has_cjk(t) for t in long_terms)):
            short = [t for t in terms if len(t) < 3]
            hits = self._trigram(long_terms, short, filters, params)
            more = self._beyond_cap(_TRIGRAM, terms, filters, params)
            return merge_hits(hits, more, limit, by_recency=True)
        return self._like(terms, filters, params)

    @staticmethod
    def _filters(
        session_id: str | None, role: str | None, include_inactive: bool
    ) -> tuple[str, dict[str, Any]]:
        clauses, params = [], {}
        if not include_inactive:
            clauses.append(LIVE_OR_COMPACTED)
        if session_id is not None:
            clauses.append("m.session_id = :session_id")
            params["session_id"] = scrub(session_id)  # a lone surrogate cannot be bound
        if role is not None:
            clauses.append("m.role = :role")
            params["role"] = scrub(role)
        return "".join(f" AND {c}" for c in clauses), params

    def _word_hits(
        self,
        word_terms: list[str],
        signs: list[str],
        terms: list[str],
        filters: str,
        params: dict[str, Any],
    ) -> list[SearchHit]:
        """The word index's hits merged with those of the rows beyond its cap."""
        paged = "before" in params
        hits = self._words(word_terms, signs, filters, params)
        more = self._beyond_cap(_WORDS, terms, filters, params)
        return merge_hits(hits, more, params["limit"], by_recency=paged)

    def _run(self, sql: str, params: dict[str, Any]) -> list[SearchHit]:
        return [_hit(r) for r in self._rows(sql, params)]

    def _words(
        self, terms: list[str], signs: list[str], filters: str, params: dict[str, Any]
    ) -> list[SearchHit]:
        """Word search for ``terms``; each of ``signs`` (terms without letters or digits,
        which unicode61 drops) must also occur in the row's text."""
        phrases = [fts_phrase(t) for t in terms]
        params = {**params, "match": " ".join(phrases)}
        for i, sign in enumerate(signs):
            # Part of the filters, so the ranked path's candidates all hold every sign.
            filters += f" AND {text_projection('m')} LIKE :s{i} ESCAPE '\\'"
            params[f"s{i}"] = like_pattern(sign)
        snip = (
            f"snippet(messages_fts, -1, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '…',"
            f" {_SNIPPET_TOKENS})"
        )
        newest = (
            f"SELECT m.id, m.session_id, m.role, {snip}, m.timestamp"
            " FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid"
            f" WHERE messages_fts MATCH :match{filters}"
            " AND messages_fts.rowid < :before"
            " ORDER BY messages_fts.rowid DESC LIMIT :limit"
        )
        if "before" in params:
            return self._run(newest, params)
        counts = self._known.counts
        if counts is None or len(counts) != len(phrases):
            # Not probed with the facts: the index was not live when last seen.
            counts = [self._hit_count(p, RANK_CUTOFF + 1) for p in phrases]
        if max(counts) > RANK_CUTOFF:
            # bm25 visits every row of every term before it scores one candidate: past
            # RANK_CUTOFF hits that alone costs more than the rest of the query.
            return self._run(newest, {**params, "before": _ABOVE_ALL})
        if min(counts) <= params["limit"]:
            # Every hit is returned: one scan ranks them and cuts each one's snippet.
            sql = RANK_ALL.format(snip=snip, filters=filters)
        else:
            # The snippet (which tokenizes the whole row) is cut for the returned rows
            # only, not for every candidate: a second scan of the candidates' rowid range.
            sql = RANK_TOP.format(snip=snip, filters=filters)
        ranked = self._run(sql, {**params, "cap": CANDIDATE_CAP})
        want = params["limit"]
        if want <= CANDIDATE_CAP or len(ranked) < CANDIDATE_CAP:
            return ranked
        # The cap bounds what is ranked, never what a caller gets: the hits older than
        # the oldest candidate follow, newest first.
        oldest = min(h.message_id for h in ranked)
        rest = self._run(newest, {**params, "before": oldest, "limit": want - len(ranked)})
        return ranked + rest

    def _facts(self, phrases: list[str]) -> Facts:
        """The schema cookie, the indexes with rows beyond their cap and, while the index
        is live as last seen, each phrase's bounded count: one statement."""
        guarded = self._is_live is not None
        if guarded and self._live_at is None:
            phrases = []  # not live as last seen: never read the index before is_live
        params: dict[str, Any] = {f"ph{i}": p for i, p in enumerate(phrases)}
        if phrases:
            params["n"] = RANK_CUTOFF + 1
            if guarded:
                params["seen"] = self._live_at
        row = self._rows(facts_sql(len(phrases), guarded), params)[0]
        n_ix = len(fts.INDEXES)
        long_rows = frozenset(
            ix.name for ix, hit in zip(fts.INDEXES, row[1 : 1 + n_ix], strict=True) if hit
        )
        probes = list(row[1 + n_ix :])
        counts = None if not phrases or None in probes else [int(c) for c in probes]
        return Facts(int(row[0]), long_rows, counts)

    def _hit_count(self, phrase: str, n: int) -> int:
        """How many rows one term matches, counting stops at ``n``."""
        return int(self._rows(PROBE, {"phrase": phrase, "n": n})[0][0])

    def _trigram(
        self, long_terms: list[str], short: list[str], filters: str, params: dict[str, Any]
    ) -> list[SearchHit]:
        params = {**params, "match": " ".join(fts_phrase(t) for t in long_terms)}
        likes = ""
        for i, term in enumerate(short):
            likes += f" AND {text_projection('m')} LIKE :p{i} ESCAPE '\\'"
            params[f"p{i}"] = like_pattern(term)
        sql = (
            "SELECT m.id, m.session_id, m.role,"
            f" snippet(messages_fts_trigram, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '…',"
            f" {_SNIPPET_TOKENS}), m.timestamp"
            " FROM messages_fts_trigram JOIN messages AS m ON m.id = messages_fts_trigram.rowid"
            f" WHERE messages_fts_trigram MATCH :match{filters}{likes}"
            + (" AND messages_fts_trigram.rowid < :before" if "before" in params else "")
            + " ORDER BY messages_fts_trigram.rowid DESC LIMIT :limit"
        )
        return self._run(sql, params)

    def _like(
        self, terms: list[str], filters: str, params: dict[str, Any], *, where: str = "1 = 1"
    ) -> list[SearchHit]:
        """Substring search over the canonical rows (also the path when FTS is detached).

        Only a window of each hit's text around the first term is read into Python, so a
        hit in a 50 MB message costs no 50 MB copy.
        """
        if not terms:
            return []
        params = dict(params)
        likes = ""
        for i, term in enumerate(terms):
            likes += f" AND {text_projection('m')} LIKE :p{i} ESCAPE '\\'"
            params[f"p{i}"] = like_pattern(term)
        # LIKE folds ASCII case only, and so does SQLite's lower(): the window starts
        # where LIKE matched.
        params["first"] = terms[0]
        body = text_projection("m")
        start = f"max(1, instr(lower({body}), lower(:first)) - {_WINDOW_CHARS})"
        sql = (
            f"SELECT m.id, m.session_id, m.role, {start}, substr({body}, {start},"
            f" length(:first) + {2 * _WINDOW_CHARS} + 1), length({body}), m.timestamp"
            f" FROM messages AS m WHERE {where}{filters}{likes}"
            + (" AND m.id < :before" if "before" in params else "")
            + " ORDER BY m.id DESC LIMIT :limit"
        )
        hits = []
        for r in self._rows(sql, params):
            window, first, total = r[4] or "", int(r[3] or 1), int(r[5] or 0)
            snippet = like_snippet(window, terms)
            if first > 1 and not snippet.startswith("…"):
                snippet = "…" + snippet
            if first - 1 + len(window) < total and not snippet.endswith("…"):
                snippet += "…"
            hits.append(SearchHit(int(r[0]), r[1], r[2], snippet, float(r[6])))
        return hits

    def _beyond_cap(
        self, ix: fts.FtsIndex, terms: list[str], filters: str, params: dict[str, Any]
    ) -> list[SearchHit]:
        """LIKE over the rows longer than ``ix``'s cap, whose end the index does not hold.

        The length condition is the partial index's own: SQLite then visits only those
        rows (none in most stores) instead of measuring every row's text.
        """
        if ix.name not in self._known.long_rows:
            return []  # the facts statement found no such row: nothing to scan
        return self._like(terms, filters, params, where=fts.long_row_condition("m", ix.cap))
