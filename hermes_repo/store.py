"""StateStore: the public entry point of the layer."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from sqlalchemy import Engine
from sqlalchemy.engine import Connection

from . import arguments, opening, quarantine
from .backend import Backend
from .database import Database
from .deprecation import warn_renamed
from .engine import Driver, DriverName, db_path_for_home
from .engine_pg import resolve_url
from .errors import ImportSourceError, InvalidArgumentError
from .health import StoreHealth, journal_notes, store_health
from .holders import HolderLock
from .ids import check_session_id
from .maintenance.fts_rebuild import RebuildOutcome
from .provenance import StoreIdentity, database_target
from .repositories import SearchHit
from .repositories.search import SearchQuery
from .repositories.search.paging import SearchPage, page_through
from .retry import RetryPolicy, run_with_retry
from .transcript.reconcile import reconcile_session
from .transcript.replay import ReplayReport, replay_pending
from .transcript.writer import TranscriptWriter
from .transfer import (
    ImportProgress,
    ImportReport,
    SessionInfo,
    catalog,
    export_session,
    import_jsonl,
)
from .uow import UnitOfWork

if TYPE_CHECKING:
    from .hermes_import import HermesImportReport

__all__ = ["Conversation", "StateStore", "StoreHealth", "journal_notes"]

log = logging.getLogger("hermes_repo")
T = TypeVar("T")


@dataclass(frozen=True)
class Conversation:
    """A session's replay: messages in id order, and how many repairs the load made."""

    messages: list[dict[str, Any]]
    repairs: int = 0


