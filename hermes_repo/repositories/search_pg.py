"""Kept for imports of earlier releases: PostgreSQL search is the router of
:mod:`hermes_repo.repositories.search` over :class:`~.search.postgres.PostgresDialect`."""

from .search import PgSearchRepository

__all__ = ["PgSearchRepository"]
