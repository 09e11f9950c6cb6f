"""StateStore: the public entry point of the layer."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from . import engine as engine_mod
from . import fts
from .engine import WRITE_OPTION, Driver, DriverName, create_store_engine, db_path_for_home
from .errors import (
    ErrorKind,
    HermesRepoError,
    SchemaMismatchError,
    StoreClosedError,
    WriteFailedError,
    describe,
    sqlite_code,
    translate,
)
from .holders import HolderLock
from .ops import migrate
from .ops.fts_rebuild import RebuildOutcome, guarded_rebuild
from .repositories import MessageRepository, SearchHit, SearchRepository
from .retry import DEFAULT_POLICY, RetryPolicy, run_with_retry
from .uow import UnitOfWork

__all__ = ["Conversation", "StateStore", "StoreHealth"]

log = logging.getLogger("hermes_repo")
T = TypeVar("T")


@dataclass(frozen=True)
class Conversation:
    """A session's replay: messages in id order, and how many repairs the load made."""

    messages: list[dict[str, Any]]
    repairs: int = 0


@dataclass(frozen=True)
class StoreHealth:
    """What an operator (or a health endpoint) needs to know about a store."""

    path: str
    driver: str
    sqlite_version: str
    sqlite_has_wal_fix: bool
    journal_mode: str
    revision: str | None
    head: str
    counts: dict[str, int]
    fts_stale: bool = False
    quarantined: bool = False
    pending_files: int = 0
    pending_records: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def at_head(self) -> bool:
        return self.revision == self.head


