"""A store's searches: the dialect its backend names, and a damaged FTS5 index detached.

The write core runs the reads (retried within its budget) and classifies what fails;
what a search does about a damaged index is decided here: the index is detached once
(in a write unit of the core's) and the same search answers from the rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ...errors import WriteFailedError
from .fts5 import Fts5Dialect
from .hits import SearchHit
from .liveness import IndexLiveness
from .postgres import PostgresDialect
from .request import SearchQuery
from .router import SearchRouter

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from ...backend import Backend
    from ...core.verdict import Failure

__all__ = ["SearchCore", "StoreSearch"]

log = logging.getLogger("hermes_repo")
T = TypeVar("T")


class SearchCore(Protocol):
    """What a store's search needs of its write core."""

    @property
    def backend(self) -> Backend: ...

    def read(self, work: Callable[[Connection], T]) -> T: ...

    def read_on_driver(self, unit: Callable[[Any], T]) -> T: ...

    def failure(self, exc: BaseException, *, action: str = ...) -> Failure: ...

    def degradable(self, failure: Failure) -> bool: ...

    def detach_index(self, failure: Failure) -> None: ...


class StoreSearch:
    """Runs one store's searches; owns its view of the FTS5 indexes' liveness."""

    __slots__ = ("_core", "index")

    def __init__(self, core: SearchCore) -> None:
        self._core = core
        #: The FTS5 indexes as this process last saw them (SQLite only).
        self.index = IndexLiveness()

    def search(self, query: SearchQuery) -> list[SearchHit]:
        """The hits of ``query`` (see :meth:`StateStore.search`)."""
        core = self._core
        if core.backend.search_dialect == "postgresql":
            # Kept by the server (a generated tsvector and pg_trgm): nothing to detach.
            return core.read(lambda conn: SearchRouter(PostgresDialect(conn)).search(query))
        index = self.index

        def run(cursor: Any, *, use_fts: bool) -> list[SearchHit]:
            return SearchRouter(Fts5Dialect(cursor, index)).search(query, use_fts=use_fts)

        # Tried once on the driver's cursor (SQLAlchemy's Connection cost more than a
        # selective search); a damaged index met there is detached once and the search
        # answers from the canonical rows.
        try:
            return core.read_on_driver(lambda cursor: run(cursor, use_fts=True))
        except WriteFailedError as exc:
            failure = core.failure(exc)
            if not core.degradable(failure):
                raise
        log.warning(
            "full-text index damaged (%s): detaching it; search uses the fallback until "
            "`hermes-repo sessions repair` rebuilds it",
            failure.damage,
        )
        core.detach_index(failure)
        return core.read_on_driver(lambda cursor: run(cursor, use_fts=False))
