"""The search query language: terms, their FTS5 and LIKE forms, and LIKE snippets.

See :mod:`hermes_repo.repositories.search` for the routing and ranking policy.
"""

from __future__ import annotations

import re

from ...codec import scrub
from ...errors import SearchQueryError

__all__ = [
    "MAX_QUERY_CHARS",
    "SNIPPET_CLOSE",
    "SNIPPET_OPEN",
    "fts_phrase",
    "has_word_char",
    "like_pattern",
    "like_snippet",
    "parse_query",
]

#: The longest query accepted, in characters: a pasted traceback or log excerpt fits.
#: A longer one is refused whole (never cut: a term cut mid-word matches nothing).
MAX_QUERY_CHARS = 10_000
SNIPPET_OPEN = ">>>"
SNIPPET_CLOSE = "<<<"
_SNIPPET_CHARS = 40

_TERM = re.compile(r'"([^"]+)"|(\S+)')


def parse_query(query: str) -> list[str]:
    """Split user text into terms, each once, in the order they first appear.

    Any text of up to :data:`MAX_QUERY_CHARS` characters is a valid query; a longer one
    raises :class:`SearchQueryError` naming the limit (it is never cut: the last term
    would end mid-word and match nothing). Every term must match, so a term repeated
    (a pasted traceback repeats most of its words) adds nothing and is kept once.
    """
    if not isinstance(query, str):
        raise SearchQueryError(f"search query must be text (str), got {type(query).__name__}")
    if len(query) > MAX_QUERY_CHARS:
        raise SearchQueryError(
            f"search query is {len(query):,} characters, above the limit of "
            f"{MAX_QUERY_CHARS:,}; search for a distinctive part of it (a line of the "
            "traceback, an error message, a name)"
        )
    terms: dict[str, None] = {}
    # A NUL ends a C string: FTS5 would see an unterminated phrase. A lone surrogate
    # cannot be sent to SQLite: it becomes U+FFFD, as in the stored searchable text.
    for quoted, bare in _TERM.findall(scrub(query).replace("\x00", " ")):
        term = (quoted or bare).strip()
        if term:
            terms.setdefault(term)
    return list(terms)


def fts_phrase(term: str) -> str:
    """A term as an FTS5 string literal: matched as a phrase, never as syntax."""
    return '"' + term.replace('"', '""') + '"'


def like_pattern(term: str) -> str:
    """A term as a LIKE pattern matching it as a substring, with ``\\`` as the escape."""
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def has_word_char(term: str) -> bool:
    """Whether unicode61 sees a word in ``term`` (a letter or digit)."""
    return any(ch.isalnum() for ch in term)


def like_snippet(content: str | None, terms: list[str]) -> str:
    """A snippet cut in Python around the first term found (the LIKE routes)."""
    if not content:
        return ""
    low = content.lower()
    for term in terms:
        at = low.find(term.lower())
        if at >= 0:
            start = max(0, at - _SNIPPET_CHARS)
            end = min(len(content), at + len(term) + _SNIPPET_CHARS)
            return (
                ("…" if start else "")
                + content[start:at]
                + SNIPPET_OPEN
                + content[at : at + len(term)]
                + SNIPPET_CLOSE
                + content[at + len(term) : end]
                + ("…" if end < len(content) else "")
            )
    return content[: 2 * _SNIPPET_CHARS]
