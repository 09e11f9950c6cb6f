"""Limits and paging of search: the maximum a call returns, and the opaque page cursor.

A search call returns at most :data:`MAX_SEARCH_LIMIT` hits; every hit beyond is
reachable by paging. A page walk is newest first by message id (keyset: each page asks
for the hits older than the last one shown), so pages stay stable while new messages
arrive and each page is one bounded query whatever the term's frequency.

The cursor is opaque to callers: it carries the keyset position and a fingerprint of
the search it belongs to (terms and filters), so a cursor replayed against another
query or filter, edited, or truncated is refused with :class:`SearchCursorError`
instead of silently paging something else.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...errors import SearchCursorError, SearchLimitError
from .hits import SearchHit

if TYPE_CHECKING:
    from .request import SearchQuery

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

#: Hits one search call (or one page) returns at most.
MAX_SEARCH_LIMIT = 1000
#: The keyset bound of a first page: above every message id (SQLite's largest rowid).
FIRST_PAGE_BEFORE = 2**63 - 1

_VERSION = "s1"


@dataclass(frozen=True)
class SearchPage:
    """One page of a search, newest first. ``cursor`` fetches the next page (pass it to
    ``search_page``); None after the last page."""

    hits: list[SearchHit]
    cursor: str | None


def check_limit(limit: int) -> None:
    """Refuse a limit above :data:`MAX_SEARCH_LIMIT`, naming the paging API."""
    if limit > MAX_SEARCH_LIMIT:
        raise SearchLimitError(
            f"limit {limit} is above the maximum of {MAX_SEARCH_LIMIT} hits per search call; "
            "page through every hit with StateStore.search_page(query, cursor=...) "
            "(CLI: `hermes-repo search QUERY --cursor C` or `--page N`), "
            f"or pass a limit of at most {MAX_SEARCH_LIMIT}"
        )


def encode_cursor(before_id: int, query: SearchQuery) -> str:
    """The opaque cursor of the page of ``query`` that starts below ``before_id``."""
    raw = f"{_VERSION}.{before_id}.{query.fingerprint}".encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str, query: SearchQuery) -> int:
    """The keyset bound a cursor carries; :class:`SearchCursorError` if it is not a
    cursor of ``query`` (its terms and filters)."""
    fix = (
        "pass the cursor returned with the previous page of the same query and filters, "
        "or no cursor for the first page"
    )
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        version, before, fp = (
            base64.urlsafe_b64decode(padded.encode("ascii")).decode("ascii").split(".")
        )
        before_id = int(before)
    except (ValueError, UnicodeError, binascii.Error) as exc:
        raise SearchCursorError(f"search cursor {cursor[:40]!r} is malformed; {fix}") from exc
    if version != _VERSION or not 0 < before_id <= FIRST_PAGE_BEFORE:
        raise SearchCursorError(f"search cursor {cursor[:40]!r} is not a search cursor; {fix}")
    if fp != query.fingerprint:
        raise SearchCursorError(
            f"search cursor {cursor[:40]!r} belongs to another query or other filters; {fix}"
        )
    return before_id


def page_through(
    search: Callable[[SearchQuery], list[SearchHit]],
    query: SearchQuery,
    cursor: str | None,
) -> SearchPage:
    """One page of ``query``: ``search`` runs the keyset query (see
    :class:`~.router.SearchRouter`) for the position ``cursor`` carries."""
    check_limit(query.limit)
    before = FIRST_PAGE_BEFORE
    if cursor is not None:
        before = decode_cursor(cursor, query)
    if query.limit <= 0:
        return SearchPage(hits=[], cursor=None)
    # One hit more than the page tells whether a next page exists.
    hits = search(query.page(before, query.limit + 1))
    if len(hits) <= query.limit:
        return SearchPage(hits=hits, cursor=None)
    page = hits[: query.limit]
    return SearchPage(hits=page, cursor=encode_cursor(page[-1].message_id, query))
