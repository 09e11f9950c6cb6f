"""``repair_store(home)``: the operator's explicit repair, ``hermes-repo sessions repair``.

Every log line and doctor finding about a detached or damaged search index names this
command. It runs with every other process stopped (seed 003: "stop every process that
may have the database open, and keep them stopped through repair and verification"),
and in this order:

1. **Refuse at once while the store is held.** The holder lock is taken exclusive,
   without waiting; if any other process has the store open the repair stops with
   :class:`RepairStoreHeldError`, naming the pids, before reading or writing anything.
   The lock is held to the end, so nobody opens the store halfway through.
2. **Diagnose** with :func:`~hermes_repo.ops.doctor.diagnose` (read-only): the SQLite
   header and a ``quick_check`` of the canonical tables tell *structural* damage (the
   file: b-trees, schema, header) from *index* damage (the derived FTS tables, a stale
   marker, missing triggers). A schema the repair cannot work on (missing, behind or
   ahead of the code, foreign) is refused with the doctor's command.
3. **Record the canonical counts, take a backup** through SQLite's backup API from a
   read-only connection (``state.db.pre-repair-<time>.bak``; never a file copy), and,
   when the whole file passes ``integrity_check``, a verified snapshot
   (:func:`~hermes_repo.ops.snapshots.snapshot_before`, label ``pre-repair``) that
   ``snapshot restore`` can put back.
4. **Structural damage is not repaired in place**: a rebuild or any write on a damaged
   b-tree can turn a readable file into an unopenable one. The live file and the backup
   are left as they are and the report names the next commands, ``sessions recover
   --inspect-only`` and then ``--output NEW.db`` (or a snapshot restore).
5. **Index damage** (a stale marker, missing triggers, an index that fails its checks
   or misses messages it should find, see :func:`~hermes_repo.schema.fts.coverage_check`;
   with ``rebuild_search``, always) is rebuilt by
   :func:`~hermes_repo.schema.fts_rebuild.guarded_rebuild` with ``automatic=False``
   (the operator asked: the attempt ledger does not stop it) and ``force=True``
   (triggers can be missing, or an index damaged, without a marker).
6. **Transcripts** that break role alternation or tool pairing are repaired
   (:func:`~hermes_repo.ops.transcript_check.repair_transcripts`: archived, never
   deleted).
7. **Verify**, as the seed does by hand: ``PRAGMA integrity_check`` is ok, FTS5's
   ``'integrity-check'`` (with rank 1, which compares each index with its rows) passes
   for both indexes, each index finds the messages it covers (the coverage check), no
   ``fts_stale`` row, the six sync triggers present, and the canonical counts not lower
   than in step 3 (invariant 3: lower would be a bug).

On any failure the live file and the backup are both kept and the report says which
command comes next. ``check_only=True`` runs the same diagnosis and writes nothing (no
lock, no backup, no rebuild): the doctor's findings plus the transcript invariants.

The repair never goes through :meth:`StateStore.open`: an open registers a shared hold
on the store (which would block our own exclusive lock, or, taken after it, wait for it
forever) and may start the automatic rebuild. It opens its own engine with
:func:`~hermes_repo.engine.create_store_engine` and the quarantine listeners, and passes
its one :class:`~hermes_repo.holders.HolderLock` (re-entrant) to the rebuild.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from .. import quarantine
from ..engine import WRITE_OPTION, Driver, create_store_engine, db_path_for_home, select_driver
from ..errors import HermesRepoError, describe
from ..holders import HolderLock, StoreHeldError
from ..models import state_meta_table
from ..schema import fts
from ..schema.backup import BackupSpaceError, read_only_engine, timestamped_backup
from ..schema.fts_rebuild import REPAIR_COMMAND, RebuildOutcome, guarded_rebuild
from ..store import StateStore
from .doctor import (
    STOP_FIRST,
    DoctorReport,
    Finding,
    diagnose,
    recover_commands,
    recovered_path,
)
from .replace import REPLACE_COMMAND
from .snapshots import list_snapshots, snapshot_before
from .transcript_check import (
    TranscriptRepairSummary,
    TranscriptReport,
    check_transcripts,
    repair_transcripts,
)

__all__ = [
    "BACKUP_LABEL",
    "Damage",
    "RepairError",
    "RepairReport",
    "RepairStoreHeldError",
    "VerifyItem",
    "repair_store",
]

Damage = Literal["none", "index", "structural"]
"""What the diagnosis found: nothing, the derived index, or the file itself."""

BACKUP_LABEL = "pre-repair"
"""Label of the backup (``state.db.pre-repair-<time>.bak``) and of the snapshot."""

# Doctor findings that mean the file itself is damaged: never repaired in place.
_STRUCTURAL = frozenset(
    {"file-not-a-database", "file-damaged", "quarantined", "wal-header-damaged"}
)
# Doctor findings about the derived index: the guarded rebuild fixes them.
_INDEX = frozenset(
    {
        "fts-stale",
        "fts-triggers-missing",
        "fts-damaged",
        "fts-behind",
        "fts-unreadable",
        "fts-partial",
    }
)
# Doctor findings that stop the repair before it starts (the fix is another command).
_REFUSED = frozenset(
    {
        "journal-file-unsafe",
        "store-missing",
        "schema-empty",
        "schema-foreign",
        "schema-behind",
        "schema-ahead",
        "schema-unversioned",
        "schema-damaged",
        "schema-drift",
        "store-unreadable",
        "quick_check-unreadable",
    }
)
# Invariant 3 is about these: archiving (a transcript repair) lowers active_messages.
_CANONICAL = ("sessions", "messages")


class RepairError(HermesRepoError):
    """The repair could not start; nothing was written. The message names the fix."""


class RepairStoreHeldError(RepairError, StoreHeldError):
    """Another process has the store open: the repair is refused, nothing was written."""


@dataclass(frozen=True)
class VerifyItem:
    """One post-repair check: what was checked, whether it passed, what was seen."""

    name: str
    ok: bool
    detail: str


@dataclass
class RepairReport:
    """What :func:`repair_store` found and did, and what comes next when it failed.

    ``ok`` is True when the store was verified sound after the repair (with
    ``check_only``: when nothing needs fixing). ``next_steps`` holds the exact commands
    to run next, in order; it is empty when nothing is left to do.
    """

    path: str
    check_only: bool
    damage: Damage
    doctor: DoctorReport
    """The diagnosis before the repair (read-only)."""
    ok: bool = False
    summary: str = ""
    next_steps: list[str] = field(default_factory=list)
    counts_before: dict[str, int] = field(default_factory=dict)
    counts_after: dict[str, int] = field(default_factory=dict)
    backup: Path | None = None
    snapshot: str | None = None
    """Id of the ``pre-repair`` snapshot (``hermes-repo snapshot restore <id>``)."""
    rebuild: RebuildOutcome | None = None
    transcripts: TranscriptRepairSummary | None = None
    transcript_check: TranscriptReport | None = None
    verification: list[VerifyItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recreated: list[str] = field(default_factory=list)
    """Metadata tables the repair put back (``state_meta``), empty as the models make them."""

    @property
    def findings(self) -> list[Finding]:
        """The doctor's findings before the repair."""
        return self.doctor.findings

    @property
    def verified(self) -> bool:
        """True when every post-repair check passed (False when none ran)."""
        return bool(self.verification) and all(v.ok for v in self.verification)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (what ``sessions repair --json`` prints).

        The transcript keys stay at the top level, where ``sessions repair`` printed
        them before it repaired anything else, so existing scripts keep working.
        """
        if self.check_only:
            transcript = (self.transcript_check or TranscriptReport(0, 0, ())).as_dict()
        else:
            transcript = (
                self.transcripts or TranscriptRepairSummary(TranscriptReport(0, 0, ()))
            ).as_dict()
        rebuild = None
        if self.rebuild is not None:
            rebuild = {
                **asdict(self.rebuild),
                "backup": str(self.rebuild.backup) if self.rebuild.backup else None,
            }
        return {
            **transcript,
            "ok": self.ok,
            "check_only": self.check_only,
            "path": self.path,
            "damage": self.damage,
            "summary": self.summary,
            "next_steps": list(self.next_steps),
            "counts_before": dict(self.counts_before),
            "counts_after": dict(self.counts_after),
            "backup": str(self.backup) if self.backup else None,
            "snapshot": self.snapshot,
            "rebuild": rebuild,
            "verification": [asdict(v) for v in self.verification],
            "notes": list(self.notes),
            "recreated": list(self.recreated),
            "findings": [f.to_dict() for f in self.findings],
        }


def _command(db_path: Path, cmd: str) -> str:
    """``hermes-repo ...`` with ``--home`` filled in, as the doctor prints it."""
    head, _, rest = cmd.partition(" ")
    return f"{head} --home {shlex.quote(str(db_path.parent))} {rest}".rstrip()


def _damage(doctor: DoctorReport) -> Damage:
    codes = {f.code for f in doctor.findings}
    if codes & _STRUCTURAL:
        return "structural"
    if codes & _INDEX:
        return "index"
    return "none"


def _salvage_steps(db_path: Path) -> list[str]:
    """What comes after a repair that cannot, or did not, fix the file in place."""
    inspect, output = recover_commands(db_path)
    new_file = shlex.quote(str(recovered_path(db_path)))
    steps = [
        f"{STOP_FIRST} `{inspect}`",
        f"if rows are recoverable: `{output}`, then put the new state.db in place of the "
        f"old one with `{_command(db_path, f'{REPLACE_COMMAND} {new_file}')}` (it keeps the "
        "damaged file and its -wal aside; never copy over state.db by hand)",
    ]
    newest = next((s for s in list_snapshots(db_path.parent) if s.ok), None)
    if newest is not None:
        restore = _command(db_path, f"hermes-repo snapshot restore {newest.id}")
        steps.append(f"or restore the newest snapshot ({newest.created_at}): `{restore}`")
    return steps


def repair_store(
    home: str | os.PathLike[str] | None = None,
    *,
    check_only: bool = False,
    rebuild_search: bool = False,
) -> RepairReport:
    """Check, or repair, the store in ``home`` (default ``$HERMES_HOME``, else ``~/.hermes``).

    See the module docstring for the steps. Raises :class:`RepairStoreHeldError` at once
    while another process has the store open, and :class:`RepairError` when there is
    no store, or its schema is not one the repair works on; in both cases nothing was
    written. Every other outcome is a :class:`RepairReport`: ``ok`` False (with
    ``next_steps``) when the repair could not fix the store or its verification failed.

    ``rebuild_search`` rebuilds the full-text indexes (guarded, verified) even when no
    check finds them damaged: for damage no check sees.
    """
    db_path = db_path_for_home(home)
    if check_only:
        return _check(db_path)
    if not db_path.is_file() or db_path.stat().st_size == 0:
        upgrade = _command(db_path, "hermes-repo db upgrade")
        raise RepairError(
            f"there is no store at {db_path}, nothing to repair; check --home / HERMES_HOME "
            f"(`{upgrade}` creates an empty one)"
        )
    holder = HolderLock(db_path)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(holder.exclusive())
        except StoreHeldError as exc:
            again = _command(db_path, REPAIR_COMMAND)
            # Without pids the holder may be this very process (a StateStore it did not
            # close): /proc/locks names only the others.
            who = exc.holders_text if exc.pids else "another process (or an open StateStore) has"
            raise RepairStoreHeldError(
                f"cannot repair {db_path}: {who} the store open; nothing was changed. Stop "
                f"every process using the store (e.g. the gateway), then run `{again}`",
                exc.pids,
            ) from exc
        return _repair_alone(db_path, holder, rebuild_search=rebuild_search)


# -- check only ---------------------------------------------------------------------------


@contextlib.contextmanager
def _read_only_store(db_path: Path, driver: Driver) -> Iterator[StateStore]:
    """A store on ``mode=ro`` connections: the transcript check can never write.

    Not :meth:`StateStore.open`, which may rebuild the index. Its holder lock is never
    taken: a check must work while a gateway runs.
    """
    engine = read_only_engine(db_path, driver)
    guard = quarantine.install(engine, db_path, driver)
    store = StateStore(db_path.parent, engine, driver, HolderLock(db_path), guard)
    try:
        yield store
    finally:
        store.close()


def _check(db_path: Path) -> RepairReport:
    doctor = diagnose(db_path.parent)
    damage = _damage(doctor)
    report = RepairReport(
        path=str(db_path),
        check_only=True,
        damage=damage,
        doctor=doctor,
        counts_before=dict(doctor.store.counts),
    )
    readable = damage != "structural" and doctor.store.at_head
    if readable:
        try:
            with _read_only_store(db_path, select_driver()) as store:
                report.transcript_check = check_transcripts(store)
        except (HermesRepoError, DBAPIError) as exc:
            report.notes.append(f"transcripts not checked: {describe(exc)}")
    else:
        report.notes.append("transcripts not checked: the store cannot be read as a store")
    errors = [f for f in doctor.findings if f.severity == "error"]
    transcripts_ok = report.transcript_check is None or report.transcript_check.ok
    report.ok = not errors and transcripts_ok and readable
    repair = _command(db_path, REPAIR_COMMAND)
    if damage == "structural":
        report.summary = (
            "the database file itself is damaged: `sessions repair` will not repair it in "
            "place; salvage it"
        )
        report.next_steps = _salvage_steps(db_path)
    elif (
        damage == "index"
        or not transcripts_ok
        or any(f.code == "schema-meta-missing" for f in errors)
    ):
        report.summary = "the store needs a repair"
        report.next_steps = [f"{STOP_FIRST} `{repair}`"]
    elif errors:
        report.summary = "the store has problems a repair does not fix: see the findings"
        report.next_steps = [f.fix for f in errors]
    else:
        report.summary = "nothing to repair"
    return report


# -- the repair ---------------------------------------------------------------------------


def _counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        counts = {
            t: int(conn.execute(text(f"SELECT count(*) FROM {t}")).scalar_one()) for t in _CANONICAL
        }
        counts["active_messages"] = int(
            conn.execute(text("SELECT count(*) FROM messages WHERE active = 1")).scalar_one()
        )
        conn.rollback()
    return counts


def _integrity(engine: Engine) -> str:
    """``ok``, or the first problems ``PRAGMA integrity_check`` reports.

    From SQLite 3.44 the check covers the FTS5 indexes, and a damaged one can make the
    pragma itself fail (bad format version, unreadable page): that is a verdict too.
    """
    try:
        with engine.connect() as conn:
            rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA integrity_check").fetchall()]
            conn.rollback()
    except DBAPIError as exc:
        return describe(exc)
    if rows == ["ok"]:
        return "ok"
    return "; ".join(" ".join(r.split()) for r in rows[:3]) + (
        f" (+{len(rows) - 3} more)" if len(rows) > 3 else ""
    )


def _fail(report: RepairReport, why: str, next_steps: list[str] | None = None) -> RepairReport:
    """A repair that stopped: the file and the backup are kept, the next step named
    (by default the salvage: what is left when a repair in place did not work)."""
    kept = (
        f"the store file and the backup {report.backup} are kept as they are"
        if report.backup is not None
        else "the store file is kept as it is"
    )
    report.ok = False
    report.summary = f"repair failed: {why}; {kept}"
    report.next_steps = _salvage_steps(Path(report.path)) if next_steps is None else next_steps
    return report


def _refusal(doctor: DoctorReport) -> Finding | None:
    return next((f for f in doctor.findings if f.code in _REFUSED), None)


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
        if _index_needs_rebuild(report, engine) is not None:
            return None
        checked = check_transcripts(store)
        if not checked.ok:
            return None
        report.transcripts = TranscriptRepairSummary(checked)  # nothing to repair
        report.counts_before = _counts(engine)
        report.verification, report.counts_after = _verify(engine, report.counts_before)
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
    damage = _damage(doctor)
    refused = _refusal(doctor)
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
            report.counts_before = _counts(source)
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
                again = _command(db_path, REPAIR_COMMAND)
                return _fail(
                    report,
                    f"the backup could not be taken ({describe(exc)}), so nothing was changed",
                    [f"free space beside {db_path} (or fix the cause above), then run `{again}`"],
                )
            report.notes.append(f"no backup could be taken: {describe(exc)}")
        if damage == "structural":
            return _structural(report)
        integrity = _integrity(source)
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
        return _repair_open(report, store, engine, holder, rebuild_search=rebuild_search)
    except (HermesRepoError, DBAPIError) as exc:
        return _fail(report, describe(exc) if isinstance(exc, DBAPIError) else str(exc))
    finally:
        store.close()


def _structural(report: RepairReport) -> RepairReport:
    db_path = Path(report.path)
    what = "; ".join(f.summary for f in report.findings if f.code in _STRUCTURAL)
    kept = (
        f"it and the backup-API copy {report.backup} are kept as they are"
        if report.backup is not None
        else "it is kept as it is"
    )
    report.ok = False
    report.summary = (
        f"{db_path} was not repaired in place: {what}; {kept}. Salvage it with `sessions recover`"
    )
    report.next_steps = _salvage_steps(db_path)
    return report


def _index_needs_rebuild(report: RepairReport, engine: Engine) -> str | None:
    """Why the index must be rebuilt, or None when it is live and sound."""
    found = [f.summary for f in report.findings if f.code in _INDEX]
    if found:
        return "; ".join(found)
    # FTS5's own check with rank 1 also compares each index with its rows, which the
    # doctor cannot do read-only; it writes nothing and is rolled back.
    with engine.connect() as conn:
        failing = fts.integrity_errors(conn)
        conn.rollback()
    if failing:
        return "; ".join(f"{ix}: {err}" for ix, err in failing.items())
    return None


def _repair_open(
    report: RepairReport,
    store: StateStore,
    engine: Engine,
    holder: HolderLock,
    *,
    rebuild_search: bool = False,
) -> RepairReport:
    db_path = Path(report.path)
    why = _index_needs_rebuild(report, engine)
    if why is None and rebuild_search:
        why = "a rebuild of the search index was asked for (--rebuild-search)"
    if why is not None:
        report.damage = "index"
        outcome = guarded_rebuild(
            engine, db_path, holder, automatic=False, force=True, backup=report.backup
        )
        report.rebuild = outcome
        if not outcome.ok:
            # The canonical tables passed the doctor: only the index is at stake, so the
            # way on is space (the usual cause) and this same repair, never the salvage.
            again = _command(db_path, REPAIR_COMMAND)
            return _fail(
                report,
                outcome.reason,
                [
                    f"free space beside {db_path} (or fix the cause above), then run "
                    f"`{again}`; the canonical rows are intact and search uses the "
                    "fallback meanwhile"
                ],
            )
    report.transcripts = repair_transcripts(store)

    report.verification, report.counts_after = _verify(engine, report.counts_before)
    if not report.verified:
        failed = "; ".join(f"{v.name}: {v.detail}" for v in report.verification if not v.ok)
        return _fail(report, f"verification failed ({failed})")
    report.ok = True
    done = [f"table {name} recreated" for name in report.recreated]
    if report.rebuild is not None:
        done.append(f"full-text indexes rebuilt in {report.rebuild.seconds:.1f} s")
    if report.transcripts.repairs:
        done.append(f"{report.transcripts.sessions_repaired} transcript(s) repaired")
    report.summary = ("; ".join(done) or "nothing needed repair") + "; verified"
    return report


def _verify(engine: Engine, before: dict[str, int]) -> tuple[list[VerifyItem], dict[str, int]]:
    """The seed's checks after a repair, read from the file through a new connection."""
    items: list[VerifyItem] = []
    integrity = _integrity(engine)
    items.append(VerifyItem("integrity_check", integrity == "ok", integrity))
    with engine.connect() as conn:
        failing = fts.integrity_errors(conn)
        for ix in fts.INDEXES:
            items.append(
                VerifyItem(
                    f"integrity-check {ix.name}",
                    ix.name not in failing,
                    failing.get(ix.name, "ok"),
                )
            )
        try:
            with conn.begin_nested():
                partial = [str(p) for p in fts.coverage_check(conn)]
        except DBAPIError as exc:
            # A probe that errors is an index that does not find what the table holds.
            partial = [f"the index could not be probed: {describe(exc)}"]
        items.append(
            VerifyItem(
                "search coverage",
                not partial,
                "; ".join(partial) or "every probed message found, nothing missing",
            )
        )
        marker = fts.stale_marker(conn)
        items.append(
            VerifyItem(
                "fts_stale",
                marker is None,
                "no row" if marker is None else f"still set ({marker.get('error')})",
            )
        )
        missing = [n for n in fts.TRIGGER_NAMES if n not in fts.present_triggers(conn)]
        items.append(
            VerifyItem(
                "triggers",
                not missing,
                "all 6 present" if not missing else f"missing: {', '.join(missing)}",
            )
        )
        conn.rollback()
    after = _counts(engine)
    lower = [t for t in _CANONICAL if after[t] < before.get(t, 0)]
    detail = ", ".join(f"{t} {before.get(t, '?')} -> {after[t]}" for t in _CANONICAL)
    if lower:
        # Invariant 3: no repair step deletes canonical rows. Lower counts are a bug.
        detail += f"; LOWER than before for {', '.join(lower)}: a bug, keep the backup"
    items.append(VerifyItem("canonical counts", not lower, detail))
    return items, after
