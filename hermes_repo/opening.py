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

from .database import Database
from .errors import (
    DatabaseBusyError,
    HermesRepoError,
    SchemaMismatchError,
    StateDbCorruptError,
    describe,
)
from .holders import HolderLock, StoreHeldError
from .schema import fts, migrate
from .schema.fts_rebuild import RebuildOutcome, guarded_rebuild

__all__ = [
    "ensure_schema",
    "file_journal_mode",
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


def ensure_schema(database: Database, *, upgrade: bool) -> None:
    engine, db_path = database.engine, database.path
    try:
        with engine.connect() as conn:
            schema = migrate.schema_status(conn)
    except DBAPIError as exc:
        raise database.failure(exc, action=f"opening {db_path}").error from exc
    current, head = schema.revision, schema.head
    if schema.status == "at-head":
        return
    if schema.status == "empty":
        migrate.upgrade(engine)
        return
    if schema.status in ("damaged", "unversioned"):
        raise SchemaMismatchError(migrate.damaged_schema_fix(db_path, schema))
    if schema.status == "foreign":
        raise SchemaMismatchError(
            f"{db_path} holds tables but no hermes_repo schema revision; it is not a "
            "hermes_repo store. Point --home / HERMES_HOME at another folder"
        )
    if schema.status == "ahead":
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
