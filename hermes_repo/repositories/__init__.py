"""Repositories: small, typed, and they never commit (the unit of work does)."""

from .messages import MessageRepository
from .meta import MetaRepository
from .search import SearchHit, SearchRepository
from .sessions import SessionRepository

__all__ = [
    "MessageRepository",
    "MetaRepository",
    "SearchHit",
    "SearchRepository",
    "SessionRepository",
]
