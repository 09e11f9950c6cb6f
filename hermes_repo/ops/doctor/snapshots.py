"""Snapshots of the store: how many can be restored, the newest, the damaged ones."""

from __future__ import annotations

import contextlib
import datetime as dt
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ...maintenance.snapshots import list_snapshots, snapshots_dir
from .context import CheckResult, DoctorContext, Finding

__all__ = ["SnapshotFacts", "check_snapshots"]


@dataclass
class SnapshotFacts:
    """Snapshots in ``<home>/state-snapshots``: how many, the newest, damaged ones."""

    title = "snapshots"
    count: int
    newest_id: str | None = None
    newest_created_at: str | None = None
    newest_age_s: float | None = None
    damaged: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        if self.newest_id is None:
            newest = "none"
        else:
            age = "" if self.newest_age_s is None else f", {self.newest_age_s / 3600:.1f} h old"
            newest = f"{self.newest_id} ({self.newest_created_at}{age})"
        out = [("snapshots", str(self.count)), ("newest", newest)]
        if self.damaged:
            out.append(("damaged", ", ".join(self.damaged)))
        return out


def check_snapshots(ctx: DoctorContext) -> CheckResult:
    """How many verified snapshots there are and how old the newest is; damaged ones."""
    snaps = list_snapshots(ctx.home)
    good = [s for s in snaps if s.ok]
    facts = SnapshotFacts(
        count=len(good), damaged=[f"{s.id}: {s.error}" for s in snaps if not s.ok]
    )
    if good:
        newest = good[0]
        facts.newest_id = newest.id
        facts.newest_created_at = newest.created_at
        if newest.created_at is not None:
            with contextlib.suppress(ValueError):
                made = dt.datetime.fromisoformat(newest.created_at).timestamp()
                facts.newest_age_s = max(0.0, time.time() - made)
    findings = []
    if facts.damaged:
        findings.append(
            Finding(
                "snapshot-damaged",
                "warning",
                f"{len(facts.damaged)} snapshot(s) cannot be restored: {'; '.join(facts.damaged)}",
                f"see `{ctx.command('hermes-repo snapshot list')}`; delete the damaged "
                f"snapshot's files from {snapshots_dir(ctx.home)} once nothing in them is needed",
            )
        )
    return CheckResult("snapshots", facts, findings)
