"""What :meth:`StateStore.open` does before it hands out a store: both opens, the file's
(:func:`open_file`) and the server's (:func:`open_server`), chosen by :func:`open_store`.

On a file: refuse a quarantined one, save a damaged ``-wal`` before SQLite can discard
it, register as a holder (an exclusive repair or restore must see this process), bring
the schema to head or refuse with the command that fixes it, rebuild a detached
full-text index when this process may, and read the file's journal mode. On a server:
check the database, and bring the schema to head under the migration lock. Before either,
the home folder is checked (:func:`check_home`); after, the store's identity is read or
made (:func:`identify_at_open`) and pending transcripts are replayed
(:func:`replay_at_open`), neither ever failing the open. Each step
translates its driver errors through the write core, so a damaged file met here is
quarantined like one met by any write.

Bringing a file to head with ``upgrade=True`` is :func:`hermes_repo.maintenance.upgrade.upgrade`,
the same upgrade as ``hermes-repo db upgrade``: a ``pre-upgrade`` snapshot first.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from . import quarantine, walcheck
from .core import WriteCore
from .database import Database
from .driver_errors import describe
from .engine import DB_NAME, DriverName, create_store_engine, select_driver
from .engine_pg import PgTarget, create_pg_engine, safe_url
from .errors import (
    ConfigurationError,
    DatabaseBusyError,
    HermesRepoError,
    StateDbCorruptError,
)
from .health import journal_notes
from .holders import HolderLock, StoreHeldError
from .maintenance.fts_rebuild import RebuildOutcome, guarded_rebuild
from .maintenance.upgrade import RestorePoint, must_migrate, upgrade_server_schema
from .maintenance.upgrade import upgrade as upgrade_file
from .provenance import StoreIdentity, ensure_identity
from .retry import RetryPolicy, run_with_retry
from .schema import fts, migrate, server
from .transcript.replay import ReplayReport, replay_pending

__all__ = [
    "OpenedStore",
    "check_home",
    "ensure_schema",
    "file_journal_mode",
    "identify_at_open",
    "open_file",
    "open_server",
    "open_store",
    "prepare",
    "rebuild_at_open",
    "register_holder",
    "replay_at_open",
]


log = logging.getLogger("hermes_repo")


@dataclass(frozen=True)
class OpenedStore:
    """What an open hands to :class:`~hermes_repo.store.StateStore`: the write core, the
    holder registration (never taken on a server), and what the guarded FTS rebuild at
    open did (None when it did not run)."""

    database: Database
    holder: HolderLock
    rebuild: RebuildOutcome | None = None


def open_store(
    db_path: Path,
    target: PgTarget | None,
    *,
    driver: DriverName | None,
    upgrade: bool,
    write_budget_s: float | None,
) -> OpenedStore:
    """Open the store: the server ``target`` names, else the SQLite file ``db_path``."""
    if target is None:
        return open_file(db_path, driver=driver, upgrade=upgrade, write_budget_s=write_budget_s)
    database = open_server(db_path.parent, target, upgrade=upgrade, write_budget_s=write_budget_s)
    # No holder lock file on a server: a registration that is never taken.
    return OpenedStore(database, HolderLock(db_path))


def open_file(
    db_path: Path, *, driver: DriverName | None, upgrade: bool, write_budget_s: float | None
) -> OpenedStore:
    """The write core of the SQLite store ``db_path``, its schema at head (or refused),
    registered as a holder, its full-text index rebuilt when it was stale and this
    process may."""
    info = quarantine.quarantine_info(db_path)
    if info is not None:
        raise StateDbCorruptError(info.message())
    walcheck.preserve_damaged_wal(db_path)  # before SQLite can discard its frames
    drv = select_driver(driver)
    holder = HolderLock(db_path)
    engine = create_store_engine(db_path, driver=drv, journal_switch=holder.alone)
    guard = quarantine.install(engine, db_path, drv)
    # Built first: its engine event quarantines a damaged file met by the open too.
    database = Database(db_path.parent, engine, drv, guard, write_budget_s=write_budget_s)
    policy = database.write_policy
    try:
        # Registered as a holder before the first read: an exclusive operation
        # (restore, repair) that starts now must see us. The rebuild below upgrades
        # this registration and succeeds only if no other process holds the store.
        # An exclusive operation may run for long (a repair rebuilds the index): the
        # wait for it is bounded by the same budget as a write.
        register_holder(holder, db_path, policy.budget_s)
        # Another process may hold the write lock right now (a rollback journal
        # blocks readers too): the schema check and the read of the FTS marker
        # after it are replayed whole, like any unit, within the budget.
        stale = run_with_retry(lambda: prepare(database, upgrade=upgrade), policy)
        outcome = (
            RebuildOutcome(ran=False, ok=True, reason="FTS is live; nothing to rebuild")
            if not stale
            else rebuild_at_open(engine, db_path, holder)
        )
        if not outcome.ok:
            log.warning("full-text index is detached: %s", outcome.reason)
        if not drv.has_wal_reset_fix:
            mode = run_with_retry(lambda: file_journal_mode(database), policy)
            if mode == "wal":  # the risky case; a rollback journal is the design
                for note in journal_notes(drv, mode):
                    log.warning("%s", note)
    except BaseException:
        holder.release()
        engine.dispose()
        raise
    return OpenedStore(database, holder, outcome if outcome.ran else None)


def register_holder(holder: HolderLock, db_path: Path, budget_s: float) -> None:
    start = time.monotonic()
    try:
        holder.acquire_shared(timeout_s=budget_s)
    except StoreHeldError as exc:
        elapsed = time.monotonic() - start
        raise DatabaseBusyError(
            f"opening {db_path} waited {elapsed:.1f} s (the {budget_s:g} s budget): "
            f"{exc.holders_text} the store to itself (a repair, restore or index "
            "rebuild); let it finish and open again, or raise write_budget_s",
            elapsed_s=elapsed,
        ) from exc


def prepare(database: Database, *, upgrade: bool) -> bool:
    """Bring the schema to head; True when the FTS index is marked stale."""
    ensure_schema(database, upgrade=upgrade)
    try:
        with database.engine.connect() as conn:
            return fts.stale_marker(conn) is not None
    except DBAPIError as exc:
        raise database.failure(exc, action=f"opening {database.path}").error from exc


def file_journal_mode(database: Database) -> str:
    try:
        with database.engine.connect() as conn:
            return str(conn.exec_driver_sql("PRAGMA journal_mode").scalar_one()).lower()
    except DBAPIError as exc:
        raise database.failure(exc, action=f"opening {database.path}").error from exc


def rebuild_at_open(engine: Engine, db_path: Path, holder: HolderLock) -> RebuildOutcome:
    try:
        return guarded_rebuild(engine, db_path, holder, automatic=True)
    except (DBAPIError, HermesRepoError) as exc:
        # The rebuild's own reads (before its guarded section) met a lock or damage:
        # the index stays detached, which every path already handles; the open goes on
        # (a damaged file was quarantined by the engine events and says so itself).
        if isinstance(exc, StateDbCorruptError):
            raise
        why = describe(exc) if isinstance(exc, DBAPIError) else str(exc)
        return RebuildOutcome(
            ran=False, ok=False, reason=f"FTS rebuild postponed: {why}; it runs at a later open"
        )


def open_server(
    home: Path, target: PgTarget, *, upgrade: bool, write_budget_s: float | None
) -> Database:
    """The write core of a PostgreSQL store, its schema brought to head (or refused).

    ``home`` still holds the local files (the transcript spool first of all), so it is
    created as for a SQLite store. There is no holder lock, quarantine or FTS5 index to
    look after: the server keeps its files and its search index itself.
    """
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    engine = create_pg_engine(target)
    drv = engine.info_driver  # type: ignore[attr-defined]
    # A guard that is never entered: nothing classifies a server error as file damage.
    guard = quarantine.Guard(home / DB_NAME)
    database = Database(
        home, engine, drv, guard, write_budget_s=write_budget_s, location=safe_url(target.url)
    )
    try:
        run_with_retry(
            lambda: ensure_schema(database, upgrade=upgrade, pg_schema=target.schema),
            database.write_policy,
        )
    except DatabaseBusyError as exc:
        engine.dispose()
        # The driver's text names host and port only; the caller needs to know which
        # store (user and database too), never with its password. Chained to the
        # driver's error, as the retry loop's own error was.
        raise DatabaseBusyError(
            f"opening the store at {database.location}: {exc}", elapsed_s=exc.elapsed_s
        ) from exc.__cause__
    except BaseException:
        engine.dispose()
        raise
    return database


def ensure_schema(database: Database, *, upgrade: bool, pg_schema: str | None = None) -> None:
    """Bring the schema to head or refuse; on a server, first check the database
    (encoding, the store's schema: ``pg_schema``, the one the URL names, if any)."""
    engine = database.engine
    where = database.location
    on_file = database.backend.is_file
    try:
        with engine.connect() as conn:
            if not on_file:
                server.check_database(conn, where, schema=pg_schema)
            schema = migrate.schema_status(conn)
    except DBAPIError as exc:
        raise database.failure(exc, action=f"opening {where}").error from exc
    if schema.status == "at-head":
        return
    if on_file:
        if must_migrate(schema, where=where, db_path=database.path, upgrade=upgrade):
            _upgrade_file(database)
        return
    # Decided again under the migration lock: another host may be migrating right now.
    try:
        upgrade_server_schema(
            engine, where=where, wait_s=database.write_policy.budget_s, upgrade=upgrade
        )
    except DBAPIError as exc:
        raise database.failure(exc, action=f"migrating {where}").error from exc


def _upgrade_file(database: Database) -> None:
    """The upgrade ``hermes-repo db upgrade`` runs, on the store's own engine: a
    ``pre-upgrade`` snapshot (or a raw backup of a file failing ``integrity_check``)
    first, then the migrations in one transaction. An empty file is built at head
    with no snapshot (there is nothing to protect)."""

    def unverified(why: str) -> None:
        log.warning("no pre-upgrade snapshot of %s: %s", database.path, why)

    def protected(point: RestorePoint) -> None:
        if point.snapshot is not None:
            log.info(
                "upgrading %s: snapshot %s (label pre-upgrade, revision %s) taken first",
                database.path,
                point.snapshot.id,
                point.snapshot.revision,
            )
        else:
            log.warning("upgrading %s: backup %s taken first", database.path, point.backup)

    upgrade_file(database.engine, database.path, unverified=unverified, protected=protected)


def check_home(folder: Path) -> None:
    """Refuse, naming the folder and the cause, a home the OS cannot use (a file in the
    way, a name too long, no permission, a read-only file system): these used to leave
    ``StateStore.open`` as a raw ``OSError``. A missing folder is created (0700) here."""
    fix = "pass a folder this process can create and write (--home or HERMES_HOME)"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except FileExistsError as exc:  # a file, or a link to one, in the folder's place
        raise ConfigurationError(f"{folder} is not a folder; {fix}") from exc
    except OSError as exc:
        raise ConfigurationError(
            f"cannot use {folder} as the store's folder: {exc.strerror or exc}; {fix}"
        ) from exc
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigurationError(f"{folder} is not writable by this process; {fix}")


def _at_open(policy: RetryPolicy) -> RetryPolicy:
    # Short budget: a store held by a busy writer must still open promptly; what cannot
    # be done now is done by a later open (or `hermes-repo pending replay`).
    return RetryPolicy(budget_s=min(policy.budget_s, 2.0))


def identify_at_open(database: Database) -> StoreIdentity | None:
    """The store's identity, read and made when missing; None (logged, never fatal)
    when an older store cannot be written now: spool records then name it by its
    target until an open that can write makes its id."""
    try:
        return ensure_identity(database, _at_open(database.write_policy))
    except Exception as exc:
        log.warning("the store id could not be read or made at open: %s", exc)
        return None


def replay_at_open(store: WriteCore, policy: RetryPolicy) -> ReplayReport | None:
    """Replay the pending transcript spool files into ``store`` (the facade: its
    identity read at open names the records that are its own); None, logged, when the
    replay failed: the replay never makes the open fail."""
    try:
        report = replay_pending(store, policy=_at_open(policy))
    except Exception as exc:
        log.warning("pending transcripts not replayed at open: %s", exc)
        return None
    if report.inserted or report.kept or report.errors:
        log.warning(
            "replayed pending transcripts: %d file(s), %d inserted, %d duplicate(s), %d kept%s",
            report.files,
            report.inserted,
            report.duplicates,
            report.kept,
            f"; {'; '.join(report.errors)}" if report.errors else "",
        )
    return report
