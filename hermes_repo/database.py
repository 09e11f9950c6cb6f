"""The write core: units of work on one store file, and what a failure means.

:class:`Database` runs the units of work of one ``state.db``: writes in ``BEGIN
IMMEDIATE`` transactions replayed whole on transient errors within a time budget
(:meth:`Database.write`), reads likewise (:meth:`Database.read`), and the one-message
append on the driver's cursor (:meth:`Database.append_message`, the hot path).

Every driver error, wherever it is met (the engine's ``handle_error`` event, the
driver-cursor fast paths, the unit of work's exit, a read), is classified by one method,
:meth:`Database.failure`, into one :class:`Failure`: its kind, whether the canonical
tables are damaged (a bare SQLITE_CORRUPT is decided by a read-only ``quick_check``)
and whether the derived full-text index is. Two rules follow, each written once here:

* structural damage quarantines the file (:mod:`hermes_repo.quarantine`) and the write
  is not retried;
* FTS damage met by a write detaches the index (marker and trigger drops) in the same
  unit as the write, replayed from its start; met by a search, the index is detached
  and the search answers from the canonical rows.

And one rule for every replay: identity is fixed before the first attempt. The ids a
unit generates come from one :class:`~hermes_repo.identity.Identities` per write call,
so each attempt writes the same session ids and uids; a COMMIT whose connection is lost
on a server is settled by looking for those rows (:meth:`Database.write`), never by
running the unit again on a guess. On a server each unit also waits at most the rest of
its budget for a lock (``SET LOCAL lock_timeout``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import Engine, event, select, text
from sqlalchemy.engine import Connection, ExceptionContext
from sqlalchemy.exc import DBAPIError

from . import quarantine
from .backend import Backend
from .codec import check_server_text, message_to_row, tool_call_count
from .codec.text import lenient_text
from .engine import DB_NAME, WRITE_OPTION, Driver
from .errors import (
    SQLITE_CORRUPT,
    SQLITE_NOTADB,
    CommitUnknownError,
    DatabaseBusyError,
    ErrorKind,
    HermesRepoError,
    IntegrityViolation,
    StateDbCorruptError,
    StoreClosedError,
    UidConflictError,
    WriteFailedError,
    classify,
    commit_outcome_unknown,
    describe,
    sqlite_code,
    translate,
)
from .identity import Identities, Written
from .ids import check_session_id
from .kept import BUSY, KeptConnection, _CommitFailed
from .models import messages_table, sessions_table
from .repositories import MessageRepository, SearchHit, SearchQuery
from .repositories.search.on_store import StoreSearch
from .retry import (
    DEFAULT_POLICY,
    STORE_WRITE_BUDGET_S,
    TRANSCRIPT_WRITE_BUDGET_S,
    RetryPolicy,
    run_with_retry,
)
from .schema import fts
from .uow import UnitOfWork

__all__ = ["Database", "Failure", "WriteCore"]

log = logging.getLogger("hermes_repo")
T = TypeVar("T")


@dataclass(frozen=True)
class Failure:
    """What one driver error means, decided once by :meth:`Database.failure`.

    ``structural``: the canonical b-trees, schema or header are damaged (the file is
    quarantined). ``fts_damage``: the derived full-text index is damaged and the
    canonical tables are sound; ``fts_index`` is the index the error names, if any.
    ``damage`` is the SQLite error in one line. ``error`` is what leaves the API,
    raised ``from`` the driver error.
    """

    kind: ErrorKind
    structural: bool
    fts_damage: bool
    fts_index: str | None
    damage: str
    error: HermesRepoError


class WriteCore(Protocol):
    """What the transcript code and the import need of a store.

    Provided by :class:`Database` and by the :class:`~hermes_repo.StateStore` facade
    (which delegates to its database), so either may be handed in.
    """

    @property
    def home(self) -> Path: ...

    @property
    def path(self) -> Path: ...

    @property
    def transcript_budget_s(self) -> float: ...

    @property
    def backend(self) -> Backend: ...

    def unit_of_work(self) -> UnitOfWork: ...

    def write(self, work: Callable[[UnitOfWork], T], policy: RetryPolicy | None = None) -> T: ...

    def read(self, work: Callable[[Connection], T], policy: RetryPolicy | None = None) -> T: ...

    def append_message(
        self,
        session_id: str,
        message: Mapping[str, Any],
        *,
        policy: RetryPolicy | None = None,
    ) -> int: ...

    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        policy: RetryPolicy | None = None,
    ) -> int: ...


def _driver_error(exc: BaseException) -> BaseException | None:
    """The driver error behind ``exc`` (None for a library error that has none)."""
    err: BaseException | None = exc
    while isinstance(err, HermesRepoError):
        err = err.__cause__
    if isinstance(err, DBAPIError) and err.orig is not None:
        return err.orig
    return err


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


class Database:
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
        #: The database behind the store; its SQLite-only rules (quarantine, FTS
        #: detach, the cursor fast path) are asked of it, never of the dialect.
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
        # The store's searches, with their view of whether the FTS index is live.
        self._search = StoreSearch(self)
        # The last error classified, with its verdict: the engine event classifies an
        # error first, and the unit of work and the write that see it next ask again.
        self._recent: tuple[BaseException, tuple[ErrorKind, bool, bool]] | None = None
        self._engine: Engine | None = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})
        event.listen(engine, "handle_error", self._on_engine_error)
        # On a server, the one-message append's connection (see :mod:`.kept`).
        self._kept = KeptConnection()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise StoreClosedError("the store is closed; open it again with StateStore.open")
        return self._engine

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

    # -- what a failure means ----------------------------------------------------------

    def failure(self, exc: BaseException, *, action: str = "write") -> Failure:
        """Classify a failure: a driver error (raw or wrapped by SQLAlchemy) or a
        library error translated from one. Structural damage quarantines the file here;
        ``action`` names what failed in the error's message ("read", "commit", ...)."""
        cause = _driver_error(exc)
        if cause is None:  # a library error of its own (a refusal, a closed store)
            error = exc if isinstance(exc, HermesRepoError) else translate(exc, action=action)
            return Failure(classify(exc), False, False, None, str(exc), error)
        kind, structural, fts_damage = self._verdict(cause)
        damage = describe(cause)
        if isinstance(exc, HermesRepoError):
            error = exc
        elif structural:
            error = StateDbCorruptError(
                quarantine.enter(self.path, damage, self.guard.key).message()
            )
        else:
            error = translate(exc, action=action)
        index = fts.index_named_in(damage) if fts_damage else None
        return Failure(kind, structural, fts_damage, index, damage, error)

    def _verdict(self, cause: BaseException) -> tuple[ErrorKind, bool, bool]:
        recent = self._recent
        if recent is not None and recent[0] is cause:
            return recent[1]
        kind = classify(cause)
        code = sqlite_code(cause)
        structural = fts_damage = False
        if not self.backend.may_quarantine:
            pass  # a server's errors never mean a damaged store file or FTS5 index
        elif kind is ErrorKind.FTS:
            fts_damage = True
        elif kind is ErrorKind.CORRUPT and code is not None:
            if code & 0xFF == SQLITE_NOTADB:
                structural = True
            elif code & 0xFF == SQLITE_CORRUPT:
                # Ambiguous: a damaged FTS shadow page and a damaged ``messages`` page
                # raise the same code; the canonical tables' quick_check decides.
                structural = not quarantine.canonical_tables_ok(self.driver, self.path)
                fts_damage = not structural
        verdict = (kind, structural, fts_damage)
        self._recent = (cause, verdict)
        return verdict

    def _error(self, exc: BaseException, action: str) -> HermesRepoError:
        return self.failure(exc, action=action).error

    def _on_engine_error(self, ctx: ExceptionContext) -> None:
        orig = ctx.original_exception
        if isinstance(orig, HermesRepoError):  # the guard's own refusal
            return
        failure = self.failure(orig)
        if failure.structural:
            raise failure.error from orig

    def degradable(self, failure: Failure) -> bool:
        """Whether ``failure`` is FTS damage the store detaches the index for (a
        quarantined file is never degraded: no write may reach it)."""
        return failure.fts_damage and self.backend.has_fts_triggers and not self.guard.active

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
        inside the same budget; it returns None to hand over to ``work``.
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
            return run_with_retry(attempt, policy)
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
        log.warning(
            "full-text index damaged (%s): detaching it; the write goes on without it, "
            "search uses the fallback until `hermes-repo sessions repair` rebuilds it",
            failure.damage,
        )
        return self._degrade(failure, work, policy, ids)

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
        the same statements run through SQLAlchemy on a connection kept between appends
        (:mod:`.kept`: no checkout ping per message); a lost one is replayed the same way.
        """
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

            def append(conn: Connection) -> int:
                conn.execute(text(f"SET LOCAL lock_timeout = {_lock_timeout_ms(deadline)}"))
                return MessageRepository(conn, ids=ids).append_row(row, calls)

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
            except DBAPIError as exc:
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
        )

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

    def search(self, query: SearchQuery) -> list[SearchHit]:
        """Full-text search (see :meth:`StateStore.search` and
        :mod:`hermes_repo.repositories.search`): on SQLite tried once on the driver's
        cursor, a damaged index met there detached once and the search answered from
        the canonical rows."""
        return self._search.search(query)

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
