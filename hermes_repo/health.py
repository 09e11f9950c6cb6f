"""What an operator (or a health endpoint) needs to know about an open store.

:func:`store_health` only reads; :func:`journal_notes` turns the file's journal mode and
this process's SQLite into the warnings an operator must see (at open, in ``health()``
and in the doctor).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import Connection

from . import walcheck
from .database import Database
from .engine import Driver
from .errors import HermesRepoError
from .repositories.meta import STORE_ID_KEY, MetaRepository
from .schema import fts, migrate
from .schema.copy_mark import copy_mark
from .schema.tables import store_counts
from .sqlite_copies import two_copies_notes
from .transcript.spool import list_pending

__all__ = ["StoreHealth", "journal_notes", "store_health"]


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
    pending_files: int = 0  # sessions/*.pending.jsonl waiting for recovery
    pending_records: int = 0  # usable records in them
    oldest_pending_age_s: float | None = None  # age of the oldest pending record
    store_id: str | None = None  # state_meta's store_id (None: not made yet)
    notes: list[str] = field(default_factory=list)

    @property
    def at_head(self) -> bool:
        return self.revision == self.head


def journal_notes(driver: Driver, file_mode: str) -> list[str]:
    """What an operator must know about the file's journal mode and this SQLite.

    The journal mode is a property of the file, shared by every process that opens it.
    A store switches it to what its SQLite wants (WAL with the WAL-reset fix, a rollback
    journal without it) only while it holds the store alone; otherwise the file keeps
    the mode the first process gave it, and these notes say so with the risk and the fix.
    """
    version = driver.sqlite_version
    if not driver.has_wal_reset_fix and file_mode == "wal" and driver.journal_mode == "WAL":
        return [
            f"the store file uses journal_mode=WAL on SQLite {version}, which predates the "
            "WAL-reset fix (3.51.3): concurrent writes and checkpoints can corrupt it. "
            "HERMES_REPO_JOURNAL_MODE=WAL asks for it; unset it (the store then uses a "
            "rollback journal) or install pysqlite3"
        ]
    if not driver.has_wal_reset_fix and file_mode == "wal":
        return [
            f"the store file uses journal_mode=WAL, but this process's SQLite {version} "
            "predates the WAL-reset fix (3.51.3): its writes and checkpoints can corrupt "
            "the store while other processes use it. The file stays in WAL because another "
            "process (with a fixed SQLite) has it open and switching needs the store to "
            "itself. Install pysqlite3 (`pip install pysqlite3`), or stop every other "
            "process using the store and open it again: alone, this process switches the "
            "file to journal_mode=DELETE"
        ]
    if not driver.has_wal_reset_fix:
        return [
            f"SQLite {version} predates the WAL-reset fix (3.51.3); the store file uses "
            f"journal_mode={file_mode.upper()}, which avoids the bug (slower concurrent "
            "writes). Install pysqlite3 for a fixed SQLite and WAL"
        ]
    if file_mode != driver.journal_mode.lower():
        return [
            f"the store file uses journal_mode={file_mode.upper()}, not "
            f"{driver.journal_mode}: another process had the store open when this one "
            "opened it (perhaps one whose SQLite lacks the WAL-reset fix), and the mode is "
            "switched only by a process that has the store to itself; it switches at such "
            "an open"
        ]
    return []


def _pending_health(home: Path) -> dict[str, Any]:
    now = time.time()
    files = list_pending(home)
    ages = [a for f in files if (a := f.age_s(now)) is not None]
    return {
        "pending_files": len(files),
        "pending_records": sum(f.records for f in files),
        "oldest_pending_age_s": max(ages) if ages else None,
    }


def store_health(database: Database) -> StoreHealth:
    """A snapshot of the store's state; never writes."""
    driver, path = database.driver, database.path

    on_file = database.backend.is_file

    def probe(conn: Connection) -> tuple[str | None, str, dict[str, int], str | None]:
        # A server has no journal mode of ours to report.
        mode = str(conn.exec_driver_sql("PRAGMA journal_mode").scalar_one()) if on_file else "n/a"
        store_id = MetaRepository(conn).get(STORE_ID_KEY)
        return migrate.current_revision(conn), mode, store_counts(conn), store_id

    notes = []
    info = database.guard.info
    if info is not None:
        notes.append(info.message())
    try:
        revision, mode, counts, store_id = database.read(probe)
        stale = database.read(fts.stale_marker)
    except HermesRepoError as exc:
        # A damaged file may refuse even these reads; health still answers.
        revision, mode, counts, stale, store_id = None, "unknown", {}, None, None
        notes.append(f"could not read the store: {exc}")
    else:
        # A `db copy` into this store that never finished: the store holds part of it.
        with contextlib.suppress(HermesRepoError):
            if (unfinished := database.read(copy_mark)) is not None:
                notes.append(unfinished.message())
    files = database.guard.files
    lost = files.status() if files is not None else None
    if lost is not None:
        notes.append(lost)
    if on_file:
        notes.extend(walcheck.notes(path))
        notes.extend(journal_notes(driver, mode.lower()))
        notes.extend(two_copies_notes(driver, path))
    return StoreHealth(
        path=database.location,
        driver=driver.name,
        sqlite_version=driver.sqlite_version,
        sqlite_has_wal_fix=driver.has_wal_reset_fix,
        journal_mode=mode.lower(),
        revision=revision,
        head=migrate.head_revision(),
        counts=counts,
        fts_stale=stale is not None,
        quarantined=info is not None,
        **_pending_health(database.home),
        store_id=store_id,
        notes=notes,
    )
