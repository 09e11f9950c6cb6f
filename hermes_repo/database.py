"""The write core of one store: :class:`Database`, composed of its jobs.

:class:`Database` runs the units of work of one ``state.db`` (or one server database).
It is built from three layers, each a module of :mod:`hermes_repo.core` and each
resting on the one before:

* :class:`~hermes_repo.core.verdict.FailureVerdict`: what a failure means
  (:meth:`failure`, one :class:`Failure` per driver error), the quarantine of a
  structurally damaged file, whether FTS damage is degradable;
* :class:`~hermes_repo.core.units.UnitRunner`: writes in ``BEGIN IMMEDIATE``
  transactions replayed whole on transient errors within a time budget
  (:meth:`write`), reads likewise (:meth:`read`), FTS detach, lost commits settled;
* :class:`~hermes_repo.core.driver.DriverPaths`: the hot paths on the driver's cursor
  (:meth:`append_message`, :meth:`append_messages`, :meth:`load_messages`,
  :meth:`read_on_driver`).

This class owns the state they share (engine, guard, budgets), installs the engine's
error event and answers searches (:mod:`hermes_repo.repositories.search.on_store`).
What a feature needs of it is the :class:`~hermes_repo.core.WriteCore` Protocol.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, event

from . import quarantine
from .core import WriteCore
from .core.driver import DriverPaths
from .core.verdict import Failure
from .engine import DB_NAME, WRITE_OPTION, Driver
from .kept import KeptConnection
from .repositories import SearchHit, SearchQuery
from .repositories.search.on_store import StoreSearch
from .retry import STORE_WRITE_BUDGET_S, TRANSCRIPT_WRITE_BUDGET_S, RetryPolicy
from .schema.fts.merge import MergeCadence

__all__ = ["Database", "Failure", "WriteCore"]


class Database(DriverPaths):
    """Runs units of work on one store file; owns its engine, guard and retry budgets.

    Built on an engine made by :func:`~hermes_repo.engine.create_store_engine` (or a
    read-only one) whose quarantine guard is installed; installs the engine's error
    event. ``write_budget_s`` is how long a write (and a read) waits for a locked or
    read-only database: default 20 s, transcript flushes 60 s.
    """

    def __init__(
        self,
        home: Path,
        engine: Engine,
        driver: Driver,
        guard: quarantine.Guard,
        *,
        write_budget_s: float | None = None,
        location: str | None = None,
    ) -> None:
        self.home = home
        self.path = home / DB_NAME
        #: Where the data is, as messages name it: the file, or the server's URL
        #: without its password.
        self.location = str(self.path) if location is None else location
        self.driver = driver
        self.backend = driver.backend
        self.guard = guard
        budget = STORE_WRITE_BUDGET_S if write_budget_s is None else write_budget_s
        self.write_policy = RetryPolicy(budget_s=budget)
        # Reads wait for the same budget: with a rollback journal (the standard-library
        # SQLite) a committing writer blocks readers too, for longer than busy_timeout.
        self.read_policy = RetryPolicy(budget_s=budget)
        self.transcript_budget_s = (
            TRANSCRIPT_WRITE_BUDGET_S if write_budget_s is None else write_budget_s
        )
        self._search = StoreSearch(self)
        self._merge = MergeCadence()
        self._recent = None
        self._engine = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})
        event.listen(engine, "handle_error", self._on_engine_error)
        self._kept = KeptConnection()

    def close(self) -> bool:
        """Close every connection; True when this call closed them (False: closed before)."""
        engine, self._engine = self._engine, None
        self._recent = None  # its traceback holds the frames of a failed unit
        if engine is None:
            return False
        self._kept.close()
        engine.dispose()
        return True

    @property
    def quarantined(self) -> bool:
        """True once the file was found structurally damaged: writes are refused."""
        return self.guard.active

    def search(self, query: SearchQuery) -> list[SearchHit]:
        """Full-text search (see :meth:`StateStore.search` and
        :mod:`hermes_repo.repositories.search`): on SQLite tried once on the driver's
        cursor, a damaged index met there detached once and the search answered from
        the canonical rows."""
        return self._search.search(query)
