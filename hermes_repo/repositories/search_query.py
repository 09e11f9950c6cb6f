"""Kept for imports of earlier releases: the query language of search is
:mod:`hermes_repo.repositories.search.query`."""

from .search.query import (
    MAX_QUERY_CHARS,
    SNIPPET_CLOSE,
    SNIPPET_OPEN,
    fts_phrase,
    has_word_char,
    like_pattern,
    like_snippet,
    parse_query,
)

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
