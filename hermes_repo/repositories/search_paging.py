"""Kept for imports of earlier releases: the paging of search is
:mod:`hermes_repo.repositories.search.paging`."""

from .search.paging import (
    FIRST_PAGE_BEFORE,
    MAX_SEARCH_LIMIT,
    SearchCursorError,
    SearchLimitError,
    SearchPage,
    check_limit,
    decode_cursor,
    encode_cursor,
    page_through,
)

__all__ = [
    "FIRST_PAGE_BEFORE",
    "MAX_SEARCH_LIMIT",
    "SearchCursorError",
    "SearchLimitError",
    "SearchPage",
    "check_limit",
    "decode_cursor",
    "encode_cursor",
    "page_through",
]
