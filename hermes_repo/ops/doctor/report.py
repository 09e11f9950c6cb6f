"""The runner: the checks in report order, and the report they build."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...engine import Driver, db_path_for_home, select_driver
from .context import (
    Check,
    CheckResult,
    DoctorContext,
    DoctorReadError,
    Finding,
    JournalFileError,
    Section,
    unreadable,
)
from .copying import check_copy
from .header import check_header
from .holders import check_holders
from .journal import check_journal, check_wal_header
from .quarantine import check_quarantine
from .quick_check import check_quick_check
from .schema import check_schema
from .search_index import FtsStatus, check_fts, check_fts_coverage
from .snapshots import check_snapshots
from .spool import check_spool
from .store import StoreFacts, check_store
from .transcripts import check_transcripts
from .values import check_values

__all__ = ["CHECKS", "DoctorReport", "collect", "diagnose"]

# Report order. The header comes first (a file that is not a database skips every SQL
# read); holders come last (whether they matter depends on what the others found).
CHECKS: list[Check] = [
    check_journal,
    check_wal_header,
    check_header,
    check_store,
    check_schema,
    check_quick_check,
    check_fts,
    check_fts_coverage,
    check_values,
    check_transcripts,
    check_quarantine,
    check_spool,
    check_snapshots,
    check_copy,
    check_holders,
]


@dataclass
class DoctorReport:
    """Every check's facts, by key, and every finding; ``healthy`` when there are none."""

    path: str
    sections: dict[str, Section] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """True when no check found anything to fix."""
        return not self.findings

    @property
    def store(self) -> StoreFacts:
        """The store section (always present)."""
        section = self.sections["store"]
        assert isinstance(section, StoreFacts)
        return section

    @property
    def fts(self) -> FtsStatus | None:
        """The full-text section, or None when the store has no schema to check."""
        section = self.sections.get("fts")
        assert section is None or isinstance(section, FtsStatus)
        return section

    @property
    def notes(self) -> list[str]:
        """What the report says that needs nothing done (transcripts a repairing load
        tidies as it reads them): never a finding, so never a reason for ``healthy``
        to be False."""
        out = []
        for section in self.sections.values():
            note = getattr(section, "note", None)
            text = note() if callable(note) else None
            if isinstance(text, str):
                out.append(text)
        return out

    def to_dict(self) -> dict[str, Any]:
        """The whole report as JSON-ready data."""
        return {
            "path": self.path,
            "healthy": self.healthy,
            "findings": [f.to_dict() for f in self.findings],
            "notes": self.notes,
            **{key: section.to_dict() for key, section in self.sections.items()},
        }


def _run(check: Check, ctx: DoctorContext) -> CheckResult:
    try:
        return check(ctx)
    except JournalFileError:
        return CheckResult(check.__name__.removeprefix("check_"), None)  # see check_journal
    except DoctorReadError as exc:
        name = check.__name__.removeprefix("check_")
        return CheckResult(name, None, [unreadable(name, ctx, exc)])


def diagnose(
    home: str | os.PathLike[str] | None = None,
    *,
    driver: Driver | None = None,
    checks: list[Check] | None = None,
) -> DoctorReport:
    """Examine the store in ``home`` (default
    ``$HERMES_HOME/hermes-repo``, see :mod:`hermes_repo.homes`).

    Writes nothing: see the module docstring. Safe while other processes use the store.
    """
    db_path = db_path_for_home(home)
    ctx = DoctorContext(db_path.parent, driver or select_driver())
    report = DoctorReport(path=str(db_path))
    try:
        collect(report, ctx, CHECKS if checks is None else checks)
    finally:
        ctx.close()
    return report


def collect(
    report: DoctorReport,
    ctx: DoctorContext,
    checks: list[Check],
    run: Callable[[Check, DoctorContext], CheckResult | None] = _run,
) -> None:
    """Run ``checks`` in order into ``report`` (``run`` returning None skips one); each
    check sees the findings of those before it."""
    for check in checks:
        result = run(check, ctx)
        if result is None:
            continue
        if result.section is not None:
            report.sections[result.key] = result.section
        report.findings.extend(result.findings)
        ctx.findings.extend(result.findings)
