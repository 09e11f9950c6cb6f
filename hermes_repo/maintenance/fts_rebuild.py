"""The guarded FTS rebuild: only with the store to ourselves, backed up, bounded.

A live operation never rebuilds the index (seed 003): a rebuild of a large store takes
seconds to minutes and concurrent rebuilds have corrupted stores in the field. It runs
at the next open of a store whose ``fts_stale`` marker is set, and from
``hermes-repo sessions repair``, and only when:

* no other rebuild runs (a file lock, not waited for);
* no other process holds the store (the holder registry, not waited for);
* the canonical tables pass ``quick_check`` (a structurally damaged file is for
  ``sessions salvage``, never for a rebuild);
* there is room for a backup, which is taken first (a few are kept, older ones pruned);
* automatic attempts for this marker are below :data:`MAX_AUTOMATIC_ATTEMPTS` (a ledger
  beside the file), so a rebuild that keeps failing cannot loop at every start.

Everything happens in one transaction: on any failure the store stays as it was
(index detached, marker set, writes working) and the log names the command to run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..driver_errors import classify
from ..engine import WRITE_OPTION
from ..errors import ErrorKind, HermesRepoError, StateDbCorruptError
from ..holders import HolderLock, StoreHeldError
from ..quarantine import is_quarantined
from ..schema import fts
from ..schema.backup import timestamped_backup
from ..schema.sidefiles import exclusive_lock, open_side_file, replace_side_file

if TYPE_CHECKING:
    # SQLAlchemy is imported where it is used: the doctor reads this module's facts
    # through its own driver connection and loads none of it.
    from sqlalchemy import Engine

__all__ = ["MAX_AUTOMATIC_ATTEMPTS", "RebuildOutcome", "canonical_counts", "guarded_rebuild"]

log = logging.getLogger("hermes_repo.fts")

MAX_AUTOMATIC_ATTEMPTS = 3
BACKUPS_KEPT = 3
BACKUP_LABEL = "pre-fts-rebuild"
REPAIR_COMMAND = "hermes-repo sessions repair"


@dataclass
class RebuildOutcome:
    """What a guarded rebuild did (``ran``), whether FTS is live again (``ok``), and why."""

    ran: bool
    ok: bool
    reason: str
    backup: Path | None = None
    seconds: float = 0.0
    counts_before: dict[str, int] = field(default_factory=dict)
    counts_after: dict[str, int] = field(default_factory=dict)


def canonical_counts(engine: Engine) -> dict[str, int]:
    """Row counts of the canonical tables (a rebuild must never lower them)."""
    from sqlalchemy import text

    with engine.connect() as conn:
        return {
            t: int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one())
            for t in ("sessions", "messages")
        }


def _ledger_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".fts-rebuild.json")


def _read_ledger(db_path: Path) -> dict[str, Any]:
    """The ledger, {} when missing or unparsable; a symlink or a folder in its place is
    an UnsafePathError (read through one, it could feed the attempt count anything)."""
    path = _ledger_path(db_path)
    try:
        fd = open_side_file(path, os.O_RDONLY, create=False)
    except FileNotFoundError:
        return {}
    try:
        with os.fdopen(fd, "rb") as f:
            data = json.loads(f.read())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_ledger(db_path: Path, data: dict[str, Any]) -> None:
    # Through a 0600 temporary file opened O_NOFOLLOW: a symlink planted at its name
    # made the store overwrite the link's target.
    path = _ledger_path(db_path)
    replace_side_file(path, json.dumps(data).encode("utf-8"), tmp=path.with_suffix(".tmp"))


def _canonical_ok(engine: Engine) -> bool:
    from sqlalchemy.exc import DBAPIError

    try:
        with engine.connect() as conn:
            return all(
                conn.exec_driver_sql(f"PRAGMA quick_check({t})").scalar() == "ok"
                for t in ("sessions", "messages", "state_meta")
            )
    except (DBAPIError, StateDbCorruptError):
        # SQLite 3.40 raises CORRUPT from quick_check itself where 3.53 returns rows;
        # the quarantine's engine event has already turned that into our error.
        return False


def _prune_backups(db_path: Path) -> None:
    backups = sorted(db_path.parent.glob(f"{db_path.name}.{BACKUP_LABEL}-*.bak"))
    for old in backups[:-BACKUPS_KEPT]:
        old.unlink(missing_ok=True)


def _store_bytes(db_path: Path) -> int:
    return sum(
        p.stat().st_size for p in (db_path, db_path.with_name(db_path.name + "-wal")) if p.exists()
    )


def _purge_fts_schema(engine: Engine) -> None:
    """Remove the FTS objects from the schema by hand, then VACUUM.

    When a page of a shadow b-tree is damaged, even ``DROP TABLE`` of the shadow tables
    fails; deleting their schema entries and letting VACUUM rewrite the file is the way
    out (the orphaned pages are dropped by VACUUM).
    """
    raw = engine.raw_connection()
    try:
        dbapi = raw.driver_connection
        assert dbapi is not None
        dbapi.execute("PRAGMA writable_schema = ON")
        try:
            dbapi.execute("BEGIN IMMEDIATE")
            for name in fts.TRIGGER_NAMES:
                dbapi.execute(f"DROP TRIGGER IF EXISTS {name}")
            dbapi.execute(
                "DELETE FROM sqlite_master WHERE type IN ('table', 'index') AND "
                "(name = 'messages_fts' OR name LIKE 'messages\\_fts\\_%' ESCAPE '\\')"
            )
            dbapi.execute("COMMIT")
        finally:
            dbapi.execute("PRAGMA writable_schema = OFF")
    finally:
        raw.invalidate()  # its schema cache is stale: never return it to the pool
    engine.dispose()
    raw = engine.raw_connection()
    try:
        dbapi = raw.driver_connection
        assert dbapi is not None
        dbapi.execute("VACUUM")
    finally:
        raw.close()


def _recreate(engine: Engine) -> None:
    with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        fts.recreate(conn)


def guarded_rebuild(
    engine: Engine,
    db_path: Path,
    holder: HolderLock,
    *,
    automatic: bool,
    force: bool = False,
    backup: Path | None = None,
) -> RebuildOutcome:
    """Rebuild the FTS indexes if the store is stale (or ``force``), under every guard.

    ``backup`` is a backup-API copy the caller has just taken of the store as it is now
    (the explicit repair takes one before anything else); the rebuild then uses it as
    its restore point instead of copying the whole store a second time.
    """
    start = time.monotonic()
    if is_quarantined(db_path):
        return RebuildOutcome(
            ran=False,
            ok=False,
            reason="the store is quarantined (damaged file): no FTS rebuild runs on it",
        )
    with engine.connect() as conn:
        marker = fts.stale_marker(conn)
    if marker is None and not force:
        return RebuildOutcome(ran=False, ok=True, reason="FTS is live; nothing to rebuild")
    since = (marker or {}).get("since")
    try:
        ledger = _read_ledger(db_path)
    except HermesRepoError as exc:
        return RebuildOutcome(ran=False, ok=False, reason=f"FTS rebuild not run: {exc}")
    if ledger.get("since") != since:
        ledger = {"since": since, "attempts": 0}
    if automatic and ledger.get("attempts", 0) >= MAX_AUTOMATIC_ATTEMPTS:
        return RebuildOutcome(
            ran=False,
            ok=False,
            reason=(
                f"automatic FTS rebuild gave up after {ledger['attempts']} attempts "
                f"(last error: {ledger.get('last_error')}); stop every process using the "
                f"store and run `{REPAIR_COMMAND}`"
            ),
        )
    with contextlib.ExitStack() as stack:
        try:
            lock_path = db_path.with_name(db_path.name + ".fts-rebuild.lock")
            got = stack.enter_context(exclusive_lock(lock_path, timeout=0))
        except HermesRepoError as exc:
            return RebuildOutcome(ran=False, ok=False, reason=f"FTS rebuild not run: {exc}")
        if not got:
            return RebuildOutcome(ran=False, ok=False, reason="another FTS rebuild is running")
        return _rebuild_locked(engine, db_path, holder, ledger, start, backup)


def _rebuild_locked(
    engine: Engine,
    db_path: Path,
    holder: HolderLock,
    ledger: dict[str, Any],
    start: float,
    backup: Path | None,
) -> RebuildOutcome:
    try:
        with holder.exclusive():
            return _rebuild_alone(engine, db_path, ledger, start, backup)
    except StoreHeldError as exc:
        return RebuildOutcome(
            ran=False,
            ok=False,
            reason=(
                f"FTS rebuild postponed: {exc.holders_text} the store open; search uses the "
                f"fallback meanwhile. Stop every process using the store and run `{REPAIR_COMMAND}`"
            ),
        )
    except Exception as exc:
        # The rebuild runs inside StateStore.open: whatever goes wrong before its own
        # transaction (the backup on a full disk, the ledger...) must leave the store
        # detached but usable, never make the open fail.
        log.exception("FTS rebuild could not run; the index stays detached")
        ledger["last_error"] = str(exc).splitlines()[0][:300] if str(exc) else repr(exc)
        with contextlib.suppress(OSError, HermesRepoError):  # the disk may be what is full
            _write_ledger(db_path, ledger)
        return RebuildOutcome(
            ran=False,
            ok=False,
            reason=f"FTS rebuild could not run: {exc}; run `{REPAIR_COMMAND}`",
            seconds=time.monotonic() - start,
        )


def _rebuild_alone(
    engine: Engine,
    db_path: Path,
    ledger: dict[str, Any],
    start: float,
    taken: Path | None = None,
) -> RebuildOutcome:
    from sqlalchemy.exc import DBAPIError

    if not _canonical_ok(engine):
        return RebuildOutcome(
            ran=False,
            ok=False,
            reason=(
                "the canonical tables fail quick_check: the file itself is damaged, an FTS "
                "rebuild would make it worse; run `hermes-repo sessions salvage --source "
                f"{shlex.quote(str(db_path))} --inspect-only`"
            ),
        )
    need = 2 * _store_bytes(db_path)
    free = shutil.disk_usage(db_path.parent).free
    if free < need:
        return RebuildOutcome(
            ran=False,
            ok=False,
            reason=(
                f"FTS rebuild needs ~{need // 2**20} MiB free for a backup and the new "
                f"index, only {free // 2**20} MiB free; free space and run `{REPAIR_COMMAND}`"
            ),
        )
    before = canonical_counts(engine)
    # Counted before the backup: a backup that fails at every open is an attempt too.
    ledger["attempts"] = int(ledger.get("attempts", 0)) + 1
    _write_ledger(db_path, ledger)
    if taken is not None:
        backup = taken
    else:
        _prune_backups(db_path)
        backup = timestamped_backup(engine, db_path, BACKUP_LABEL)
    try:
        try:
            _recreate(engine)
        except DBAPIError as exc:
            if classify(exc) not in (ErrorKind.CORRUPT, ErrorKind.FTS):
                raise
            log.warning("FTS shadow tables unreadable (%s); removing them and vacuuming", exc.orig)
            _purge_fts_schema(engine)
            _recreate(engine)
    except Exception as exc:
        ledger["last_error"] = str(getattr(exc, "orig", exc)).splitlines()[0][:300]
        _write_ledger(db_path, ledger)
        log.error(
            "FTS rebuild failed, the index stays detached and writes keep working: %s. "
            "Backup kept at %s. Stop every process using the store and run `%s`",
            ledger["last_error"],
            backup,
            REPAIR_COMMAND,
        )
        return RebuildOutcome(
            ran=True,
            ok=False,
            reason=f"FTS rebuild failed: {ledger['last_error']}; run `{REPAIR_COMMAND}`",
            backup=backup,
            seconds=time.monotonic() - start,
            counts_before=before,
        )
    after = canonical_counts(engine)
    _ledger_path(db_path).unlink(missing_ok=True)
    log.warning("FTS indexes rebuilt in %.1f s; search uses them again", time.monotonic() - start)
    return RebuildOutcome(
        ran=True,
        ok=True,
        reason="FTS rebuilt",
        backup=backup,
        seconds=time.monotonic() - start,
        counts_before=before,
        counts_after=after,
    )
