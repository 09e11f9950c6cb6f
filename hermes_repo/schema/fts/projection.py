"""What an index reads from a row: the text projection, the caps, the CJK test.

The caps (:data:`WORD_CAP`, :data:`TRIGRAM_CAP`) bound the indexing work of one row
inside the writer's transaction (see the package docstring). Search
builds its queries from the same expressions, so they match the indexes verbatim.
"""

from __future__ import annotations

import re


def text_projection(t: str) -> str:
    """The searchable text of a row ``t``: its text content (or its multimodal text
    parts), then the text of its tool calls (their names and arguments), space-joined.

    The expression is the same on PostgreSQL
    (:func:`hermes_repo.schema.pg_search.search_text`).
    """
    return projection_of(f"{t}.")


def projection_of(p: str) -> str:
    """:func:`text_projection` over the columns prefixed by ``p`` (``"m."``, or ``""``).

    A row without tool calls (most rows) reads its text as it is: joining first would
    copy every row's text for nothing (a LIKE scan of every row was 9% slower). With
    calls, ``text || ' ' || calls`` is NULL when the row has no text, hence the
    ``coalesce``.
    """
    body = f"coalesce({p}content, {p}content_text)"
    return (
        f"CASE WHEN {p}calls_text IS NULL THEN {body}"
        f" ELSE coalesce({body} || ' ' || {p}calls_text, {p}calls_text) END"
    )


def indexed_projection(t: str, cap: int) -> str:
    """What an index with ``cap`` takes from row ``t``: the first ``cap`` characters."""
    return f"substr({text_projection(t)}, 1, {int(cap)})"


def long_row_condition(t: str, cap: int) -> str:
    """True for a row of ``t`` whose text is longer than ``cap``: the rows a search must
    also scan, as an index with that cap holds only their beginning.

    The text is that of the partial index over those rows: a query must repeat it
    verbatim for SQLite to use the index.
    """
    return f"length({text_projection(t)}) > {int(cap)}"


# Measured on the benchmark corpus (benchmarks/bench_big_message.py, docs/performance.md):
# unicode61 indexes 15-30 M characters/s whatever the text, trigram 0.3-0.6 M/s on varied
# text (random CJK, base64) and ~10 M/s on prose. These caps bound the index work of one
# row to well under a second on the worst text we tried.
WORD_CAP = 1_048_576
TRIGRAM_CAP = 131_072

#: Code point ranges of the scripts unicode61 cannot split into words (ideographs,
#: kana, hangul): the trigram index covers tool rows that hold any of them, and search
#: routes a query holding any of them to the trigram index.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width katakana
    (0x20000, 0x2FA1F),  # CJK extensions B-F, compatibility supplement
)
_CJK_RE = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]")
# The same set as a GLOB pattern: SQLite compares GLOB ranges by code point.
_CJK_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]*"


def has_cjk(value: str) -> bool:
    """True when ``value`` holds a character of :data:`CJK_RANGES`."""
    return _CJK_RE.search(value) is not None
