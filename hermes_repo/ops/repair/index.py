"""The index path: rebuild the full-text indexes when they need it, then finish and verify."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine

from ...holders import HolderLock
from ...maintenance.fts_rebuild import REPAIR_COMMAND, guarded_rebuild
from ...schema import fts
from ...store import StateStore
from ..transcript_check import repair_transcripts
from .values import repair_values
from .verdict import INDEX, RepairReport, command, fail
from .verify import verify

__all__ = ["index_needs_rebuild", "rebuild_and_finish"]


def index_needs_rebuild(report: RepairReport, engine: Engine) -> str | None:
    """Why the index must be rebuilt, or None when it is live and sound."""
    found = [f.summary for f in report.findings if f.code in INDEX]
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


def rebuild_and_finish(
    report: RepairReport,
    store: StateStore,
    engine: Engine,
    holder: HolderLock,
    *,
    rebuild_search: bool = False,
) -> RepairReport:
    """Rebuild the index if it needs it (or was asked), repair transcripts, verify."""
    db_path = Path(report.path)
    why = index_needs_rebuild(report, engine)
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
            again = command(db_path, REPAIR_COMMAND)
            return fail(
                report,
                outcome.reason,
                [
                    f"free space beside {db_path} (or fix the cause above), then run "
                    f"`{again}`; the canonical rows are intact and search uses the "
                    "fallback meanwhile"
                ],
            )
    # Values first: a transcript repair merging turns would carry an unreadable value
    # into a survivor, and the values' archived copies must show the rows as they were.
    report.values = repair_values(store)
    report.transcripts = repair_transcripts(store)

    report.verification, report.counts_after = verify(engine, report.counts_before)
    if not report.verified:
        failed = "; ".join(f"{v.name}: {v.detail}" for v in report.verification if not v.ok)
        return fail(report, f"verification failed ({failed})")
    report.ok = True
    done = [f"table {name} recreated" for name in report.recreated]
    if report.rebuild is not None:
        done.append(f"full-text indexes rebuilt in {report.rebuild.seconds:.1f} s")
    if report.values.fixes:
        done.append(f"{len(report.values.fixes)} unreadable value(s) rewritten")
    if report.transcripts.repairs:
        done.append(f"{report.transcripts.sessions_repaired} transcript(s) repaired")
    report.summary = ("; ".join(done) or "nothing needed repair") + "; verified"
    return report
