"""The SQLite search dialect: FTS5's word (unicode61) and trigram indexes.

What differs from PostgreSQL, and only that: terms become FTS5 string literals (quoted
phrases, never syntax), bm25 ranks, ``snippet()`` cuts the snippets, ``LIKE`` folds
ASCII case only, and the index may be detached (damaged, awaiting a rebuild): the probe
reads the schema cookie, and a :class:`~.liveness.IndexLiveness` says whether the index
is live at it. The routing is :class:`~.router.SearchRouter`'s.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from ...schema import fts
from ...schema.fts import text_projection
from ..statements import Cursor, Db
from .fts5_sql import PROBE, RANK_ALL, RANK_TOP, facts_sql, inline_counts, is_cursor, run_query
from .hits import WINDOW_CHARS, SearchHit, like_hit, merge_hits, row_hit
from .liveness import IndexLiveness
from .query import SNIPPET_CLOSE, SNIPPET_OPEN, fts_phrase, like_pattern
from .request import SearchQuery
from .router import CANDIDATE_CAP, Probe, filters

__all__ = ["Fts5Dialect"]

_SNIPPET_TOKENS = 12
_WORDS, _TRIGRAM = fts.INDEXES
_ABOVE_ALL = 2**63 - 1  # the keyset bound of an unbounded newest-first query
_SNIP = f"snippet(messages_fts, -1, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '…', {_SNIPPET_TOKENS})"


class Fts5Dialect:
    """Runs search routes on an SQLite connection (a read transaction, or none: each
    query is one consistent read on its own), or on a driver cursor (see
    :mod:`..statements`): a selective search costs ~0.1 ms in SQLite and SQLAlchemy's
    per-statement machinery would triple it. On a cursor, driver errors surface
    unwrapped; the caller classifies them (FTS damage, quarantine).

    ``liveness`` ties the search to its store's view of the FTS indexes (see
    :class:`~.liveness.IndexLiveness`); without it the indexes are taken as live.
    """

    __slots__ = ("_cursor", "_db", "_liveness")

    def __init__(self, db: Db | Cursor, liveness: IndexLiveness | None = None) -> None:
        self._db = db
        self._liveness = liveness
        # A driver cursor is sent each statement directly: the per-statement dispatch of
        # run_query was a tenth of a selective search's Python.
        self._cursor: Any = db if is_cursor(db) else None

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Any]:
        cursor = self._cursor
        if cursor is None:
            return run_query(self._db, sql, params)
        get = params.get
        cursor.execute(inline_counts(sql, get("limit"), get("cap"), get("n")), params)
        return cursor.fetchall()  # type: ignore[no-any-return]

    def _run(self, sql: str, params: dict[str, Any]) -> list[SearchHit]:
        return [row_hit(r) for r in self._rows(sql, params)]

    def accepts(self, query: SearchQuery) -> bool:
        return True

    def probe(self, query: SearchQuery, words: list[str], *, bound: int | None) -> Probe:
        """The schema cookie, the indexes with rows beyond their cap and, while the index
        is live as last seen, each phrase's bounded count: one statement."""
        phrases = [fts_phrase(t) for t in words] if bound is not None else []
        liveness = self._liveness
        guarded = liveness is not None
        if liveness is not None and liveness.live_at is None:
            phrases = []  # not live as last seen: never read the index before is_live
        params: dict[str, Any] = {f"ph{i}": p for i, p in enumerate(phrases)}
        if phrases:
            params["n"] = bound
            if liveness is not None:
                params["seen"] = liveness.live_at
        row = self._rows(facts_sql(len(phrases), guarded), params)[0]
        n_ix = len(fts.INDEXES)
        long_rows = frozenset(
            ix.name for ix, hit in zip(fts.INDEXES, row[1 : 1 + n_ix], strict=True) if hit
        )
        probes = row[1 + n_ix :]
        live = liveness is None or liveness.is_live(self._db, int(row[0]))
        if not phrases or None in probes:
            return Probe(live=live, long_rows=long_rows)
        counts = tuple(int(c) for c in probes)
        return Probe(live, None, max(counts) >= (bound or 0), long_rows, counts)

    def count(self, probe: Probe, words: list[str], *, bound: int) -> Probe:
        """Each term's bounded count, one statement each (the probe took none)."""
        counts = tuple(
            int(self._rows(PROBE, {"phrase": fts_phrase(t), "n": bound})[0][0]) for t in words
        )
        return Probe(probe.live, None, max(counts) >= bound, probe.long_rows, counts)

    def words(
        self,
        query: SearchQuery,
        words: list[str],
        signs: list[str],
        probe: Probe,
        *,
        ranked: bool,
    ) -> list[SearchHit]:
        """The word index's hits merged with those of the rows beyond its cap."""
        where, params = filters(query)
        params["limit"] = int(query.limit)
        params["match"] = " ".join(fts_phrase(t) for t in words)
        for i, sign in enumerate(signs):
            # Part of the filters, so the ranked path's candidates all hold every sign.
            where += f" AND {text_projection('m')} LIKE :s{i} ESCAPE '\\'"
            params[f"s{i}"] = like_pattern(sign)
        if ranked:
            hits = self._ranked(where, params, probe.counts or ())
        else:
            before = _ABOVE_ALL if query.before_id is None else int(query.before_id)
            hits = self._run(_newest(where), {**params, "before": before})
        if _WORDS.name not in probe.long_rows:
            return hits  # no row beyond the index's cap: nothing to merge
        more = self._beyond_cap(_WORDS, query, probe)
        return merge_hits(hits, more, query.limit, by_recency=query.paged)

    def _ranked(
        self, where: str, params: dict[str, Any], counts: tuple[int, ...]
    ) -> list[SearchHit]:
        # Every hit returned (RANK_ALL): one scan ranks them and cuts each one's snippet.
        # Otherwise (RANK_TOP) the snippet, which tokenizes the whole row, is cut for the
        # returned rows only: a second scan of the candidates' rowid range.
        sql = _rank_sql(bool(counts) and min(counts) <= params["limit"], where)
        params["cap"] = CANDIDATE_CAP
        ranked = self._run(sql, params)
        want = params["limit"]
        if want <= CANDIDATE_CAP or len(ranked) < CANDIDATE_CAP:
            return ranked
        # The cap bounds what is ranked, never what a caller gets: the hits older than
        # the oldest candidate follow, newest first.
        oldest = min(h.message_id for h in ranked)
        rest = self._run(_newest(where), {**params, "before": oldest, "limit": want - len(ranked)})
        return ranked + rest

    def trigram(
        self,
        query: SearchQuery,
        long_terms: list[str],
        short: list[str],
        probe: Probe,
    ) -> list[SearchHit]:
        where, params = filters(query)
        params["limit"] = int(query.limit)
        params["match"] = " ".join(fts_phrase(t) for t in long_terms)
        likes = ""
        for i, term in enumerate(short):
            likes += f" AND {text_projection('m')} LIKE :p{i} ESCAPE '\\'"
            params[f"p{i}"] = like_pattern(term)
        paged = query.before_id is not None
        if paged:
            params["before"] = int(query.before_id)  # type: ignore[arg-type]
        sql = (
            "SELECT m.id, m.session_id, m.role,"
            f" snippet(messages_fts_trigram, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '…',"
            f" {_SNIPPET_TOKENS}), m.timestamp"
            " FROM messages_fts_trigram JOIN messages AS m ON m.id = messages_fts_trigram.rowid"
            f" WHERE messages_fts_trigram MATCH :match{where}{likes}"
            + (" AND messages_fts_trigram.rowid < :before" if paged else "")
            + " ORDER BY messages_fts_trigram.rowid DESC LIMIT :limit"
        )
        hits = self._run(sql, params)
        more = self._beyond_cap(_TRIGRAM, query, probe)
        return merge_hits(hits, more, query.limit, by_recency=True)

    def like(self, query: SearchQuery, *, where: str = "1 = 1") -> list[SearchHit]:
        """Substring search over the canonical rows (also the path when FTS is detached).

        Only a window of each hit's text around the first term is read into Python, so a
        hit in a 50 MB message costs no 50 MB copy.
        """
        terms = query.terms
        if not terms:
            return []
        conds, params = filters(query)
        params["limit"] = int(query.limit)
        likes = ""
        for i, term in enumerate(terms):
            likes += f" AND {text_projection('m')} LIKE :p{i} ESCAPE '\\'"
            params[f"p{i}"] = like_pattern(term)
        paged = query.before_id is not None
        if paged:
            params["before"] = int(query.before_id)  # type: ignore[arg-type]
        # LIKE folds ASCII case only, and so does SQLite's lower(): the window starts
        # where LIKE matched.
        params["first"] = terms[0]
        body = text_projection("m")
        start = f"max(1, instr(lower({body}), lower(:first)) - {WINDOW_CHARS})"
        sql = (
            f"SELECT m.id, m.session_id, m.role, {start}, substr({body}, {start},"
            f" length(:first) + {2 * WINDOW_CHARS} + 1), length({body}), m.timestamp"
            f" FROM messages AS m WHERE {where}{conds}{likes}"
            + (" AND m.id < :before" if paged else "")
            + " ORDER BY m.id DESC LIMIT :limit"
        )
        return [like_hit(r, terms) for r in self._rows(sql, params)]

    def _beyond_cap(self, ix: fts.FtsIndex, query: SearchQuery, probe: Probe) -> list[SearchHit]:
        """LIKE over the rows longer than ``ix``'s cap, whose end the index does not hold.

        The length condition is the partial index's own: SQLite then visits only those
        rows (none in most stores) instead of measuring every row's text.
        """
        if ix.name not in probe.long_rows:
            return []  # the probe found no such row: nothing to scan
        return self.like(query, where=fts.long_row_condition("m", ix.cap))


@lru_cache(maxsize=256)
def _rank_sql(every_hit: bool, where: str) -> str:
    """The ranked statement for filters ``where``, built once per shape of filters."""
    return (RANK_ALL if every_hit else RANK_TOP).format(snip=_SNIP, filters=where)


@lru_cache(maxsize=256)
def _newest(where: str) -> str:
    """Every word hit newest first below ``:before``, ``:limit`` of them."""
    return (
        f"SELECT m.id, m.session_id, m.role, {_SNIP}, m.timestamp"
        " FROM messages_fts JOIN messages AS m ON m.id = messages_fts.rowid"
        f" WHERE messages_fts MATCH :match{where}"
        " AND messages_fts.rowid < :before"
        " ORDER BY messages_fts.rowid DESC LIMIT :limit"
    )
