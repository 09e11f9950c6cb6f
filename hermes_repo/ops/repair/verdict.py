"""What the diagnosis means for a repair, the report it fills, and the way on after a failure."""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ...maintenance.fts_rebuild import RebuildOutcome
from ...maintenance.snapshots import list_snapshots
from ..doctor import STOP_FIRST, DoctorReport, Finding, recovered_path, salvage_commands
from ..replace import REPLACE_COMMAND
from ..transcript_check import TranscriptRepairSummary, TranscriptReport

if TYPE_CHECKING:
    from .values import ValueRepairSummary

__all__ = [
    "BACKUP_LABEL",
    "INDEX",
    "REFUSED",
    "STRUCTURAL",
    "Damage",
    "RepairReport",
    "VerifyItem",
    "command",
    "damage_of",
    "fail",
    "refusal",
    "salvage_steps",
]

Damage = Literal["none", "index", "structural"]
"""What the diagnosis found: nothing, the derived index, or the file itself."""

BACKUP_LABEL = "pre-repair"
"""Label of the backup (``state.db.pre-repair-<time>.bak``) and of the snapshot."""

# Doctor findings that mean the file itself is damaged: never repaired in place.
STRUCTURAL = frozenset({"file-not-a-database", "file-damaged", "quarantined", "wal-header-damaged"})
# Doctor findings about the derived index: the guarded rebuild fixes them.
INDEX = frozenset(
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
REFUSED = frozenset(
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
    values: ValueRepairSummary | None = None
    """The unreadable values rewritten (None when the step did not run)."""
    verification: list[VerifyItem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    recreated: list[str] = field(default_factory=list)
    """Metadata tables the repair put back (``state_meta``), empty as the models make them."""
    backend: str = "sqlite"
    """``"postgresql"``: only the transcript repair ran (nothing file-level applies)."""

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
            "backend": self.backend,
            "values": self.values.as_dict() if self.values is not None else None,
            "findings": [f.to_dict() for f in self.findings],
        }


def command(db_path: Path, cmd: str) -> str:
    """``hermes-repo ...`` with ``--home`` filled in, as the doctor prints it."""
    head, _, rest = cmd.partition(" ")
    return f"{head} --home {shlex.quote(str(db_path.parent))} {rest}".rstrip()


#: The doctor's finding for values a repair rewrites (:mod:`.values`).
VALUES = "value-unreadable"


def damage_of(doctor: DoctorReport) -> Damage:
    """What the doctor's findings say is damaged: the file, the derived index, or nothing."""
    codes = {f.code for f in doctor.findings}
    if codes & STRUCTURAL:
        return "structural"
    if codes & INDEX:
        return "index"
    return "none"


def salvage_steps(db_path: Path) -> list[str]:
    """What comes after a repair that cannot, or did not, fix the file in place."""
    inspect, output = salvage_commands(db_path)
    new_file = shlex.quote(str(recovered_path(db_path)))
    steps = [
        f"{STOP_FIRST} `{inspect}`",
        f"if rows are recoverable: `{output}`, then put the new state.db in place of the "
        f"old one with `{command(db_path, f'{REPLACE_COMMAND} {new_file}')}` (it keeps the "
        "damaged file and its -wal aside; never copy over state.db by hand)",
    ]
    newest = next((s for s in list_snapshots(db_path.parent) if s.ok), None)
    if newest is not None:
        restore = command(db_path, f"hermes-repo snapshot restore {newest.id}")
        steps.append(f"or restore the newest snapshot ({newest.created_at}): `{restore}`")
    return steps


def fail(report: RepairReport, why: str, next_steps: list[str] | None = None) -> RepairReport:
    """A repair that stopped: the file and the backup are kept, the next step named
    (by default the salvage: what is left when a repair in place did not work)."""
    kept = (
        f"the store file and the backup {report.backup} are kept as they are"
        if report.backup is not None
        else "the store file is kept as it is"
    )
    report.ok = False
    report.summary = f"repair failed: {why}; {kept}"
    report.next_steps = salvage_steps(Path(report.path)) if next_steps is None else next_steps
    return report


def refusal(doctor: DoctorReport) -> Finding | None:
    """The first finding whose fix is another command than a repair, if any."""
    return next((f for f in doctor.findings if f.code in REFUSED), None)
