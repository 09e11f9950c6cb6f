"""Repositories: small, typed, and they never commit (the unit of work does).

The names below are imported on first use (PEP 562): the read commands run the search
modules of this package (:mod:`.search`) on a driver cursor, and importing the package
must not load the ORM and the declarative models the other repositories are built on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

if TYPE_CHECKING:
    from .entries import EntryRepository
    from .messages import MessageRepository
    from .meta import MetaRepository
    from .search import SearchHit, SearchQuery, SearchRepository
    from .sessions import SessionRepository

__all__ = [
    "EntryRepository",
    "MessageRepository",
    "MetaRepository",
    "SearchHit",
    "SearchQuery",
    "SearchRepository",
    "SessionRepository",
]

_LAZY = {
    "EntryRepository": ".entries",
    "MessageRepository": ".messages",
    "MetaRepository": ".meta",
    "SearchHit": ".search",
    "SearchQuery": ".search",
    "SearchRepository": ".search",
    "SessionRepository": ".sessions",
}


if not TYPE_CHECKING:
    __getattr__ = lazy_names(__name__, globals(), _LAZY)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
