"""Full-text search on PostgreSQL, with the answers of the SQLite search.

Same query language (:func:`.query.parse_query`: any text is a safe query, every term
must match), the same router (:class:`.router.SearchRouter`), so the same routing,
ranking and paging policy; this dialect holds what differs. The indexes are those of
:mod:`hermes_repo.schema.pg_search`:

* words: each term becomes ``phraseto_tsquery`` of its text (ASCII punctuation mapped to
  spaces, as the index reads rows), the terms joined with ``&&``. No user text is ever
  read as tsquery syntax. The newest :data:`.router.CANDIDATE_CAP` matches are ranked
  with ``ts_rank``; a query with a term of more than :data:`.router.RANK_CUTOFF` hits is
  not ranked (newest first), as on SQLite. ``limit`` goes past the ranked candidates:
  further hits follow newest first. A term without a lexeme for PostgreSQL's parser
  (emoji, ``?``, ``½``) is checked with ``LIKE`` on the rows the word index finds. No hit
  and every word term of 3+ characters: substring search, as on SQLite.
* substrings and CJK: ``ILIKE`` on the capped text through the ``pg_trgm`` index, with the
  index's own row filter (tool rows only when they hold CJK, as the SQLite trigram
  index); 1-2 character terms are ``LIKE`` conditions on top, or a scan alone.
* rows longer than :data:`hermes_repo.schema.pg_search.CAP`: a ``LIKE`` scan of just those
  rows (a partial index lists them), merged in.
* ``before_id``: keyset paging, hits below that id, newest first, never ranked.

Case: ``ILIKE`` folds every letter, where SQLite's ``LIKE`` folds ASCII only; a term
without cased letters uses ``LIKE``, which is faster and means the same. The intended
differences from SQLite are listed in docs/search.md.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from ...schema import pg_search
from ..statements import fetch
from .hits import WINDOW_CHARS, SearchHit, like_hit, merge_hits
from .query import SNIPPET_CLOSE, SNIPPET_OPEN, like_pattern
from .request import SearchQuery
from .router import CANDIDATE_CAP, Probe, filters

__all__ = ["PostgresDialect"]

_LONG = "long rows"  # the probe's name for "rows beyond the cap exist"

_BODY = pg_search.search_text("m")
_CAPPED = pg_search.capped_text("m")
_VECTOR = f"m.{pg_search.VECTOR_COLUMN}"
# The partial index's own condition: a query repeating it reads only the long rows.
_LONG_ROWS = pg_search.long_row_condition("m")
_HEADLINE_OPTIONS = pg_search.sql_literal(
    f"StartSel={SNIPPET_OPEN}, StopSel={SNIPPET_CLOSE}, MaxWords=12, MinWords=4,"
    " ShortWord=0, MaxFragments=1, FragmentDelimiter=…"
)


def _phrase(name: str) -> str:
    return f"phraseto_tsquery('{pg_search.CONFIG}', :{name})"


def _caseless(term: str) -> bool:
    """No letter of ``term`` changes with case: ``LIKE`` finds what ``ILIKE`` finds."""
    return term.lower() == term == term.upper()


def _matches(expr: str, name: str, term: str) -> str:
    return f"{expr} {'LIKE' if _caseless(term) else 'ILIKE'} :{name}"


def _headline(expr: str, query: str) -> str:
    return f"ts_headline('{pg_search.CONFIG}', coalesce({expr}, ''), {query}, {_HEADLINE_OPTIONS})"


def _restore(headline: str, span: str) -> str:
    """The headline's marks set on ``span``, the real text it was cut from.

    The headline was made from the text with ASCII punctuation mapped to spaces, one
    character for one, so without its marks it is exactly as long as ``span``; any other
    length means the span was not found, and the headline is kept as it is.
    """
    plain = headline.replace(SNIPPET_OPEN, "").replace(SNIPPET_CLOSE, "")
    if len(plain) != len(span):
        return headline
    out, at, i = [], 0, 0
    while i < len(headline):
        for mark in (SNIPPET_OPEN, SNIPPET_CLOSE):
            if headline.startswith(mark, i):
                out.append(mark)
                i += len(mark)
                break
        else:
            out.append(span[at])
            at += 1
            i += 1
    return "".join(out)


class PostgresDialect:
    """Runs search routes on a PostgreSQL connection; every query is one consistent read."""

    __slots__ = ("_db",)

    def __init__(self, db: Connection) -> None:
        self._db = db

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return fetch(self._db, sql, params)

    def accepts(self, query: SearchQuery) -> bool:
        # PostgreSQL text cannot hold NUL (the driver refuses to send it): no row has
        # such a value, and the answer is no hit rather than a driver error.
        return "\x00" not in (query.session_id or "") + (query.role or "")

    @staticmethod
    def _filters(query: SearchQuery) -> tuple[str, dict[str, Any]]:
        where, params = filters(query)
        if query.before_id is not None:
            where += " AND m.id < :before_id"
            params["before_id"] = int(query.before_id)
        params["limit"] = int(query.limit)
        return where, params

    def probe(self, query: SearchQuery, words: list[str], *, bound: int | None) -> Probe:
        """Which terms have a lexeme, whether one has ``bound`` hits or more, and
        whether any row is longer than the cap (the partial index answers at once).

        One round trip, and none without word terms (the other routes need no probe);
        the counts stop at ``bound`` and PostgreSQL stops at the first common term
        (``OR`` evaluates left to right). Without a ``bound`` (a page, never ranked) no
        hit is counted.
        """
        if not words:
            return Probe()
        params: dict[str, Any] = {"n": bound}
        nodes, counts = [], []
        for i, term in enumerate(words):
            params[f"w{i}"] = pg_search.to_words(term)
            q = _phrase(f"w{i}")
            nodes.append(f"numnode({q})")
            counts.append(
                f"(numnode({q}) > 0 AND (SELECT count(*) FROM (SELECT 1 FROM messages AS m"
                f" WHERE {_VECTOR} @@ {q} LIMIT :n) AS s) >= :n)"
            )
        long_rows = f"EXISTS (SELECT 1 FROM messages AS m WHERE {_LONG_ROWS})"
        common = " OR ".join(counts) if bound is not None else "FALSE"
        sql = f"SELECT {', '.join(nodes)}, {common}, {long_rows}"
        row = self._rows(sql, params)[0]
        return Probe(
            searchable=tuple(int(n) > 0 for n in row[:-2]),
            common=bool(row[-2]),
            long_rows=frozenset([_LONG]) if row[-1] else frozenset(),
        )

    def count(self, probe: Probe, words: list[str], *, bound: int) -> Probe:
        return probe  # the probe always counts

    def words(
        self,
        query: SearchQuery,
        words: list[str],
        signs: list[str],
        probe: Probe,
        *,
        ranked: bool,
    ) -> list[SearchHit]:
        where, params = self._filters(query)
        hits = self._words(words, signs, where, params, newest=not ranked)
        if _LONG in probe.long_rows:
            more = self._like(query.terms, where, params, where=_LONG_ROWS)
            hits = merge_hits(hits, more, query.limit, by_recency=query.paged)
        return hits

    def trigram(
        self,
        query: SearchQuery,
        long_terms: list[str],
        short: list[str],
        probe: Probe,
    ) -> list[SearchHit]:
        """Terms of 3+ characters through the pg_trgm index (its row filter repeated
        verbatim so the planner can use it), the shorter ones as LIKE on top; with the
        rows longer than the cap scanned for every term, in the same statement."""
        where, params = self._filters(query)
        conds = [pg_search.trigram_row_filter("m")]
        for i, term in enumerate(long_terms):
            conds.append(_matches(_CAPPED, f"t{i}", term))
            params[f"t{i}"] = like_pattern(term)
        indexed = (" AND ".join(conds), short)
        return self._like(
            query.terms, where, params, where=_LONG_ROWS, first=long_terms[0], also=indexed
        )

    def like(self, query: SearchQuery) -> list[SearchHit]:
        where, params = self._filters(query)
        return self._like(query.terms, where, params)

    def _words(
        self,
        terms: list[str],
        signs: list[str],
        filters: str,
        params: dict[str, Any],
        *,
        newest: bool,
    ) -> list[SearchHit]:
        params = dict(params)
        parts = []
        for i, term in enumerate(terms):
            params[f"w{i}"] = pg_search.to_words(term)
            parts.append(_phrase(f"w{i}"))
        q = "(" + " && ".join(parts) + ")"
        for i, sign in enumerate(signs):
            # Part of the filters, so the ranked candidates all hold every sign.
            filters += f" AND {_matches(_BODY, f's{i}', sign)}"
            params[f"s{i}"] = like_pattern(sign)
        match = f"FROM messages AS m WHERE {_VECTOR} @@ {q}{filters}"
        # The headline is cut from the text as the index reads it (punctuation as
        # spaces, so `zebracorn.toml` holds the word `zebracorn`); the same span of the
        # real text is read too, and the marks are put back on it (see _restore).
        plain = "replace(replace(h.hl, '>>>', ''), '<<<', '')"
        out = (
            f"SELECT m.id, m.session_id, m.role, h.hl, substr({_CAPPED},"
            f" strpos(t.words, {plain}), length({plain})),"
            f" {_headline('m.tool_name', q)}, m.timestamp"
        )
        joined = (
            f" CROSS JOIN LATERAL (SELECT {pg_search.word_text(_CAPPED)} AS words) AS t"
            f" CROSS JOIN LATERAL (SELECT {_headline('t.words', q)} AS hl) AS h"
        )
        if newest:
            sql = (
                f"{out} FROM (SELECT m.id {match} ORDER BY m.id DESC LIMIT :limit) AS p"
                f" JOIN messages AS m ON m.id = p.id{joined} ORDER BY m.id DESC"
            )
            return self._hits(self._rows(sql, params))
        rest = ""
        if params["limit"] > CANDIDATE_CAP:
            # Past the ranked candidates, further hits come newest first.
            rest = (
                f" UNION ALL (SELECT m.id, 1, 0 {match} AND m.id < (SELECT min(id) FROM c)"
                " AND (SELECT count(*) FROM c) = :cap ORDER BY m.id DESC LIMIT :rest)"
            )
            params["rest"] = params["limit"] - CANDIDATE_CAP
        # `-m.id`, not `m.id DESC`: every term has at most RANK_CUTOFF hits here, so
        # reading them all through the GIN index and sorting is bounded, while a walk
        # back along the primary key (which the planner picks for a term it thinks
        # frequent) reads every newer row first: 15 ms instead of 0.8 ms at 2.5% hits.
        # The rank is computed for the candidates only, not for every hit read.
        sql = (
            f"WITH c AS MATERIALIZED (SELECT m.id {match} ORDER BY -m.id LIMIT :cap),"
            f" r AS (SELECT c.id, ts_rank({_VECTOR}, {q}) AS score FROM c"
            " JOIN messages AS m ON m.id = c.id),"
            " p AS ((SELECT id, 0 AS part, score FROM r ORDER BY score DESC, id DESC"
            f" LIMIT :limit){rest})"
            f" {out} FROM p JOIN messages AS m ON m.id = p.id{joined}"
            " ORDER BY p.part, p.score DESC, p.id DESC"
        )
        return self._hits(self._rows(sql, {**params, "cap": CANDIDATE_CAP}))

    @staticmethod
    def _hits(rows: list[Any]) -> list[SearchHit]:
        hits = []
        for r in rows:
            snippet = _restore(r[3] or "", r[4] or "")
            # The match may be in the tool name alone: its headline then holds the mark.
            if SNIPPET_OPEN not in snippet and r[5] and SNIPPET_OPEN in r[5]:
                snippet = r[5]
            hits.append(SearchHit(int(r[0]), r[1], r[2], snippet, float(r[6])))
        return hits

    def _like(
        self,
        terms: list[str],
        filters: str,
        params: dict[str, Any],
        *,
        where: str = "TRUE",
        first: str | None = None,
        also: tuple[str, list[str]] | None = None,
    ) -> list[SearchHit]:
        """Substring search over the rows matching ``where``, newest first; ``also``
        adds the hits of other rows (a condition and its own terms), merged by id.

        Only a window of each hit's text around the first term is read into Python, so a
        hit in a 50 MB message costs no 50 MB copy.
        """
        params = dict(params)
        branches = [(where, terms)] if also is None else [also, (where, terms)]
        picks = []
        for b, (cond, branch_terms) in enumerate(branches):
            likes = ""
            for i, term in enumerate(branch_terms):
                likes += f" AND {_matches(_BODY, f'p{b}_{i}', term)}"
                params[f"p{b}_{i}"] = like_pattern(term)
            picks.append(
                f"(SELECT m.id FROM messages AS m WHERE {cond}{filters}{likes}"
                " ORDER BY m.id DESC LIMIT :limit)"
            )
        first = terms[0] if first is None else first
        params["first"] = first
        find = (
            f"strpos({_BODY}, :first)"
            if _caseless(first)
            else f"strpos(lower({_BODY}), lower(:first))"
        )
        start = f"greatest(1, {find} - {WINDOW_CHARS})"
        sql = (
            f"SELECT m.id, m.session_id, m.role, {start}, substr({_BODY}, {start},"
            f" length(:first) + {2 * WINDOW_CHARS} + 1), length({_BODY}), m.timestamp"
            f" FROM (SELECT id FROM ({' UNION '.join(picks)}) AS u"
            " ORDER BY id DESC LIMIT :limit) AS p"
            " JOIN messages AS m ON m.id = p.id ORDER BY m.id DESC"
        )
        return [like_hit(r, [first, *terms]) for r in self._rows(sql, params)]
