"""Repositories: small, typed, and they never commit (the unit of work does).

The names below are imported on first use (PEP 562): the read commands run the search
modules of this package (:mod:`.search`) on a driver cursor, and importing the package
must not load the ORM and the declarative models the other repositories are built on.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
