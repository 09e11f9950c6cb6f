"""``repair_store``: refuse while held, diagnose, back up, then repair in place or stop."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from ... import quarantine
from ...driver_errors import describe
from ...engine import WRITE_OPTION, Driver, create_store_engine, db_path_for_home, select_driver
from ...engine_pg import resolve_url
from ...errors import HermesRepoError, RepairError, RepairStoreHeldError
from ...holders import HolderLock, StoreHeldError
from ...maintenance.fts_rebuild import REPAIR_COMMAND
from ...maintenance.snapshots import snapshot_before
from ...models import state_meta_table
from ...schema.backup import BackupSpaceError, read_only_engine, timestamped_backup
from ...store import StateStore
from ..doctor import diagnose
from ..transcript_check import TranscriptRepairSummary, check_transcripts
from .check import diagnose_only
from .index import index_needs_rebuild, rebuild_and_finish
from .server import repair_server
from .verdict import (
    BACKUP_LABEL,
    STRUCTURAL,
    VALUES,
    RepairReport,
    command,
    damage_of,
    fail,
    refusal,
    salvage_steps,
)
from .verify import integrity_text, read_counts, verify

__all__ = ["RepairError", "RepairStoreHeldError", "repair_store"]


def repair_store(
    home: str | os.PathLike[str] | None = None,
    *,
    check_only: bool = False,
    rebuild_search: bool = False,
    url: str | URL | None = None,
) -> RepairReport:
    """Check, or repair, the store in ``home`` (default
    ``$HERMES_HOME/hermes-repo``, see :mod:`hermes_repo.homes`).

    See the module docstring for the steps. Raises :class:`RepairStoreHeldError` at once
    while another process has the store open, and :class:`RepairError` when there is
    no store, or its schema is not one the repair works on; in both cases nothing was
    written. Every other outcome is a :class:`RepairReport`: ``ok`` False (with
    ``next_steps``) when the repair could not fix the store or its verification failed.

    ``rebuild_search`` rebuilds the full-text indexes (guarded, verified) even when no
    check finds them damaged: for damage no check sees.

    On a PostgreSQL store (``url``, as :meth:`StateStore.open` takes it) only the
    transcript part runs (:func:`~.server.repair_server`): no backup, snapshot or
    ``integrity_check``; ``rebuild_search`` is refused naming ``REINDEX``.
    """
    db_path = db_path_for_home(home)
    target = resolve_url(url)
    if target is not None:
        return repair_server(
            db_path.parent, target, check_only=check_only, rebuild_search=rebuild_search
        )
    if check_only:
        return diagnose_only(db_path)
    if not db_path.is_file() or db_path.stat().st_size == 0:
        upgrade = command(db_path, "hermes-repo db upgrade")
        raise RepairError(
            f"there is no store at {db_path}, nothing to repair; check --home / HERMES_HOME "
            f"(`{upgrade}` creates an empty one)"
        )
    holder = HolderLock(db_path)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(holder.exclusive())
        except StoreHeldError as exc:
            again = command(db_path, REPAIR_COMMAND)
            # Without pids the holder may be this very process (a StateStore it did not
            # close): /proc/locks names only the others.
            who = exc.holders_text if exc.pids else "another process (or an open StateStore) has"
            raise RepairStoreHeldError(
                f"cannot repair {db_path}: {who} the store open; nothing was changed. Stop "
                f"every process using the store (e.g. the gateway), then run `{again}`",
                exc.pids,
            ) from exc
        return _repair_alone(db_path, holder, rebuild_search=rebuild_search)


def _nothing_to_repair(
    report: RepairReport, db_path: Path, driver: Driver, holder: HolderLock
) -> RepairReport | None:
    """The report of a repair with nothing to do, or None when something needs one.

    The same checks the repair acts on, run first and writing nothing: the indexes
    compared with their rows (FTS5's integrity-check, rolled back) and the transcript
    invariants. A store that passes is verified as after a repair and left untouched.
    """
    engine = create_store_engine(db_path, driver=driver)
    guard = quarantine.install(engine, db_path, driver)
    store = StateStore(db_path.parent, engine, driver, holder, guard)
    try:
        if any(f.code == VALUES for f in report.findings):
            return None  # values to rewrite: a change, so a backup first
        if index_needs_rebuild(report, engine) is not None:
            return None
        checked = check_transcripts(store)
        if not checked.ok:
            return None
        report.transcripts = TranscriptRepairSummary(checked)  # nothing to repair
        report.counts_before = read_counts(engine)
        report.verification, report.counts_after = verify(engine, report.counts_before)
    except (HermesRepoError, DBAPIError):
        return None  # let the full repair, with its backup, deal with it
    finally:
        store.close()
    if not report.verified:
        return None
    report.ok = True
    report.notes.append("no backup or snapshot taken: nothing needed a change")
    report.summary = "nothing needed repair; verified"
    return report


def _recreate_state_meta(db_path: Path, driver: Driver, report: RepairReport) -> None:
    """Put back a dropped ``state_meta`` (before any snapshot: never one of a broken store).

    Its only rows are markers of derived state (``fts_stale``): the index checks below
    find by themselves what such a marker would have said, so nothing is lost for good.
    """
    engine = create_store_engine(db_path, driver=driver)
    try:
        with engine.execution_options(**{WRITE_OPTION: True}).connect() as conn, conn.begin():
            state_meta_table.create(conn, checkfirst=True)
    finally:
        engine.dispose()
    report.recreated.append("state_meta")
    report.notes.append(
        "recreated the missing state_meta table (empty: it holds only markers such as "
        "fts_stale, which the index checks of this repair re-derive)"
    )


def _repair_alone(db_path: Path, holder: HolderLock, *, rebuild_search: bool) -> RepairReport:
    """The repair proper; the caller holds the store exclusively."""
    doctor = diagnose(db_path.parent)
    damage = damage_of(doctor)
    refused = refusal(doctor)
    if damage != "structural" and refused is not None:
        raise RepairError(f"cannot repair: {refused.summary}; {refused.fix}; nothing was changed")
    report = RepairReport(path=str(db_path), check_only=False, damage=damage, doctor=doctor)
    driver = select_driver()
    meta_missing = any(f.code == "schema-meta-missing" for f in doctor.findings)
    if damage == "none" and not meta_missing and not rebuild_search:
        # Check first: a backup and a snapshot are taken only when a change will be
        # made (twelve runs on a healthy store used to leave twelve full backups).
        healthy = _nothing_to_repair(report, db_path, driver, holder)
        if healthy is not None:
            return healthy

    # Counts, backup and integrity through read-only connections: for a damaged file
    # this is all that happens, and it must not write a byte (no close-time checkpoint).
    source = read_only_engine(db_path, driver)
    try:
        try:
            report.counts_before = read_counts(source)
        except DBAPIError as exc:
            if damage != "structural":
                raise RepairError(
                    f"cannot repair: the row counts of {db_path} are unreadable "
                    f"({describe(exc)}); nothing was changed"
                ) from exc
            report.notes.append(f"canonical counts unreadable: {describe(exc)}")
        try:
            report.backup = timestamped_backup(source, db_path, BACKUP_LABEL)
        except (DBAPIError, driver.module.Error, OSError, BackupSpaceError) as exc:
            if damage != "structural":
                # Nothing was changed yet: the store is no worse, the repair can be rerun.
                again = command(db_path, REPAIR_COMMAND)
                return fail(
                    report,
                    f"the backup could not be taken ({describe(exc)}), so nothing was changed",
                    [f"free space beside {db_path} (or fix the cause above), then run `{again}`"],
                )
            report.notes.append(f"no backup could be taken: {describe(exc)}")
        if damage == "structural":
            return _structural(report)
        integrity = integrity_text(source)
    finally:
        source.dispose()

    if meta_missing:
        _recreate_state_meta(db_path, driver, report)

    if integrity == "ok":
        try:
            snap = snapshot_before(db_path.parent, BACKUP_LABEL)
        except (HermesRepoError, OSError) as exc:
            # The backup above is the restore point the seed asks for; a snapshot is a
            # convenience on top (restorable by `snapshot restore`), not a precondition.
            report.notes.append(f"no snapshot taken ({exc}); the backup is the restore point")
        else:
            report.snapshot = snap.id if snap is not None else None
    else:
        report.notes.append(
            f"no snapshot taken: integrity_check fails ({integrity}); the backup is the "
            "restore point"
        )

    engine = create_store_engine(db_path, driver=driver)
    guard = quarantine.install(engine, db_path, driver)
    # The StateStore is built on our engine (see the module docstring) for the
    # transcript repair; it shares our exclusive holder lock and releases nothing.
    store = StateStore(db_path.parent, engine, driver, holder, guard)
    try:
        return rebuild_and_finish(report, store, engine, holder, rebuild_search=rebuild_search)
    except (HermesRepoError, DBAPIError) as exc:
        return fail(report, describe(exc) if isinstance(exc, DBAPIError) else str(exc))
    finally:
        store.close()


def _structural(report: RepairReport) -> RepairReport:
    db_path = Path(report.path)
    what = "; ".join(f.summary for f in report.findings if f.code in STRUCTURAL)
    kept = (
        f"it and the backup-API copy {report.backup} are kept as they are"
        if report.backup is not None
        else "it is kept as it is"
    )
    report.ok = False
    report.summary = (
        f"{db_path} was not repaired in place: {what}; {kept}. Salvage it with `sessions salvage`"
    )
    report.next_steps = salvage_steps(db_path)
    return report
