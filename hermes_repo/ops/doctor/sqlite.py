"""The SQLite reading the store: a build with the WAL-reset bug, two copies in one process."""

from __future__ import annotations

from ...sqlite_copies import two_copies_problems
from .context import DoctorContext, Finding

__all__ = ["sqlite_findings"]


def sqlite_findings(ctx: DoctorContext, journal_mode: str | None) -> list[Finding]:
    """What the SQLite build in use risks for a store in ``journal_mode``."""
    drv = ctx.driver
    findings: list[Finding] = []
    if journal_mode == "wal" and not drv.has_wal_reset_fix:
        findings.append(
            Finding(
                "sqlite-wal-reset-bug",
                "warning",
                f"SQLite {drv.sqlite_version} has the WAL-reset bug (fixed in 3.51.3) and the "
                "store is in WAL mode: concurrent writers and checkpoints can corrupt it",
                "install a fixed SQLite with `pip install pysqlite3`; or stop every process "
                "using the store and open it alone with this SQLite (and "
                "HERMES_REPO_JOURNAL_MODE unset): the file then switches to "
                "journal_mode=DELETE, which avoids the bug",
            )
        )
    # Only this process is seen: a doctor run from the library inside a host application.
    for cause, fix in two_copies_problems(drv, ctx.db_path):
        findings.append(Finding("two-sqlite-copies", "warning", cause, fix))
    return findings
