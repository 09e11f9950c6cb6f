"""Repositories: small, typed, and they never commit (the unit of work does)."""

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
