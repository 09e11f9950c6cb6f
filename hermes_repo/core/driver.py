"""The write core's driver fast paths: the hot units on the driver's own cursor.

A one-message append (:meth:`DriverPaths.append_message`), a transcript flush's group
(:meth:`DriverPaths.append_messages`), a session's load and a search's read
(:meth:`DriverPaths.read_on_driver`) run their statements straight on the pooled
driver connection, without SQLAlchemy's ``Connection`` around it: through SQLAlchemy
those statements cost more than SQLite's own work. Each is tried once first inside the
budget of the instrumented path it stands for (:meth:`~.units.UnitRunner.write`,
:meth:`~.units.UnitRunner.read`); anything unusual leaves the fast path at once, rolled
back, judged once by :meth:`~.verdict.FailureVerdict.failure`, and the same unit goes on
through the instrumented path. On a server the one-message append runs on psycopg's
own connection, kept between appends (:mod:`hermes_repo.kept`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..codec import check_server_text, message_to_row, tool_call_count
from ..driver_errors import commit_outcome_unknown, describe
from ..errors import CommitUnknownError, ErrorKind, IntegrityViolation, UidConflictError
from ..identity import Identities
from ..ids import check_session_id
from ..kept import BUSY, KeptConnection, _CommitFailed
from ..models import messages_table
from ..repositories import MessageRepository
from ..retry import RetryPolicy, run_with_retry
from ..uow import UnitOfWork
from .units import (
    UnitRunner,
    _lock_timeout_ms,
    _same_row,
    _text_factory,
    _undecodable,
    _Unsettled,
)

__all__ = ["DriverPaths"]

T = TypeVar("T")


class DriverPaths(UnitRunner):
    """The fast paths of one store (see the module docstring); the attributes are set
    by :class:`~hermes_repo.database.Database`."""

    # On a server, the one-message append's connection (see :mod:`hermes_repo.kept`).
    _kept: KeptConnection

    def append_message(
        self,
        session_id: str,
        message: Mapping[str, Any],
        *,
        policy: RetryPolicy | None = None,
    ) -> int:
        """Append one message in its own transaction (retried); returns the row id.

        The common case runs the unit's four statements (BEGIN IMMEDIATE, the counters
        UPDATE, the INSERT, COMMIT) straight on the driver: through SQLAlchemy they cost
        more than SQLite's own work. Anything unusual leaves that path at once, rolled
        back, classified once: structural damage quarantines the file (the write is not
        retried); a lock is retried within the same budget; FTS damage detaches the
        index and the unit is replayed without it; any other error (a constraint, a
        full disk) hands the same row to :meth:`write`'s instrumented path. On a server
        the same statements (``SET LOCAL lock_timeout``, the UPDATE, the INSERT with
        ``RETURNING``, COMMIT) run on psycopg's cursor of a connection kept between
        appends (:mod:`.kept`: no checkout ping per message, no SQLAlchemy execution per
        statement); a lost one is replayed the same way, and a lost COMMIT reply is
        settled by the row's uid like any unit's."""
        row = message_to_row(check_session_id(session_id), message)
        calls = tool_call_count(message)
        self.guard.refuse()
        budget = (policy or self.write_policy).budget_s
        deadline = time.monotonic() + budget

        def on_driver() -> int | None:
            try:
                return self._append_on_driver(row, calls)
            except self.driver.module.Error as exc:
                failure = self.failure(exc)
                if (
                    failure.structural
                    or failure.kind is ErrorKind.TRANSIENT  # retried, same budget clock
                    or self.degradable(failure)
                ):
                    raise failure.error from exc
                return None

        def on_kept() -> int | None:
            ids = Identities()

            def append(dbapi: Any) -> int:
                # The same statements as the instrumented path, on psycopg's cursor.
                with dbapi.cursor() as cursor:
                    cursor.execute(f"SET LOCAL lock_timeout = {_lock_timeout_ms(deadline)}")
                    return MessageRepository(cursor, ids=ids).append_row(row, calls)

            try:
                done = self._kept.run(self._writer, append)
            except _CommitFailed as lost:
                if commit_outcome_unknown(lost.error):
                    # The server may have committed: the write core looks for the row.
                    unknown = CommitUnknownError(
                        f"commit outcome unknown: the connection was lost while committing "
                        f"({describe(lost.error)})"
                    )
                    unknown.unsettled = _Unsettled(  # type: ignore[attr-defined]
                        lost.result, ids.written, None, unknown
                    )
                    raise unknown from lost.error
                failure = self.failure(lost.error)
                if failure.kind is ErrorKind.TRANSIENT:
                    raise failure.error from lost.error
                return None
            except (DBAPIError, self.driver.module.Error) as exc:
                failure = self.failure(exc)
                if failure.kind is ErrorKind.TRANSIENT:
                    # A lost connection among them: the retry takes a pinged one.
                    raise failure.error from exc
                return None  # the ordinary path replays it and reports what it meets
            return None if done is BUSY else done  # type: ignore[return-value]

        try:
            return self.write(
                lambda uow: uow.messages.append_row(row, calls),
                policy,
                first_try=on_driver if self.backend.cursor_fast_path else on_kept,
                adds=1,
            )
        except UidConflictError:
            raise
        except IntegrityViolation as exc:
            if not message.get("uid"):
                raise  # a uid minted here is stored nowhere else: not the cause
            stored = self._stored_id(row, timestamp_given=message.get("timestamp") is not None)
            if stored is None:
                raise
            if isinstance(stored, str):
                raise UidConflictError(
                    f"uid {row['uid']!r} is already stored in session {row['session_id']!r} "
                    f"for a different message (its {stored} differs); nothing was written. "
                    "Give this message its own uid (or leave uid out: one is generated); "
                    "the same message with the same uid is stored once"
                ) from exc
            return stored

    def _stored_id(self, row: Mapping[str, Any], *, timestamp_given: bool) -> int | str | None:
        """The row id of the stored message with ``row``'s uid when it is the same
        message, the first differing column's name when it is not, None when the uid
        is not stored. A timestamp the caller did not give is not compared (each call
        stamps its own)."""
        if not self.backend.is_file:
            row = dict(row)
            check_server_text(row)  # as the row was stored (a list's searchable copy)
        m = messages_table
        columns = [m.c.id, *(m.c[k] for k in row if k in m.c)]
        stmt = select(*columns).where(m.c.session_id == row["session_id"], m.c.uid == row["uid"])
        found = self.read(lambda conn: conn.execute(stmt).mappings().first())
        if found is None:
            return None
        differs = _same_row(dict(found), row, () if timestamp_given else ("timestamp",))
        return int(found["id"]) if differs is None else differs

    def write_idempotent_on_kept(
        self,
        work: Callable[[UnitOfWork], T],
        on_kept: Callable[[Any, int], T | None],
        policy: RetryPolicy | None = None,
    ) -> T:
        """(internal, server) :meth:`write` of an idempotent unit, first tried on the kept
        write connection (:mod:`hermes_repo.kept`: no checkout ping, no SQLAlchemy).

        ``on_kept(dbapi, lock_timeout_ms)`` does the unit on psycopg's connection in
        autocommit mode: it sends ``BEGIN``, ``SET LOCAL lock_timeout`` (the rest of the
        budget) and ``COMMIT`` itself, pipelined with its statements. It returns None (an
        open transaction is rolled back) to hand over to ``work``, the same unit through
        the ordinary path. Idempotent: run again after a commit that landed, the unit
        changes nothing (rows keyed by their identity and inserted once, counters moved
        only by rows it inserted). So a transient failure, a COMMIT whose reply was lost
        among them, replays ``work`` within the same budget without looking for what
        landed first."""
        policy = policy or self.write_policy
        self.guard.refuse()
        deadline = time.monotonic() + policy.budget_s

        def first() -> T | None:
            try:
                done = self._kept.run(
                    self._writer,
                    lambda dbapi: on_kept(dbapi, _lock_timeout_ms(deadline)),
                    own_transaction=True,
                )
            except (DBAPIError, self.driver.module.Error) as exc:
                failure = self.failure(exc)
                if failure.kind is ErrorKind.TRANSIENT:
                    # A lost connection, during COMMIT too (the unit sends its own, so
                    # no _CommitFailed): the ordinary unit writes it again.
                    raise failure.error from exc
                return None  # the ordinary path replays it and reports what it meets
            return None if done is BUSY else done  # type: ignore[return-value]

        return self.write(work, policy, first_try=first)

    def read_on_kept(self, work: Callable[[Connection], T], on_kept: Callable[[Any], T]) -> T:
        """(internal, server) :meth:`read` of ``work``, first tried as ``on_kept(dbapi)`` on
        the kept write connection in autocommit mode: no checkout ping, no ``BEGIN`` and
        no ``COMMIT`` round trips. Each of its statements reads its own snapshot, as it
        would in the ``READ COMMITTED`` transaction of :meth:`read`. When the connection
        is in use, or on any driver error, ``work`` runs the ordinary way (which judges
        and retries what it meets)."""
        self.engine  # noqa: B018 - raises StoreClosedError after close()
        try:
            done = self._kept.run(self._writer, on_kept, own_transaction=True)
        except (DBAPIError, self.driver.module.Error):
            done = BUSY
        if done is BUSY:
            return self.read(work)
        return done  # type: ignore[return-value]

    def _append_on_driver(self, row: dict[str, Any], calls: int) -> int:
        """One append on the driver's cursor, in its own transaction."""
        return self._on_driver(lambda cursor: MessageRepository(cursor).append_row(row, calls))

    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        policy: RetryPolicy | None = None,
    ) -> int:
        """Append ``messages`` in list order in ONE transaction (retried); returns how many.

        The group commit of a transcript flush: one counters UPDATE for all of them and
        the INSERTs in order (ids follow the list), on the driver's cursor like
        :meth:`append_message`, with every failure classified the same way (structural
        damage quarantines, a lock is retried within the budget, FTS damage detaches the
        index and the group is replayed without it). Any other error fails the whole
        group, nothing of it committed; a missing session raises ``NotFoundError``.
        """
        sid = check_session_id(session_id)
        batch = list(messages)
        if not batch:
            return 0
        # Rows (and so uids and timestamps) made once, before the first attempt: every
        # attempt writes the same ones, and a lost commit is looked up by these uids.
        rows = [message_to_row(sid, m) for m in batch]
        calls = sum(tool_call_count(m) for m in batch)
        return self.append_rows(sid, rows, calls, policy=policy)

    def append_rows(
        self,
        session_id: str,
        rows: Sequence[Mapping[str, Any]],
        tool_calls: int,
        *,
        policy: RetryPolicy | None = None,
    ) -> int:
        """:meth:`append_messages` of rows already made by
        :func:`~hermes_repo.codec.message_to_row` for ``session_id`` (each with its uid
        and timestamp; ``tool_calls`` is their total of calls): for a caller that
        converted the messages already to check them (a transcript flush), so they are
        not converted twice. The rows are not changed: every attempt writes them as given.
        """
        sid = check_session_id(session_id)
        if not rows:
            return 0
        calls = tool_calls
        self.guard.refuse()

        def on_driver() -> int | None:
            try:
                return self._on_driver(
                    lambda cursor: MessageRepository(cursor).append_rows(sid, rows, calls)
                )
            except self.driver.module.Error as exc:
                # Classified once, here; a later attempt (after a lock) or the degrade
                # replays the same group through the unit of work.
                raise self.failure(exc).error from exc

        return self.write(
            lambda uow: uow.messages.append_rows(sid, rows, calls),
            policy,
            first_try=on_driver if self.backend.cursor_fast_path else None,
            adds=len(rows),
        )

    def write_first_on_driver(
        self,
        work: Callable[[UnitOfWork], T],
        fast: Callable[[Any], T | None],
        *,
        adds: int = 0,
        policy: RetryPolicy | None = None,
    ) -> T:
        """``work`` as one unit of work, retried whole within the budget, with
        ``fast(cursor)`` tried once first on SQLite: the same statements on the driver's
        cursor in a ``BEGIN IMMEDIATE`` transaction of their own (for an integration's
        hot write, as the store's own appends run). ``fast`` returns None, before writing
        anything, to hand the unit to ``work`` (a state it does not handle); it writes
        ``adds`` messages when it commits (the FTS merge counts them). A driver error
        there is judged once: a lock is retried (through ``work``), structural damage
        quarantines the file, FTS damage detaches the index and ``work`` runs without
        it; any other (a constraint ``fast`` did not look for first) rolls the attempt
        back and hands the unit to ``work``."""
        if not self.backend.cursor_fast_path:
            return self.write(work, policy)

        def first_try() -> T | None:
            self.guard.refuse()
            try:
                return self._on_driver(fast)
            except self.driver.module.Error as exc:
                failure = self.failure(exc)
                if (
                    failure.structural
                    or failure.kind is ErrorKind.TRANSIENT
                    or self.degradable(failure)
                ):
                    raise failure.error from exc
                return None

        return self.write(work, policy, first_try=first_try, adds=adds)

    def _on_driver(
        self,
        unit: Callable[[Any], T],
        begin: str | None = "BEGIN IMMEDIATE",
        *,
        lenient: bool = False,
    ) -> T:
        """``unit(cursor)`` on the driver's cursor in its own transaction, opened by
        ``begin`` (None: none, each statement is a consistent read on its own); with
        ``lenient``, TEXT that is not UTF-8 is read (see
        :func:`~hermes_repo.codec.text.lenient_text`)."""
        # The pool's connection itself, without an SQLAlchemy Connection around it: that
        # wrapper cost a third of the Python an append runs.
        pooled = self.engine.raw_connection()
        try:
            dbapi = pooled.dbapi_connection
            assert dbapi is not None
            cursor = dbapi.cursor()
            try:
                if lenient:
                    with _text_factory(dbapi):
                        return self._on_cursor(dbapi, cursor, unit, begin)
                return self._on_cursor(dbapi, cursor, unit, begin)
            finally:
                cursor.close()
        finally:
            pooled.close()

    def _on_cursor(self, dbapi: Any, cursor: Any, unit: Callable[[Any], T], begin: str | None) -> T:
        if begin is None:
            return unit(cursor)
        cursor.execute(begin)
        try:
            result = unit(cursor)
            cursor.execute("COMMIT")
            if begin != "BEGIN":  # a write: see write_once
                self.guard.committed(dbapi)
        except BaseException:
            if dbapi.in_transaction:
                with contextlib.suppress(self.driver.module.Error):
                    cursor.execute("ROLLBACK")
            raise
        return result

    def load_messages(
        self,
        session_id: str,
        *,
        include_inactive: bool = False,
        with_ids: bool = False,
        last: int | None = None,
    ) -> list[dict[str, Any]]:
        """A session's messages in replay order (see :meth:`StateStore.load_conversation`),
        or only its newest ``last``, read on the driver's cursor in one ``fetchall``; a
        read transaction, retried."""

        def run(conn: Connection) -> list[dict[str, Any]]:
            if not self.backend.cursor_fast_path:
                return MessageRepository(conn).list(
                    session_id, include_inactive=include_inactive, with_ids=with_ids, last=last
                )
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None
            cursor = dbapi.cursor()
            try:
                return MessageRepository(cursor).list(
                    session_id, include_inactive=include_inactive, with_ids=with_ids, last=last
                )
            finally:
                cursor.close()

        return self.read(run)

    def read_on_driver(self, unit: Callable[[Any], T]) -> T:
        """``unit(cursor)`` on the pool's driver connection, retried like :meth:`read`.

        No SQLAlchemy ``Connection`` is built (it cost more than a selective search), so
        its error event does not run: driver errors are classified here. The first
        attempt runs each statement as a consistent read on its own; a replay after a
        lock runs in one read transaction.
        """
        bare = [True]
        lenient = [False]

        def attempt() -> T:
            begin = None if bare and bare.pop() else "BEGIN"
            try:
                # A quarantined store opens no new connection (the guard's connect hook).
                return self._on_driver(unit, begin, lenient=lenient[0])
            except (DBAPIError, self.driver.module.Error) as exc:
                if not lenient[0] and _undecodable(exc):
                    lenient[0] = True  # once more, reading such text as it can be read
                    return attempt()
                raise self.failure(exc, action="read").error from exc

        return run_with_retry(attempt, self.read_policy)
