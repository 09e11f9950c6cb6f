"""The write core's executors: units of work run whole, replayed on transient errors.

:meth:`UnitRunner.write` runs a unit of work in a ``BEGIN IMMEDIATE`` transaction (on
a server, with ``SET LOCAL lock_timeout`` for the rest of its budget), replayed whole on
transient errors within a time budget; :meth:`UnitRunner.read` runs reads likewise. A
failure is judged by :class:`~hermes_repo.core.verdict.FailureVerdict`; FTS damage a
write meets detaches the index in the same unit, replayed from its start
(:meth:`UnitRunner.detach_index`).

One rule for every replay: identity is fixed before the first attempt. The ids a unit
generates come from one :class:`~hermes_repo.identity.Identities` per write call, so
each attempt writes the same session ids and uids; a COMMIT whose connection is lost on
a server is settled by looking for those rows (:meth:`UnitRunner._settle`), never by
running the unit again on a guess.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Engine, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..codec.text import lenient_text
from ..driver_errors import describe
from ..errors import (
    CommitUnknownError,
    DatabaseBusyError,
    ErrorKind,
    IntegrityViolation,
    StoreClosedError,
    UidConflictError,
    WriteFailedError,
)
from ..identity import Identities, Written
from ..models import messages_table, sessions_table
from ..retry import DEFAULT_POLICY, RetryPolicy, run_with_retry
from ..schema import fts
from ..schema.fts import merge as fts_merge
from ..uow import UnitOfWork
from .verdict import Failure, FailureVerdict, _driver_error

if TYPE_CHECKING:
    from ..repositories.search.on_store import StoreSearch

__all__ = ["MIN_LOCK_TIMEOUT_MS", "UnitRunner"]

log = logging.getLogger("hermes_repo")
T = TypeVar("T")

# SQLite hands back TEXT as stored; bytes that are not UTF-8 (written by another tool)
# make the driver raise this for the whole fetch, which would make a session unreadable.
_UNDECODABLE = "Could not decode to UTF-8"


def _undecodable(exc: BaseException) -> bool:
    return _UNDECODABLE in str(_driver_error(exc) or exc)


@contextlib.contextmanager
def _text_factory(dbapi: Any) -> Iterator[None]:
    """TEXT read with :func:`~hermes_repo.codec.text.lenient_text` on ``dbapi`` for the
    duration (then ``str``, SQLite's driver's default, again: the pooled connection goes
    back as it came)."""
    dbapi.text_factory = lenient_text
    try:
        yield
    finally:
        dbapi.text_factory = str


#: The shortest ``lock_timeout`` a server unit gets (0 would mean "wait for ever").
MIN_LOCK_TIMEOUT_MS = 20
# The transaction's id, when it wrote anything (NULL for a unit that only read): what a
# unit that wrote nothing under a uid or session id is looked up by after a lost commit.
_XID_SQL = text("SELECT CAST(pg_current_xact_id_if_assigned() AS text)")
_XID_STATUS_SQL = text("SELECT pg_xact_status(CAST(:xid AS xid8))")
# A merge that meets a damaged index detaches it within this budget (it runs after a
# write that already committed: it must not hold the caller long).
_MERGE_DETACH_POLICY = RetryPolicy(budget_s=1.0)
# A lookup after a lost commit asks for this many identities per statement.
_LOOKUP_CHUNK = 500


@dataclass
class _Unsettled:
    """An attempt whose COMMIT was sent and whose reply was lost: what the unit
    returned, what it wrote under an identity, its transaction id (server; only for a
    unit that wrote nothing under an identity), and what a look found (None: not yet)."""

    result: Any
    written: Written
    xid: str | None
    error: CommitUnknownError
    landed: bool | None = None


def _lock_timeout_ms(deadline: float) -> int:
    """A server unit's ``lock_timeout``: what is left of the write budget."""
    return max(MIN_LOCK_TIMEOUT_MS, int((deadline - time.monotonic()) * 1000))


