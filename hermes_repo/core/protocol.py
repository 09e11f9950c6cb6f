"""What a feature needs of a store: the one :class:`WriteCore` Protocol.

The features (transcripts, the JSON Lines import and the export, the import of Hermes
Agent's ``state.db``, copies between stores, repairs) sit above the write core and
below the :class:`~hermes_repo.StateStore` facade, so they name what they call of a
store here instead of importing either. :class:`~hermes_repo.database.Database`
provides it, and so does the facade (which hands its database to the features it
runs), so a caller may hand in either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

    from ..backend import Backend
    from ..retry import RetryPolicy
    from ..uow import UnitOfWork

__all__ = ["WriteCore"]

T = TypeVar("T")


class WriteCore(Protocol):
    """A store as the features use it: its place, its budgets, units of work and reads."""

    @property
    def home(self) -> Path:
        """The store's folder (its transcript spool and other local files)."""
        ...

    @property
    def path(self) -> Path:
        """The store's ``state.db`` (on a server, where it would be in ``home``)."""
        ...

    @property
    def transcript_budget_s(self) -> float:
        """How long a transcript flush retries before it spools."""
        ...

    @property
    def backend(self) -> Backend:
        """The database the store runs on (SQLite file or PostgreSQL server)."""
        ...

    @property
    def engine(self) -> Engine:
        """The store's engine (its URL names the store in messages)."""
        ...

    def unit_of_work(self) -> UnitOfWork:
        """A write unit, not retried: ``with core.unit_of_work() as uow: ...``."""
        ...

    def write(self, work: Callable[[UnitOfWork], T], policy: RetryPolicy | None = None) -> T:
        """Run ``work`` in one unit of work, replayed whole on transient errors, and
        commit."""
        ...

    def read(self, work: Callable[[Connection], T], policy: RetryPolicy | None = None) -> T:
        """Run ``work`` in a read transaction, replayed whole on transient errors."""
        ...

    def append_message(
        self,
        session_id: str,
        message: Mapping[str, Any],
        *,
        policy: RetryPolicy | None = None,
    ) -> int:
        """Append one message in its own transaction (retried); returns the row id."""
        ...

    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        policy: RetryPolicy | None = None,
    ) -> int:
        """Append ``messages`` in one transaction (retried); returns how many."""
        ...

    def append_rows(
        self,
        session_id: str,
        rows: Sequence[Mapping[str, Any]],
        tool_calls: int,
        *,
        policy: RetryPolicy | None = None,
    ) -> int:
        """:meth:`append_messages` of rows ``message_to_row`` made already (with uids and
        timestamps; ``tool_calls`` their total of calls); returns how many."""
        ...
