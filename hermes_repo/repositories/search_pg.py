"""Full-text search on PostgreSQL, with the answers of the SQLite search (:mod:`.search`).

Same query language (:func:`.search.parse_query`: any text is a safe query, every term
must match), same routing, same ranking policy, same :class:`.search.SearchHit`. The
indexes are those of :mod:`hermes_repo.schema.pg_search`:

* words: each term becomes ``phraseto_tsquery`` of its text (ASCII punctuation mapped to
  spaces, as the index reads rows), the terms joined with ``&&``. No user text is ever
  read as tsquery syntax. The newest :data:`.search.CANDIDATE_CAP` matches are ranked
  with ``ts_rank``; a query with a term of more than :data:`.search.RANK_CUTOFF` hits is
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

from ..codec import scrub
from ..schema import pg_search
from ..schema.fts import has_cjk
from .search import (
    CANDIDATE_CAP,
    LIVE_OR_COMPACTED,
    RANK_CUTOFF,
    SNIPPET_CLOSE,
    SNIPPET_OPEN,
    SearchHit,
    like_pattern,
    merge_hits,
    parse_query,
)
from .search_query import like_snippet
from .statements import fetch

__all__ = ["PgSearchRepository"]

_BODY = pg_search.search_text("m")
_CAPPED = pg_search.capped_text("m")
_VECTOR = f"m.{pg_search.VECTOR_COLUMN}"
# The partial index's own condition: a query repeating it reads only the long rows.
_LONG_ROWS = pg_search.long_row_condition("m")
_HEADLINE_OPTIONS = pg_search.sql_literal(
    f"StartSel={SNIPPET_OPEN}, StopSel={SNIPPET_CLOSE}, MaxWords=12, MinWords=4,"
    " ShortWord=0, MaxFragments=1, FragmentDelimiter=…"
)
# Characters of context read around a LIKE hit's first term (the snippet is cut from it).
_WINDOW_CHARS = 120


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


class PgSearchRepository:
    """Runs searches on a PostgreSQL connection; every query is one consistent read."""

    def __init__(self, db: Connection) -> None:
        self._db = db

    def _rows(self, sql: str, params: dict[str, Any]) -> list[Any]:
        return fetch(self._db, sql, params)

    def search(
        self,
        query: str,
        *,
        limit: int = 20,
        session_id: str | None = None,
        role: str | None = None,
        include_inactive: bool = False,
        before_id: int | None = None,
        use_fts: bool = True,
    ) -> list[SearchHit]:
        """Search as :meth:`.search.SearchRepository.search` does; ``before_id`` pages:
        only hits below that message id, newest first."""
        terms = parse_query(query)
        if not terms or limit <= 0:
            return []
        if "\x00" in (session_id or "") + (role or ""):
            # PostgreSQL text cannot hold NUL (the driver refuses to send it): no row
            # has such a value, and the answer is no hit rather than a driver error.
            return []
        filters, params = self._filters(session_id, role, include_inactive, before_id)
        params["limit"] = int(limit)
        newest = before_id is not None
        if not use_fts:
            return self._like(terms, filters, params)
        cjk = any(has_cjk(t) for t in terms)
        word_terms = [t for t in terms if any(ch.isalnum() for ch in t)]
        if not cjk and word_terms:
            lexemes, common, long_rows = self._probe(word_terms, count=not newest)
            words = [t for t, has in zip(word_terms, lexemes, strict=True) if has]
            signs = [t for t in terms if t not in words]
            if words:
                hits = self._words(words, signs, filters, params, newest=newest or common)
                if long_rows:
                    more = self._like(terms, filters, params, where=_LONG_ROWS)
                    hits = merge_hits(hits, more, limit, by_recency=newest)
            else:
                hits = self._like(terms, filters, params)
            if hits or any(len(t) < 3 for t in word_terms):
                return hits
            if newest and words:
                # The fallback is decided for the whole query, never per page (as on
                # SQLite): a word query with hits newer than this page has run out.
                first, first_params = self._filters(session_id, role, include_inactive, None)
                first_params["limit"] = 1
                if self._words(words, signs, first, first_params, newest=True) or (
                    long_rows and self._like(terms, first, first_params, where=_LONG_ROWS)
                ):
                    return []
        elif not cjk:
            # Only signs: no index holds them for every role, so the rows are scanned.
            return self._like(terms, filters, params)
        long_terms = [t for t in terms if len(t) >= 3]
        if long_terms and (role != "tool" or any(has_cjk(t) for t in long_terms)):
            short = [t for t in terms if len(t) < 3]
            return self._trigram(long_terms, short, terms, filters, params)
        return self._like(terms, filters, params)

    @staticmethod
    def _filters(
        session_id: str | None, role: str | None, include_inactive: bool, before_id: int | None
    ) -> tuple[str, dict[str, Any]]:
        clauses: list[str] = []
        params: dict[str, Any] = {}
        if not include_inactive:
            clauses.append(LIVE_OR_COMPACTED)
        if session_id is not None:
            clauses.append("m.session_id = :session_id")
            params["session_id"] = scrub(session_id)
        if role is not None:
            clauses.append("m.role = :role")
            params["role"] = scrub(role)
        if before_id is not None:
            clauses.append("m.id < :before_id")
            params["before_id"] = int(before_id)
        return "".join(f" AND {c}" for c in clauses), params

    def _probe(self, terms: list[str], *, count: bool) -> tuple[list[bool], bool, bool]:
        """Which terms have a lexeme, whether one has more than RANK_CUTOFF hits, and
        whether any row is longer than the cap (the partial index answers at once).

        One round trip; the counts stop at RANK_CUTOFF + 1 and PostgreSQL stops at the
        first common term (``OR`` evaluates left to right). Without ``count`` (a page
        of ``before_id``, never ranked) no hit is counted.
        """
        params: dict[str, Any] = {"n": RANK_CUTOFF + 1}
        nodes, counts = [], []
        for i, term in enumerate(terms):
            params[f"w{i}"] = pg_search.to_words(term)
            q = _phrase(f"w{i}")
            nodes.append(f"numnode({q})")
            counts.append(
                f"(numnode({q}) > 0 AND (SELECT count(*) FROM (SELECT 1 FROM messages AS m"
                f" WHERE {_VECTOR} @@ {q} LIMIT :n) AS s) >= :n)"
            )
        long_rows = f"EXISTS (SELECT 1 FROM messages AS m WHERE {_LONG_ROWS})"
        common = " OR ".join(counts) if count else "FALSE"
        sql = f"SELECT {', '.join(nodes)}, {common}, {long_rows}"
        row = self._rows(sql, params)[0]
        return [int(n) > 0 for n in row[:-2]], bool(row[-2]), bool(row[-1])

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

    def _trigram(
        self,
        long_terms: list[str],
        short: list[str],
        terms: list[str],
        filters: str,
        params: dict[str, Any],
    ) -> list[SearchHit]:
        """Terms of 3+ characters through the pg_trgm index (its row filter repeated
        verbatim so the planner can use it), the shorter ones as LIKE on top; with the
        rows longer than the cap scanned for every term, in the same statement."""
        conds = [pg_search.trigram_row_filter("m")]
        params = dict(params)
        for i, term in enumerate(long_terms):
            conds.append(_matches(_CAPPED, f"t{i}", term))
            params[f"t{i}"] = like_pattern(term)
        indexed = (" AND ".join(conds), short)
        return self._like(
            terms, filters, params, where=_LONG_ROWS, first=long_terms[0], also=indexed
        )

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
        start = f"greatest(1, {find} - {_WINDOW_CHARS})"
        sql = (
            f"SELECT m.id, m.session_id, m.role, {start}, substr({_BODY}, {start},"
            f" length(:first) + {2 * _WINDOW_CHARS} + 1), length({_BODY}), m.timestamp"
            f" FROM (SELECT id FROM ({' UNION '.join(picks)}) AS u"
            " ORDER BY id DESC LIMIT :limit) AS p"
            " JOIN messages AS m ON m.id = p.id ORDER BY m.id DESC"
        )
        hits = []
        for r in self._rows(sql, params):
            window, begin, total = r[4] or "", int(r[3] or 1), int(r[5] or 0)
            snippet = like_snippet(window, [first, *terms])
            if begin > 1 and not snippet.startswith("…"):
                snippet = "…" + snippet
            if begin - 1 + len(window) < total and not snippet.endswith("…"):
                snippet += "…"
            hits.append(SearchHit(int(r[0]), r[1], r[2], snippet, float(r[6])))
        return hits
