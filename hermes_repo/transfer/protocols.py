"""What the transfer functions need from a store.

The transfer package sits below :class:`~hermes_repo.store.StateStore` (the facade
composes it), so it names the few store methods it calls as a Protocol instead of
importing the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from ..uow import UnitOfWork
    from .catalog import SessionInfo

__all__ = ["Replay", "TransferStore"]

T = TypeVar("T")


class Replay(Protocol):
    """A session's replay as the store loads it."""

    @property
    def messages(self) -> list[dict[str, Any]]: ...


class TransferStore(Protocol):
    """The store methods an import or an export calls (a :class:`StateStore` has them)."""

    def write(self, work: Callable[[UnitOfWork], T]) -> T:
        """Run ``work`` in one unit of work, retried whole, and commit."""
        ...

    def get_session(self, session_id: str) -> SessionInfo:
        """One session's row; :class:`~hermes_repo.errors.NotFoundError` when absent."""
        ...

    def load_conversation(self, session_id: str) -> Replay:
        """The session's active messages in replay order."""
        ...
