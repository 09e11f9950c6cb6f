"""What :meth:`StateStore.open` does before it hands out a store.

Register as a holder (an exclusive repair or restore must see this process), bring the
schema to head or refuse with the command that fixes it, rebuild a detached full-text
index when this process may, and read the file's journal mode. Each step translates its
driver errors through the write core, so a damaged file met here is quarantined like one
met by any write.
"""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from . import quarantine
from .database import Database
from .engine import DB_NAME
from .engine_pg import PgTarget, create_pg_engine, safe_url
from .errors import (
    DatabaseBusyError,
    HermesRepoError,
    SchemaMismatchError,
    StateDbCorruptError,
    describe,
)
from .holders import HolderLock, StoreHeldError
from .maintenance.fts_rebuild import RebuildOutcome, guarded_rebuild
from .retry import run_with_retry
from .schema import fts, migrate, server

__all__ = [
    "ensure_schema",
    "file_journal_mode",
    "open_server",
    "prepare",
    "rebuild_at_open",
    "register_holder",
]


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
        if _must_migrate(database, schema, upgrade=upgrade):
            migrate.upgrade(engine)
        return
    # Another host may be migrating this database right now, and what was read above
    # may be its half-committed work: decide again holding the migration lock, which
    # that host holds until its migration committed.
    try:
        with server.migration_lock(engine, wait_s=database.write_policy.budget_s) as conn:
            schema = migrate.schema_status(conn)
            if _must_migrate(database, schema, upgrade=upgrade):
                migrate.upgrade_in(conn)
    except DBAPIError as exc:
        raise database.failure(exc, action=f"migrating {where}").error from exc


def _must_migrate(database: Database, schema: migrate.SchemaStatus, *, upgrade: bool) -> bool:
    """True when the migrations must run; False at head; else the refusal, raised."""
    db_path, where = database.path, database.location
    on_file = database.backend.is_file
    current, head = schema.revision, schema.head
    if schema.status == "at-head":
        return False
    if schema.status == "empty":
        return True
    if schema.status in ("damaged", "unversioned") and on_file:
        raise SchemaMismatchError(migrate.damaged_schema_fix(db_path, schema))
    if schema.status in ("damaged", "unversioned"):
        lost = ", ".join(schema.missing) or "alembic_version"
        raise SchemaMismatchError(
            f"{where} holds the hermes_repo tables but lacks {lost}, so its schema cannot "
            "be trusted; restore the database from a backup (pg_dump / pg_restore)"
        )
    if schema.status == "foreign":
        fix = (
            "Point --home / HERMES_HOME at another folder"
            if on_file
            else "Point --url / HERMES_REPO_URL at an empty database"
        )
        raise SchemaMismatchError(
            f"{where} holds tables but no hermes_repo schema revision; it is not a "
            f"hermes_repo store. {fix}"
        )
    if schema.status == "ahead":
        raise SchemaMismatchError(
            f"{where} is at schema revision {current}, newer than this version of "
            f"hermes_repo knows (head {head}); upgrade the hermes_repo package"
        )
    if not upgrade:
        command = (
            f"`hermes-repo --home {db_path.parent} db upgrade` (it backs up first)"
            if on_file
            # The URL is shown without its password: the caller knows the one they gave.
            else f"`hermes-repo --url URL db upgrade` with the store's URL ({where})"
        )
        raise SchemaMismatchError(
            f"{where} is at schema revision {current}, behind this code (head {head}); "
            f"run {command}"
        )
    return True
