"""The unit of work: one write transaction, rolled back unless told to commit."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import TracebackType
from typing import Self

from sqlalchemy import Engine
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from .backend import backend_of
from .deprecation import warn_renamed
from .driver_errors import commit_outcome_unknown, describe, translate
from .errors import CommitUnknownError, HermesRepoError
from .identity import Identities
from .repositories import MessageRepository, MetaRepository, SessionRepository
from .repositories.entries import EntryRepository

__all__ = ["UnitOfWork"]


def _plain_error(exc: BaseException, action: str) -> HermesRepoError:
    return translate(exc, action=action)


class UnitOfWork:
    """Owns a connection and its transaction; repositories never commit.

    ``with store.unit_of_work() as uow: ...; uow.commit()``. Leaving the block without
    ``commit()`` (or by an exception) rolls everything back. The transaction begins with
    ``BEGIN IMMEDIATE`` at the first statement: the write lock is taken up front, so a
    unit never fails halfway because a reader had to upgrade. Driver errors leave as
    :class:`HermesRepoError` subclasses, chained to the SQLite error.

    Repositories run Core statements on the unit's connection (the append path is hot:
    an ORM session per message cost more than SQLite's own work). An ORM session joined
    to the same transaction is made only when something asks for :attr:`orm`.

    ``errors`` turns a driver error and the action that met it into the library error
    to raise (the store's database classifies it; default: the plain translation).

    :attr:`ids` mints the ids the unit generates (session ids, uids of messages given
    without one) and records what it wrote; :meth:`Database.write
    <hermes_repo.database.Database.write>` hands every attempt of one call the same
    one. A commit whose connection is lost on a server raises
    :class:`CommitUnknownError`: it may have landed.
    """

    sessions: SessionRepository
    messages: MessageRepository
    meta: MetaRepository
    entries: EntryRepository

    def __init__(
        self,
        writer: Engine,
        *,
        errors: Callable[[BaseException, str], HermesRepoError] | None = None,
    ) -> None:
        self._writer = writer
        self._error_for = errors or _plain_error
        self._conn: Connection | None = None
        self._orm: Session | None = None
        #: The ids this unit mints and what it wrote (see :mod:`hermes_repo.identity`).
        self.ids = Identities()

    @property
    def connection(self) -> Connection:
        """The unit's connection (its transaction is the unit's)."""
        if self._conn is None:
            raise RuntimeError("the unit of work is not active; use it in a `with` block")
        return self._conn

    @property
    def orm(self) -> Session:
        """An ORM session in the unit's transaction (for queries the repositories lack).

        Not :attr:`sessions`, the repository of the store's sessions."""
        if self._orm is None:
            self._orm = Session(bind=self.connection, expire_on_commit=False)
        return self._orm

    @property
    def session(self) -> Session:
        """Deprecated name of :attr:`orm` (too close to :attr:`sessions`)."""
        warn_renamed("UnitOfWork.session", "UnitOfWork.orm")
        return self.orm

    def __enter__(self) -> Self:
        try:
            self._conn = self._writer.connect()
        except DBAPIError as exc:
            raise self._error_for(exc, "connect") from exc
        self._bind_repositories()
        return self

    def _bind_repositories(self) -> None:
        assert self._conn is not None
        self.sessions = SessionRepository(self._conn, orm=lambda: self.orm, ids=self.ids)
        self.messages = MessageRepository(self._conn, ids=self.ids)
        self.meta = MetaRepository(self._conn)
        self.entries = EntryRepository(self._conn)

    def attempt_of(self, ids: Identities, lock_timeout_ms: int | None = None) -> None:
        """Make this unit one attempt of a write call: mint from ``ids`` (restarted),
        and on a server wait at most ``lock_timeout_ms`` for any one lock (``SET
        LOCAL``: the transaction's own setting, so safe behind a transaction-mode
        pooler). Called first thing in the unit."""
        ids.restart()
        self.ids = ids
        self._bind_repositories()
        if lock_timeout_ms is not None:
            backend_of(self.connection).limit_lock_wait(self.connection, lock_timeout_ms)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        conn, self._conn = self._conn, None
        orm, self._orm = self._orm, None
        try:
            if orm is not None:
                orm.close()
            if conn is not None:
                # SQLite may already have rolled back (FULL, IOERR, some FTS errors);
                # the original error, not the failed ROLLBACK, is what the caller needs.
                with contextlib.suppress(DBAPIError):
                    conn.rollback()
        finally:
            if conn is not None:
                conn.close()
        if isinstance(exc, DBAPIError):
            raise self._error_for(exc, "write") from exc

    def commit(self) -> None:
        """Commit the unit's transaction.

        :class:`CommitUnknownError` when the connection to a server was lost while
        committing: the server may have committed before its reply was lost. Look for
        what the unit wrote before writing it again (:meth:`Database.write
        <hermes_repo.database.Database.write>` does).
        """
        if self._orm is not None:
            try:
                self._orm.flush()
            except DBAPIError as exc:
                raise self._error_for(exc, "commit") from exc
        try:
            self.connection.commit()
        except DBAPIError as exc:
            if commit_outcome_unknown(exc):
                raise CommitUnknownError(
                    f"commit outcome unknown: the connection to the server was lost while "
                    f"committing ({describe(exc)}); the server may have committed. Look "
                    "for the unit's rows before writing them again (store.write does)"
                ) from exc
            raise self._error_for(exc, "commit") from exc

    def rollback(self) -> None:
        """Discard everything done in this unit so far."""
        if self._orm is not None:
            self._orm.expunge_all()
        try:
            self.connection.rollback()
        except DBAPIError as exc:
            raise self._error_for(exc, "rollback") from exc