class StateStore:
    """A session store in ``<home>/state.db``.

    Open it with :meth:`open`; use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        home: Path,
        engine: Engine,
        driver: Driver,
        holder: HolderLock,
        *,
        rebuild: RebuildOutcome | None = None,
    ) -> None:
        self.home = home
        self.path = home / engine_mod.DB_NAME
        self.driver = driver
        self._holder = holder
        #: What the guarded FTS rebuild at open did (None when the index was live).
        self.last_rebuild = rebuild
        # FTS state as last seen, and the schema cookie it was seen at: dropping or
        # creating the triggers changes the cookie, so a PRAGMA (no table read) tells
        # this process when another one degraded or rebuilt the index.
        self._fts_seen_at: int | None = None
        self._fts_live = True
        self._engine: Engine | None = engine
        self._writer = engine.execution_options(**{WRITE_OPTION: True})
        self._sessions: sessionmaker[Session] = sessionmaker(
            bind=self._writer, expire_on_commit=False
        )

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        home: str | os.PathLike[str] | None = None,
        *,
        upgrade: bool = False,
        driver: DriverName | None = None,
    ) -> StateStore:
        """Open (or create) the store in ``home`` (default ``$HERMES_HOME``, else ``~/.hermes``).

        A missing or empty ``state.db`` is built by the migrations. An existing store
        behind the code raises :class:`SchemaMismatchError` naming ``hermes-repo db
        upgrade``, unless ``upgrade=True``. A store *ahead* of the code is always refused.
        """
        db_path = db_path_for_home(home)
        drv = engine_mod.select_driver(driver)
        engine = create_store_engine(db_path, driver=drv)
        holder = HolderLock(db_path)
        try:
            cls._ensure_schema(engine, db_path, upgrade=upgrade)
            # Before registering as a holder: the rebuild needs the store to itself.
            outcome = guarded_rebuild(engine, db_path, holder, automatic=True)
            if not outcome.ok:
                log.warning("full-text index is detached: %s", outcome.reason)
            holder.acquire_shared()
        except BaseException:
            holder.release()
            engine.dispose()
            raise
        return cls(db_path.parent, engine, drv, holder, rebuild=outcome if outcome.ran else None)

    @staticmethod
    def _ensure_schema(engine: Engine, db_path: Path, *, upgrade: bool) -> None:
        head = migrate.head_revision()
        try:
            with engine.connect() as conn:
                current = migrate.current_revision(conn)
                empty = current is None and migrate.is_empty(conn)
        except DBAPIError as exc:
            raise translate(exc, action=f"opening {db_path}") from exc
        if current == head:
            return
        if empty:
            migrate.upgrade(engine)
            return
        if current is None:
            raise SchemaMismatchError(
                f"{db_path} holds tables but no hermes_repo schema revision; it is not a "
                "hermes_repo store. Point --home / HERMES_HOME at another folder"
            )
        if current not in migrate.known_revisions():
            raise SchemaMismatchError(
                f"{db_path} is at schema revision {current}, newer than this version of "
                f"hermes_repo knows (head {head}); upgrade the hermes_repo package"
            )
        if not upgrade:
            raise SchemaMismatchError(
                f"{db_path} is at schema revision {current}, behind this code (head {head}); "
                f"run `hermes-repo --home {db_path.parent} db upgrade` (it backs up first)"
            )
        migrate.upgrade(engine)

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise StoreClosedError("the store is closed; open it again with StateStore.open")
        return self._engine

    def close(self) -> None:
        """Close every connection of the store. Safe to call twice."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.dispose()
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
        self.engine  # noqa: B018 - raises StoreClosedError after close()
        return UnitOfWork(self._sessions)

    def write(self, work: Callable[[UnitOfWork], T], policy: RetryPolicy = DEFAULT_POLICY) -> T:
        """Run ``work`` in a unit of work and commit; the whole unit is replayed on
        transient errors (locked, busy, read-only) within ``policy``'s time budget."""

        try:
            return run_with_retry(lambda: self._once(work), policy)
        except WriteFailedError as exc:
            if not self._is_fts_damage(exc):
                raise
            damage = exc

        def detached(uow: UnitOfWork) -> T:
            # The marker, the trigger drops and the caller's whole unit commit together;
            # SQLite may already have rolled the failed transaction back, so the unit is
            # replayed from its start, never patched up.
            fts.detach(uow.session.connection(), index=None, error=describe(damage))
            return work(uow)

        log.warning(
            "full-text index damaged (%s): detaching it; the write goes on without it, "
            "search uses the fallback until `hermes-repo sessions repair` rebuilds it",
            describe(damage),
        )
        result = run_with_retry(lambda: self._once(detached), policy)
        self._fts_live = False
        return result

    def _is_fts_damage(self, exc: HermesRepoError) -> bool:
        """FTS damage, told apart from damage to the canonical tables.

        A bare SQLITE_CORRUPT is ambiguous (a bad FTS shadow page and a bad ``messages``
        page both raise it): a read-only ``quick_check`` of the canonical tables decides.
        """
        if not isinstance(exc, WriteFailedError):
            return False
        if exc.kind is ErrorKind.FTS:
            return True
        cause = exc.__cause__
        code = sqlite_code(cause) if cause is not None else None
        if exc.kind is not ErrorKind.CORRUPT or code is None or code & 0xFF != 11:
            return False
        return self._canonical_tables_ok()

    def _canonical_tables_ok(self) -> bool:
        uri = f"file:{self.path}?mode=ro"
        try:
            conn = self.driver.module.connect(uri, uri=True)
        except self.driver.module.Error:
            return False
        try:
            return all(
                conn.execute(f"PRAGMA quick_check({t})").fetchone()[0] == "ok"
                for t in ("sessions", "messages")
            )
        except self.driver.module.Error:
            return False
        finally:
            conn.close()

    def _degrade(self, exc: HermesRepoError) -> None:
        def detach(uow: UnitOfWork) -> None:
            fts.detach(uow.session.connection(), index=None, error=describe(exc))

        log.warning(
            "full-text index damaged (%s): detaching it; search uses the fallback until "
            "`hermes-repo sessions repair` rebuilds it",
            describe(exc),
        )
        run_with_retry(lambda: self._once(detach))
        self._fts_live = False

    def _once(self, work: Callable[[UnitOfWork], T]) -> T:
        with self.unit_of_work() as uow:
            result = work(uow)
            uow.commit()
            return result

    def _fts_is_live(self, session: Session) -> bool:
        conn = session.connection()
        cookie = int(conn.exec_driver_sql("PRAGMA schema_version").scalar_one())
        if cookie != self._fts_seen_at:
            self._fts_live = fts.stale_marker(conn) is None and fts.present_triggers(conn) == set(
                fts.TRIGGER_NAMES
            )
            self._fts_seen_at = cookie
        return self._fts_live

    def append_message(self, session_id: str, message: Mapping[str, Any]) -> int:
        """Append one message in its own transaction (retried); returns the row id."""
        return self.write(lambda uow: uow.messages.append(session_id, message))

    # -- reads -----------------------------------------------------------------------

    def _read(self, work: Callable[[Session], T]) -> T:
        try:
            with Session(bind=self.engine) as session, session.begin():
                return work(session)
        except DBAPIError as exc:
            raise translate(exc, action="read") from exc

    def load_conversation(
        self,
        session_id: str,
        *,
        repair: bool = False,
        include_inactive: bool = False,
        with_ids: bool = False,
    ) -> Conversation:
        """The session's messages in replay order.

        ``include_inactive`` adds archived audit rows (marked ``active: False``). Internal
        row ids are stripped unless ``with_ids``.

        ``repair=True`` repairs role alternation and tool pairing and writes the repair
        back in the transaction that decided it (survivors keep their ids, removed rows
        are archived with a reason), so the next load finds nothing to repair and replays
        the same bytes; ``repairs`` counts the actions this call wrote. A clean session
        is only read. Inspection loads never write: without ``repair``, or with
        ``include_inactive`` (an audit view is never reconciled).
        """
        if repair and not include_inactive:
            # Imported on use: the transcript package builds on the store, not the
            # other way round, so a module-level import would be circular.
            from .transcript.reconcile import reconcile_session

            result = reconcile_session(self, session_id)
            if not with_ids:
                for message in result.messages:
                    del message["id"]
            return Conversation(messages=result.messages, repairs=result.repairs)
        messages = self._read(
            lambda s: MessageRepository(s).list(
                session_id, include_inactive=include_inactive, with_ids=with_ids
            )
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
        """

        def run(session: Session, use_fts: bool | None = None) -> list[SearchHit]:
            live = self._fts_is_live(session) if use_fts is None else use_fts
            return SearchRepository(session.connection()).search(
                query,
                limit=limit,
                session_id=session_id,
                role=role,
                include_inactive=include_inactive,
                use_fts=live,
            )

        try:
            return self._read(run)
        except WriteFailedError as exc:
            if not self._is_fts_damage(exc):
                raise
            self._degrade(exc)
            return self._read(lambda s: run(s, use_fts=False))

    def health(self) -> StoreHealth:
        """A snapshot of the store's state; never writes."""

        def probe(session: Session) -> tuple[str | None, str, dict[str, int]]:
            conn = session.connection()
            mode = str(conn.exec_driver_sql("PRAGMA journal_mode").scalar_one())
            counts = {
                "sessions": int(conn.execute(text("SELECT count(*) FROM sessions")).scalar_one()),
                "messages": int(conn.execute(text("SELECT count(*) FROM messages")).scalar_one()),
                "active_messages": int(
                    conn.execute(
                        text("SELECT count(*) FROM messages WHERE active = 1")
                    ).scalar_one()
                ),
            }
            return migrate.current_revision(conn), mode, counts

        revision, mode, counts = self._read(probe)
        stale = self._read(lambda s: fts.stale_marker(s.connection()))
        notes = []
        if not self.driver.has_wal_reset_fix:
            notes.append(
                f"SQLite {self.driver.sqlite_version} predates the WAL-reset fix (3.51.3); "
                f"the store uses journal_mode={self.driver.journal_mode}. "
                "Install pysqlite3 for a fixed SQLite"
            )
        return StoreHealth(
            path=str(self.path),
            driver=self.driver.name,
            sqlite_version=self.driver.sqlite_version,
            sqlite_has_wal_fix=self.driver.has_wal_reset_fix,
            journal_mode=mode.lower(),
            revision=revision,
            head=migrate.head_revision(),
            counts=counts,
            fts_stale=stale is not None,
            notes=notes,
        )