def _same_row(
    stored: Mapping[str, Any], row: Mapping[str, Any], skip: tuple[str, ...]
) -> str | None:
    """The first column where ``stored`` differs from ``row`` (None: the same message)."""
    for column, value in row.items():
        if column not in skip and column in stored and stored[column] != value:
            return column
    return None


class UnitRunner(FailureVerdict):
    """Units of work and reads on one store, run whole and replayed (see the module
    docstring); the attributes are set by :class:`~hermes_repo.database.Database`."""

    _engine: Engine | None
    # The engine whose connections write (BEGIN IMMEDIATE on SQLite).
    _writer: Engine
    #: Retry budget of routine writes (the opener's ``write_budget_s``, default 20 s).
    write_policy: RetryPolicy
    #: Retry budget of reads (the write budget: a committing writer blocks readers too).
    read_policy: RetryPolicy
    # The store's searches, with their view of whether the FTS index is live.
    _search: StoreSearch
    # Messages committed, and when the FTS indexes' next bounded merge is due.
    _merge: fts_merge.MergeCadence

    @property
    def engine(self) -> Engine:
        """The store's engine; :class:`StoreClosedError` once the store is closed."""
        if self._engine is None:
            raise StoreClosedError("the store is closed; open it again with StateStore.open")
        return self._engine

    def _degrade(
        self,
        failure: Failure,
        work: Callable[[UnitOfWork], T],
        policy: RetryPolicy,
        ids: Identities | None = None,
    ) -> T:
        """Detach the damaged index and run ``work`` in the same unit, replayed whole
        (with the write call's ``ids``: the same generated ids as its attempts)."""

        def detached(uow: UnitOfWork) -> T:
            if ids is not None:
                uow.attempt_of(ids)
            # The marker, the trigger drops and the caller's whole unit commit together;
            # SQLite may already have rolled the failed transaction back, so the unit is
            # replayed from its start, never patched up. The marker keeps the SQLite
            # error, not its translation ("the database file is damaged ...").
            fts.detach(uow.connection, index=failure.fts_index, error=failure.damage)
            return work(uow)

        result = run_with_retry(lambda: self.write_once(detached), policy)
        self._search.index.detached()
        return result

    def detach_index(self, failure: Failure) -> None:
        """Detach the damaged FTS index ``failure`` names, in a unit of its own."""
        self._degrade(failure, lambda uow: None, DEFAULT_POLICY)

    # -- writes ------------------------------------------------------------------------

    def unit_of_work(self) -> UnitOfWork:
        """A write unit: ``with db.unit_of_work() as uow: ...; uow.commit()``."""
        self.engine  # noqa: B018 - raises StoreClosedError after close()
        self.guard.refuse()
        return UnitOfWork(self._writer, errors=self._error)

    def write_once(self, work: Callable[[UnitOfWork], T]) -> T:
        """One attempt: ``work`` in a unit of work, committed; not retried, no degrade.

        :meth:`write` calls it once per attempt (a seam to count attempts).
        """
        with self.unit_of_work() as uow:
            result = work(uow)
            uow.commit()
            # Not acknowledged if the store's files were removed or replaced under it.
            self.guard.committed(uow.connection.connection.dbapi_connection)
            return result

    def write(
        self,
        work: Callable[[UnitOfWork], T],
        policy: RetryPolicy | None = None,
        *,
        first_try: Callable[[], T | None] | None = None,
        adds: int = 0,
    ) -> T:
        """Run ``work`` in a unit of work and commit; the whole unit is replayed on
        transient errors (locked, busy, read-only) within ``policy``'s time budget
        (default: :attr:`write_policy`). Damage to the full-text index detaches it and
        the unit is replayed without it.

        Every id the unit generates (``uow.sessions.create()`` without an id, a message
        appended without a uid) is the same on every attempt of this call (see
        :mod:`hermes_repo.identity`). A server unit waits at most the rest of the budget
        for any one lock (``SET LOCAL lock_timeout``). When the connection is lost
        during COMMIT, the unit is not run again blindly: the sessions and messages it
        wrote are looked up on a fresh connection (a unit that wrote none of those, by
        its transaction id): all there, the commit landed and its result is returned;
        none, it is written again within the budget; some, a :class:`WriteFailedError`
        says so. If the server cannot be asked within the budget,
        :class:`CommitUnknownError`.

        ``first_try`` (internal) is a cheaper way to do the same unit, tried once first
        inside the same budget; it returns None to hand over to ``work``. ``adds`` is
        how many messages ``first_try`` writes when it commits (the unit of work counts
        its own): after a write that added messages, the FTS indexes' bounded merge
        may run (:meth:`_merge_indexes`).
        """
        if policy is None:
            policy = self.write_policy
        pending_first = [first_try] if first_try is not None else []
        ids = Identities()
        server = not self.backend.is_file
        deadline = time.monotonic() + policy.budget_s
        # The latest attempt whose commit reply was lost, and this attempt's result and
        # transaction id (set just before its COMMIT).
        unsettled: list[_Unsettled] = []
        last: list[Any] = []
        # Messages the committed attempt wrote: the fast path's ``adds``, else the
        # unit's own record (an attempt's record restarts with it).
        added = [-1]

        def unit(uow: UnitOfWork) -> T:
            uow.attempt_of(ids, _lock_timeout_ms(deadline) if server else None)
            result = work(uow)
            xid = None
            if server and not ids.written:
                xid = uow.connection.execute(_XID_SQL).scalar()
            last[:] = [result, xid]
            return result

        def attempt() -> T:
            # The last look could not reach the server: look before writing again.
            if unsettled and unsettled[0].landed is None and self._settle(unsettled[0]):
                return unsettled[0].result  # type: ignore[no-any-return]
            last.clear()
            try:
                if pending_first:
                    result = pending_first.pop()()
                    if result is not None:
                        added[0] = adds
                        return result
                return self.write_once(unit)
            except CommitUnknownError as exc:
                lost = getattr(exc, "unsettled", None)
                if lost is None:
                    result, xid = last if last else (None, None)
                    lost = _Unsettled(result, ids.written, xid, exc)
                unsettled[:] = [lost]
                if self._settle(lost):
                    return lost.result  # type: ignore[no-any-return]
                # Transient, chained to the driver's error (what the budget's end names).
                raise DatabaseBusyError(
                    "write failed: the connection was lost while committing and the "
                    "commit did not land; writing it again"
                ) from (exc.__cause__ or exc)
            except IntegrityViolation as exc:
                # A commit thought lost may have landed after the look (it was still
                # in flight): the new attempt then collides with its own rows.
                if (
                    unsettled
                    and not isinstance(exc, UidConflictError)
                    and self._settle(unsettled[0])
                ):
                    return unsettled[0].result  # type: ignore[no-any-return]
                raise

        try:
            done = run_with_retry(attempt, policy)
        except CommitUnknownError:
            raise
        except WriteFailedError as exc:
            if unsettled and unsettled[0].landed is None and exc.kind is ErrorKind.TRANSIENT:
                elapsed = getattr(exc, "elapsed_s", None)
                raise CommitUnknownError(
                    f"commit outcome unknown: the connection was lost while committing and "
                    f"the server could not be asked whether the commit landed within the "
                    f"{policy.budget_s:g} s budget ({exc}); nothing was written twice. "
                    "Write it again with the same uids and session ids (a transcript "
                    "flush spools it and the replay stores each message once)",
                    elapsed_s=elapsed,
                ) from exc
            failure = self.failure(exc)
            if not self.degradable(failure):
                raise
        else:
            if self.backend.has_fts_triggers:
                self._merge_indexes(added[0] if added[0] >= 0 else len(ids.written.messages))
            return done
        # (A degraded write detached the index: nothing to merge.)
        log.warning(
            "full-text index damaged (%s): detaching it; the write goes on without it, "
            "search uses the fallback until `hermes-repo sessions repair` rebuilds it",
            failure.damage,
        )
        return self._degrade(failure, work, policy, ids)

    def _merge_indexes(self, messages: int) -> None:
        """After a committed write of ``messages`` messages: when the count crosses the
        cadence (:mod:`hermes_repo.schema.fts.merge`), the bounded merge of the FTS5
        indexes in a short transaction of its own on a pooled write connection.

        Best effort, never harmful to the write that already committed: it never
        raises, and it never waits for a lock (busy_timeout 0 for its transaction):
        another writer holding the store means skip, due again at the next write. It
        does not run while the index is detached (the stale marker, read by the merge
        statements themselves), nor on a quarantined or closed store. Any other
        driver error is judged like a write's (:meth:`failure`): structural damage
        quarantines the file there, FTS damage detaches the index as a write or a
        search would (so the damage is noticed the same way); then it is dropped.
        """
        if messages <= 0 or not self._merge.add(messages):
            return
        if self._engine is None or self.guard.active:
            return
        try:
            outcome = self._merge_on_driver()
        except Exception:  # maintenance must never fail a write that committed
            log.debug("full-text index merge skipped", exc_info=True)
            return
        if outcome is not None:
            self._merge.merged()

    def _merge_on_driver(self) -> bool | None:
        """One merge attempt: True ran (a detached index is skipped by the statements
        themselves), False met damage; both: not due again until the next cadence.
        None: skipped, the lock was busy."""
        module = self.driver.module
        pooled = self.engine.raw_connection()
        try:
            dbapi = pooled.dbapi_connection
            assert dbapi is not None
            cursor = dbapi.cursor()
            try:
                wait_ms = cursor.execute("PRAGMA busy_timeout").fetchone()[0]
                cursor.execute("PRAGMA busy_timeout = 0")
                try:
                    return self._merge_unit(cursor, dbapi)
                finally:
                    try:
                        cursor.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
                    except BaseException:
                        # Never back in the pool without its wait: the next write
                        # would fail at once on any lock.
                        pooled.invalidate()
                        raise
            finally:
                cursor.close()
        except module.Error as exc:
            failure = self.failure(exc, action="merge the full-text index")
            if failure.kind is ErrorKind.TRANSIENT:
                return None  # another writer has the store: due again at the next write
            if self.degradable(failure):
                log.warning(
                    "full-text index damaged (%s): detaching it; search uses the fallback "
                    "until `hermes-repo sessions repair` rebuilds it",
                    failure.damage,
                )
                self._degrade(failure, lambda uow: None, _MERGE_DETACH_POLICY)
            return False
        finally:
            pooled.close()

    def _merge_unit(self, cursor: Any, dbapi: Any) -> bool:
        cursor.execute("BEGIN IMMEDIATE")
        try:
            fts_merge.run(cursor)
            cursor.execute("COMMIT")
        except BaseException:
            if dbapi.in_transaction:
                with contextlib.suppress(self.driver.module.Error):
                    cursor.execute("ROLLBACK")
            raise
        return True

    def _settle(self, lost: _Unsettled) -> bool:
        """Whether a commit whose reply was lost landed, looked up on a fresh
        connection; sets ``lost.landed``. A failure to look raises (transient when the
        server is unreachable: the caller looks again within its budget)."""

        def look(conn: Connection) -> bool:
            if lost.written:
                return self._found_written(conn, lost.written)
            if lost.xid is None:
                return True  # the unit wrote nothing: there is nothing to repeat
            status = conn.execute(_XID_STATUS_SQL, {"xid": lost.xid}).scalar()
            if status == "committed":
                return True
            if status == "aborted":
                return False
            raise DatabaseBusyError(
                "write failed: the transaction whose commit reply was lost is "
                f"{status or 'unknown'} on the server; looking again"
            )

        try:
            with self.engine.connect() as conn:
                landed = look(conn)
        except DBAPIError as exc:
            raise self.failure(exc, action="look up a lost commit").error from exc
        lost.landed = landed
        log.warning(
            "the connection was lost while committing (%s); the commit %s",
            describe(lost.error.__cause__ or lost.error),
            "landed: its result is returned" if landed else "did not land: writing it again",
        )
        return landed

    def _found_written(self, conn: Connection, written: Written) -> bool:
        """True when every session and message ``written`` names is stored (messages
        with the same content), False when none is."""
        want = len(written.sessions) + len(written.messages)
        found = 0
        sid_column = sessions_table.c.id
        for i in range(0, len(written.sessions), _LOOKUP_CHUNK):
            some = written.sessions[i : i + _LOOKUP_CHUNK]
            found += len(conn.execute(select(sid_column).where(sid_column.in_(some))).all())
        by_session: dict[str, list[Mapping[str, Any]]] = {}
        for row in written.messages:
            by_session.setdefault(row["session_id"], []).append(row)
        m = messages_table
        conflict: tuple[str, str, str] | None = None
        for sid, rows in by_session.items():
            columns = [m.c[k] for k in rows[0] if k in m.c]
            for i in range(0, len(rows), _LOOKUP_CHUNK):
                chunk = {r["uid"]: r for r in rows[i : i + _LOOKUP_CHUNK]}
                stmt = select(*columns).where(m.c.session_id == sid, m.c.uid.in_(list(chunk)))
                for stored in conn.execute(stmt).mappings():
                    found += 1
                    column = _same_row(dict(stored), chunk[stored["uid"]], ())
                    if column is not None and conflict is None:
                        conflict = (sid, stored["uid"], column)
        if found == 0:
            return False
        if conflict is not None:
            sid, uid, column = conflict
            raise UidConflictError(
                f"uid {uid!r} of session {sid!r} is stored for a different message (its "
                f"{column} differs) by another writer; give each message its own uid"
            )
        if found < want:
            raise WriteFailedError(
                f"write failed: after a commit whose reply was lost, {found} of the "
                f"{want} sessions and messages it wrote are stored, which one transaction "
                "cannot leave; another writer used the same ids. Check the session with "
                "`hermes-repo sessions show` and write the missing messages again",
                ErrorKind.OTHER,
            )
        return True

    # -- reads -------------------------------------------------------------------------

    def read(
        self,
        work: Callable[[Connection], T],
        policy: RetryPolicy | None = None,
        *,
        transaction: bool = True,
    ) -> T:
        """Run ``work`` in a read transaction, replayed whole on transient errors.

        With a rollback journal a writer's commit blocks readers for longer than
        ``busy_timeout``; the read then waits like a write does (``policy``, default
        :attr:`read_policy`). ``work`` may run statements on the connection's driver
        cursor: its driver errors are classified like the others. Without
        ``transaction`` the first attempt runs each statement as a consistent read on
        its own (no BEGIN and COMMIT round trips, for hot paths); a replay after a lock
        runs in a transaction, so a read that got in is not interrupted halfway by the
        next writer.
        """
        bare = [not transaction]
        lenient = [False]

        def attempt() -> T:
            # A plain connection, not an ORM session: reads are hot paths (search, load)
            # and the session's bookkeeping cost more than the query.
            try:
                with self.engine.connect() as conn:
                    if lenient[0]:
                        with _text_factory(conn.connection.dbapi_connection), conn.begin():
                            return work(conn)
                    if bare and bare.pop():
                        return work(conn)
                    with conn.begin():
                        return work(conn)
            except (DBAPIError, self.driver.module.Error) as exc:
                if not lenient[0] and self.backend.is_file and _undecodable(exc):
                    lenient[0] = True  # once more, reading such text as it can be read
                    return attempt()
                raise self.failure(exc, action="read").error from exc

        return run_with_retry(attempt, policy or self.read_policy)
