"""The unit of work: one write transaction, rolled back unless told to commit."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from .errors import translate
from .repositories import MessageRepository, MetaRepository, SessionRepository

__all__ = ["UnitOfWork"]


class UnitOfWork:
    """Owns an ORM session and its transaction; repositories never commit.

    ``with store.unit_of_work() as uow: ...; uow.commit()``. Leaving the block without
    ``commit()`` (or by an exception) rolls everything back. The transaction begins with
    ``BEGIN IMMEDIATE``: the write lock is taken up front, so a unit never fails halfway
    because a reader had to upgrade. Driver errors leave as :class:`HermesRepoError`
    subclasses, chained to the SQLite error.
    """

    sessions: SessionRepository
    messages: MessageRepository
    meta: MetaRepository

    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._factory = session_factory
        self._session: Session | None = None

    @property
    def session(self) -> Session:
        """The ORM session of this unit (for queries the repositories do not offer)."""
        if self._session is None:
            raise RuntimeError("the unit of work is not active; use it in a `with` block")
        return self._session

    def __enter__(self) -> Self:
        self._session = self._factory()
        self.sessions = SessionRepository(self._session)
        self.messages = MessageRepository(self._session)
        self.meta = MetaRepository(self._session)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        session, self._session = self._session, None
        if session is not None:
            try:
                session.rollback()
            except DBAPIError:
                # SQLite may already have rolled back (FULL, IOERR, some FTS errors); the
                # original error, not the failed ROLLBACK, is what the caller needs.
                pass
            finally:
                session.close()
        if isinstance(exc, DBAPIError):
            raise translate(exc) from exc

    def commit(self) -> None:
        """Commit the unit's transaction."""
        try:
            self.session.commit()
        except DBAPIError as exc:
            raise translate(exc, action="commit") from exc

    def rollback(self) -> None:
        """Discard everything done in this unit so far."""
        self.session.rollback()