class StateStore:
    """A session store in ``<home>/state.db``.

    Open it with :meth:`open`; use it as a context manager or call :meth:`close`.

    The facade composes the store's parts and checks every public argument. Its
    write core is :attr:`database` (a :class:`~hermes_repo.database.Database`): the
    units of work, their retries and failure verdicts, the driver fast paths; the
    facade's writes and reads are run by it. Hand ``store.database`` to code that
    takes a :class:`~hermes_repo.core.WriteCore` (features, integrations, tools) when
    the arguments are already checked, to skip the facade's checks; use the facade
    for everything else (opening, sessions, search, import and export, health).
    """

    def __init__(
        self,
        home: Path,
        engine: Engine,
        driver: Driver,
        holder: HolderLock,
        guard: quarantine.Guard,
        *,
        rebuild: RebuildOutcome | None = None,
        write_budget_s: float | None = None,
        database: Database | None = None,
    ) -> None:
        #: The write core (see the class docstring); ``database`` is one already built
        #: on ``engine`` (by :meth:`open`).
        self.database = database or Database(
            home, engine, driver, guard, write_budget_s=write_budget_s
        )
        self.home = home
        self.path = self.database.path
        self.driver = driver
        self._holder = holder
        #: What the guarded FTS rebuild at open did (None when the index was live).
        self.last_rebuild = rebuild
        #: What the spool replay at open did (None when it was not asked for).
        self.last_replay: ReplayReport | None = None
        #: Who this store is (its ``store_id``, target, ``copied_from``): read, and made
        #: when missing, by :meth:`open`; spool records name it (see
        #: :mod:`hermes_repo.store_id`).
        self.store_identity: StoreIdentity = StoreIdentity(
            None, database_target(self.database), self.database.backend.is_file
        )

    @property
    def write_policy(self) -> RetryPolicy:
        """Retry budget of routine writes: 20 s for a locked or read-only database,
        unless the opener set one (``write_budget_s``)."""
        return self.database.write_policy

    @property
    def read_policy(self) -> RetryPolicy:
        """Retry budget of reads (the write budget: a committing writer blocks readers
        too with a rollback journal)."""
        return self.database.read_policy

    @property
    def transcript_budget_s(self) -> float:
        """Retry budget of transcript flushes: 60 s (the user's conversation), unless
        the opener set one."""
        return self.database.transcript_budget_s

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        home: str | os.PathLike[str] | None = None,
        *,
        url: str | None = None,
        upgrade: bool = False,
        driver: DriverName | None = None,
        write_budget_s: float | None = None,
        replay: bool = True,
        recover: bool | None = None,
    ) -> StateStore:
        """Open (or create) the store in ``home`` (default ``$HERMES_HOME/hermes-repo``).

        The default follows :mod:`hermes_repo.homes`: Hermes Agent's own ``state.db`` is
        never opened as a store (:class:`HermesAgentFileError`, naming the import).

        A missing or empty ``state.db`` is built by the migrations. An existing store
        behind the code raises :class:`SchemaMismatchError` naming ``hermes-repo db
        upgrade``, unless ``upgrade=True``, which runs that same upgrade: on a file, a
        ``pre-upgrade`` snapshot first (see :func:`hermes_repo.maintenance.upgrade.upgrade`),
        then the migrations in one transaction. A store *ahead* of the code is always
        refused.

        ``write_budget_s`` is how long a write waits for a locked or read-only database
        before it fails (default 20 s; transcript flushes default to 60 s). With
        ``replay`` (the default) pending transcript spool files are replayed before
        the store is returned (see :meth:`replay_pending`); a spool that cannot be
        replayed now stays for later and never fails the open. ``recover`` is the
        deprecated name of ``replay``.

        ``url`` (else ``$HERMES_REPO_URL``) chooses a PostgreSQL database,
        ``postgresql+psycopg://user:pw@host:port/db`` (needs psycopg 3, the
        ``postgresql`` extra); ``home`` then still holds the transcript spool and
        the other local files. Without either (or with ``url="sqlite"``), the store is
        the SQLite file in ``home``.
        """
        if recover is not None:
            warn_renamed("StateStore.open(recover=)", "StateStore.open(replay=)")
            replay = recover
        if home is not None:
            home = arguments.path_argument("home", home)
        write_budget_s = arguments.budget_seconds("write_budget_s", write_budget_s)
        arguments.optional_text("url", url)
        db_path = db_path_for_home(home)
        opening.check_home(db_path.parent)  # a server's store keeps its spool there too
        opened = opening.open_store(
            db_path,
            resolve_url(url),
            driver=driver,
            upgrade=upgrade,
            write_budget_s=write_budget_s,
        )
        database = opened.database
        store = cls(
            database.home,
            database.engine,
            database.driver,
            opened.holder,
            database.guard,
            rebuild=opened.rebuild,
            write_budget_s=write_budget_s,
            database=database,
        )
        store.store_identity = opening.identify_at_open(database) or store.store_identity
        if replay:
            store.last_replay = opening.replay_at_open(store, database.write_policy)
        return store

    @property
    def engine(self) -> Engine:
        """The store's SQLAlchemy engine (:attr:`database`'s)."""
        return self.database.engine

    @property
    def backend(self) -> Backend:
        """The database the store runs on (SQLite file or PostgreSQL server)."""
        return self.database.backend

    def close(self) -> None:
        """Close every connection of the store. Safe to call twice."""
        if self.database.close():
            self._holder.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- writes ----------------------------------------------------------------------

    def unit_of_work(self) -> UnitOfWork:
        """A write unit: ``with store.unit_of_work() as uow: ...; uow.commit()``."""
        return self.database.unit_of_work()

    @property
    def quarantined(self) -> bool:
        """True once the file was found structurally damaged: writes are refused."""
        return self.database.quarantined

    def write(self, work: Callable[[UnitOfWork], T], policy: RetryPolicy | None = None) -> T:
        """Run ``work`` in a unit of work and commit; the whole unit is replayed on
        transient errors (locked, busy, read-only) within ``policy``'s time budget
        (default: the store's, see :meth:`open`); see :meth:`Database.write
        <hermes_repo.database.Database.write>`.
        """
        return self.database.write(work, policy)

    # -- transcripts -----------------------------------------------------------------

    def transcript_writer(
        self, session_id: str, *, write_budget_s: float | None = None, source: str = "cli"
    ) -> TranscriptWriter:
        """A :class:`~hermes_repo.TranscriptWriter` for ``session_id`` on this store
        (flush with fallback to ``sessions/<sid>.pending.jsonl``)."""
        return TranscriptWriter(
            self.home, session_id, self, write_budget_s=write_budget_s, source=source
        )

    def replay_pending(
        self,
        session_id: str | None = None,
        *,
        write_budget_s: float | None = None,
        adopt: Sequence[str] = (),
    ) -> ReplayReport:
        """Replay pending spool files into the database, exactly once.

        Every ``sessions/*.pending.jsonl`` (or only ``session_id``'s) is de-duplicated
        against the session's stored messages, inserted in one transaction and deleted
        after the commit; see :mod:`hermes_repo.transcript.replay`. Files that cannot
        be replayed now are kept and named in ``ReplayReport.errors``. Only records of
        this store are replayed: the others stay in their file, named in
        ``ReplayReport.foreign_notes`` with the command that replays them where they
        belong. ``adopt``: ids of stores this one was copied from (its ``copied_from``)
        whose records it takes as its own, or ``"legacy"`` for records of an older
        version that name no store.
        """
        policy = None if write_budget_s is None else RetryPolicy(budget_s=write_budget_s)
        return replay_pending(self, session_id=session_id, policy=policy, adopt=adopt)

    def recover_pending(
        self,
        session_id: str | None = None,
        *,
        write_budget_s: float | None = None,
        adopt: Sequence[str] = (),
    ) -> ReplayReport:
        """Deprecated name of :meth:`replay_pending`."""
        warn_renamed("StateStore.recover_pending()", "StateStore.replay_pending()")
        return self.replay_pending(session_id, write_budget_s=write_budget_s, adopt=adopt)

    @property
    def last_recovery(self) -> ReplayReport | None:
        """Deprecated name of :attr:`last_replay`."""
        warn_renamed("StateStore.last_recovery", "StateStore.last_replay")
        return self.last_replay

    @property
    def store_id(self) -> str | None:
        """The store's id (``state_meta`` key ``store_id``, a uuid4 hex); None only when
        an older store could not be written at this open (read-only, quarantined,
        locked): a later open makes it."""
        return self.store_identity.store_id

    def import_hermes_db(
        self,
        path: str | os.PathLike[str],
        *,
        dry_run: bool = False,
        progress: Callable[[int, int], None] | None = None,
    ) -> HermesImportReport:
        """Import a Hermes Agent ``state.db`` without touching it or losing a value;
        idempotent and incremental (see :mod:`hermes_repo.hermes_import`)."""
        path = arguments.path_argument("path", path)
        if Path(path).resolve() == self.path.resolve():
            raise ImportSourceError(
                f"{path} is this store's own file; pass the state.db of a Hermes Agent home"
            )
        # The importer is loaded by an import alone: opening, reading and writing a
        # store never pay for it.
        from .hermes_import import import_hermes_db

        return import_hermes_db(self.database, Path(path), dry_run=dry_run, progress=progress)

    def append_message(
        self,
        session_id: str,
        message: Mapping[str, Any],
        *,
        policy: RetryPolicy | None = None,
    ) -> int:
        """Append one message in its own transaction (retried); returns the row id.

        The common case runs on the driver's cursor (see :meth:`Database.append_message
        <hermes_repo.database.Database.append_message>`): a structural error quarantines
        the file and is not retried, a lock is retried within the budget, damage to the
        full-text index detaches it and the message is written without it.
        """
        return self.database.append_message(session_id, message, policy=policy)

    def append_messages(
        self,
        session_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        policy: RetryPolicy | None = None,
    ) -> int:
        """Append ``messages`` in list order in one transaction (retried); returns how
        many. All or nothing: any error that is not retried fails the whole group (see
        :meth:`Database.append_messages <hermes_repo.database.Database.append_messages>`).
        """
        batch = arguments.message_list("messages", messages)
        return self.database.append_messages(session_id, batch, policy=policy)

    def append_rows(
        self,
        session_id: str,
        rows: Sequence[Mapping[str, Any]],
        tool_calls: int,
        *,
        policy: RetryPolicy | None = None,
    ) -> int:
        """:meth:`append_messages` of rows already made by
        :func:`hermes_repo.codec.message_to_row` for ``session_id`` (each with its uid
        and timestamp; ``tool_calls`` is their total of tool calls), for a caller that
        converted and checked the messages itself (a transcript flush): one transaction,
        retried and classified the same way; returns how many."""
        sid = check_session_id(session_id)
        batch = arguments.message_list("rows", rows)
        calls = arguments.whole_number("tool_calls", tool_calls)
        for row in batch:
            # Rows are written as given: only a row the codec made for this session will do.
            if row.__class__ is not dict or row.get("session_id") != sid or not row.get("uid"):
                raise InvalidArgumentError(
                    f"rows must be made by message_to_row({sid!r}, message), each with "
                    f"its uid; got {arguments._shown(row)}"
                )
        return self.database.append_rows(sid, batch, calls, policy=policy)

    # -- reads -----------------------------------------------------------------------

    def read(self, work: Callable[[Connection], T], policy: RetryPolicy | None = None) -> T:
        """Run ``work`` on a connection in a read transaction, replayed whole on
        transient errors within :attr:`read_policy` (or ``policy``); driver errors
        leave as :class:`HermesRepoError` subclasses."""
        return self.database.read(work, policy)

    def load_conversation(
        self,
        session_id: str,
        *,
        repair: bool = False,
        include_inactive: bool = False,
        with_ids: bool = False,
        last: int | None = None,
    ) -> Conversation:
        """The session's messages in replay order; with ``last``, only the newest
        ``last`` of them (still in replay order; a tail of a long session is read
        without its head).

        ``include_inactive`` adds archived audit rows (marked ``active: False``). Internal
        row ids are stripped unless ``with_ids``.

        ``repair=True`` repairs role alternation and tool pairing and writes the repair
        back in the transaction that decided it (survivors keep their ids, removed rows
        are archived with a reason), so the next load finds nothing to repair and replays
        the same bytes; ``repairs`` counts the actions this call wrote. A clean session
        is only read. Inspection loads never write: without ``repair``, or with
        ``include_inactive`` (an audit view is never reconciled).
        """
        check_session_id(session_id)
        if last is not None:
            arguments.whole_number("last", last)
        arguments.flag("repair", repair)
        arguments.flag("include_inactive", include_inactive)
        if repair and not include_inactive:
            # Its first read is outside any write lock: a transient failure there is
            # replayed (the write unit inside has its own budget and is not multiplied).
            result = run_with_retry(
                lambda: reconcile_session(self, session_id, with_ids=with_ids),
                self.read_policy,
            )
            kept = result.messages
            if last is not None:
                kept = kept[max(0, len(kept) - last) :]
            return Conversation(messages=kept, repairs=result.repairs)
        messages = self.database.load_messages(
            session_id, include_inactive=include_inactive, with_ids=with_ids, last=last
        )
        return Conversation(messages=messages, repairs=0)

    def search(
        self,
        query: str,
        *,
        limit: int = 20,
        session_id: str | None = None,
        role: str | None = None,
        include_inactive: bool = False,
    ) -> list[SearchHit]:
        """Full-text search; any query text is safe (see :mod:`hermes_repo.repositories.search`).

        While the index is detached (damaged, awaiting a rebuild) answers come from the
        canonical rows through an escaped LIKE scan, in the same shape.

        ``limit`` is honoured up to :data:`~hermes_repo.repositories.search.paging.MAX_SEARCH_LIMIT`
        (above it :class:`SearchLimitError`); word queries come ranked among the most
        recent matches first, then the older hits newest first. Every hit is reachable
        with :meth:`search_page`.
        """
        return self.database.search(
            SearchQuery.checked(
                query,
                limit=limit,
                session_id=session_id,
                role=role,
                include_inactive=include_inactive,
            )
        )

    def search_page(
        self,
        query: str,
        *,
        limit: int = 20,
        cursor: str | None = None,
        session_id: str | None = None,
        role: str | None = None,
        include_inactive: bool = False,
    ) -> SearchPage:
        """One page of every hit of ``query``, newest first by message id.

        Pass the returned ``cursor`` back for the next page (None: the last page was
        returned); a cursor of another query or filters is refused with
        :class:`SearchCursorError`. Each page is one bounded query, so walking all hits
        of a common word costs the same per page as a rare one. Example::

            page = store.search_page("sqlite", limit=50)
            while page.cursor:
                page = store.search_page("sqlite", limit=50, cursor=page.cursor)
        """
        checked = SearchQuery.checked(
            query,
            limit=limit,
            session_id=session_id,
            role=role,
            include_inactive=include_inactive,
        )
        arguments.optional_text("cursor", cursor)
        return page_through(self.database.search, checked, cursor)

    def health(self) -> StoreHealth:
        """A snapshot of the store's state; never writes."""
        return store_health(self.database)

    # -- sessions, import and export: the library API of hermes_repo.transfer -------------

    def list_sessions(
        self, *, limit: int = 50, offset: int = 0, source: str | None = None
    ) -> list[SessionInfo]:
        """Sessions, most recently started first, as ``hermes-repo sessions list`` shows
        them (``source`` keeps only that source's). A plain read transaction: listing
        never takes the write lock an agent needs."""
        arguments.whole_number("limit", limit)
        arguments.whole_number("offset", offset)
        arguments.optional_text("source", source)
        return self.read(
            lambda conn: catalog.list_sessions(conn, limit=limit, offset=offset, source=source)
        )

    def get_session(self, session_id: str) -> SessionInfo:
        """One session's row; :class:`~hermes_repo.errors.NotFoundError` (naming the
        command that lists sessions) when the store has none with that id."""
        return self.read(lambda conn: catalog.get_session(conn, session_id))

    def import_jsonl(
        self, path: str | os.PathLike[str], *, progress: ImportProgress | None = None
    ) -> ImportReport:
        """Import a JSON Lines file, one session per unit of work; idempotent (see
        :func:`hermes_repo.transfer.import_jsonl`)."""
        return import_jsonl(self.database, arguments.path_argument("path", path), progress=progress)

    def export_session(self, session_id: str, fmt: str = "jsonl") -> str:
        """One session's replay as JSON Lines or Markdown text (see
        :func:`hermes_repo.transfer.export_session`)."""
        return export_session(self.database, session_id, fmt)
