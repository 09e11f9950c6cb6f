"""One search's arguments, declared once: :class:`SearchQuery`."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

from ... import arguments
from .paging import check_limit
from .query import parse_query

__all__ = ["SearchQuery"]


@dataclass(frozen=True)
class SearchQuery:
    """What a search asks, normalised: the query text and its filters, the number of
    hits and, for a page of a walk, the keyset bound (hits with ``message_id <
    before_id``, newest first).

    Every layer takes this one value (the store's API, the write core, the router, each
    dialect, the page cursor), so the argument list is written here only. The filters
    and the parsed terms are also the page cursor's :attr:`fingerprint`.
    """

    text: str
    limit: int = 20
    session_id: str | None = None
    role: str | None = None
    include_inactive: bool = False
    before_id: int | None = None

    @classmethod
    def checked(
        cls,
        text: str,
        *,
        limit: Any = 20,
        session_id: Any = None,
        role: Any = None,
        include_inactive: Any = False,
    ) -> SearchQuery:
        """A query from a caller's arguments, each checked where it enters (the text is
        checked by its parser): :class:`~hermes_repo.errors.InvalidArgumentError`
        naming the argument, or :class:`SearchLimitError` above the maximum."""
        check_limit(arguments.whole_number("limit", limit))
        arguments.optional_text("session_id", session_id)
        arguments.optional_text("role", role)
        arguments.flag("include_inactive", include_inactive)
        return cls(text, limit, session_id, role, include_inactive)

    @property
    def terms(self) -> list[str]:
        """The terms every hit must match (see :func:`.query.parse_query`), parsed once."""
        # Kept in the instance's __dict__ by hand: functools.cached_property takes a lock
        # on every read before Python 3.12, and a search reads the terms several times.
        terms: list[str] | None = self.__dict__.get("_terms")
        if terms is None:
            terms = parse_query(self.text)
            object.__setattr__(self, "_terms", terms)
        return terms

    @property
    def paged(self) -> bool:
        """A page of a walk: newest first below :attr:`before_id`, never ranked."""
        return self.before_id is not None

    @property
    def fingerprint(self) -> str:
        """What a page cursor carries of the search it belongs to: the parsed terms (so
        "a  b" and "a b" are one search) and the filters, never the limit or position."""
        key = repr((self.terms, self.session_id, self.role, self.include_inactive)).encode(
            "utf-8", "surrogatepass"
        )
        return hashlib.blake2b(key, digest_size=6).hexdigest()

    def page(self, before_id: int | None, limit: int) -> SearchQuery:
        """The same search for ``limit`` hits below ``before_id`` (None: from the top)."""
        return dataclasses.replace(self, before_id=before_id, limit=limit)
