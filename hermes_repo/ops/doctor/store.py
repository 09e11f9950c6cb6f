"""The store's facts: the file and its WAL, the SQLite reading it, revision and counts.

The findings drawn from them are the schema's (:mod:`.schema`) and the SQLite build's
(:mod:`.sqlite`); this check gathers the facts they judge, in one read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ...schema.files import side_file
from ...schema.head import HEAD_REVISION
from .context import (
    CheckResult,
    DoctorContext,
    DoctorReadError,
    Finding,
    JournalFileError,
    file_size,
    unreadable,
)
from .schema import revision_findings
from .sqlite import sqlite_findings

__all__ = ["StoreFacts", "check_store"]


@dataclass
class StoreFacts:
    """The file, the SQLite that reads it, the schema revision and the canonical counts."""

    title = "store"
    path: str
    exists: bool
    size_bytes: int
    wal_bytes: int
    driver: str
    sqlite_version: str
    sqlite_has_wal_fix: bool
    journal_mode: str | None = None
    revision: str | None = None
    head: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def at_head(self) -> bool:
        """True when the schema is at the code's newest migration."""
        return self.revision is not None and self.revision == self.head

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return {**asdict(self), "at_head": self.at_head}

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        fix = "yes" if self.sqlite_has_wal_fix else "no (fixed in 3.51.3)"
        revision = self.revision or "none"
        if self.head is not None:
            revision += " (at head)" if self.at_head else f" (head is {self.head})"
        out = [
            ("file", f"{self.path} ({_size(self.size_bytes)})" if self.exists else "missing"),
            ("WAL", _size(self.wal_bytes)),
            ("SQLite", f"{self.sqlite_version} via {self.driver}; WAL-reset fix: {fix}"),
            ("journal mode", self.journal_mode or "-"),
            ("schema revision", revision),
        ]
        if self.counts:
            out.append(("rows", ", ".join(f"{k} {v}" for k, v in self.counts.items())))
        return out


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def _read_store(ctx: DoctorContext, facts: StoreFacts) -> set[str]:
    facts.journal_mode = str(ctx.value("PRAGMA journal_mode")).lower()
    tables = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "alembic_version" in tables:
        facts.revision = ctx.value("SELECT version_num FROM alembic_version")
    if {"sessions", "messages"} <= tables:
        facts.counts = ctx.counts()
    return tables


def check_store(ctx: DoctorContext) -> CheckResult:
    """File and WAL size, SQLite and its WAL-reset fix, schema revision, canonical counts."""
    drv = ctx.driver
    facts = StoreFacts(
        path=str(ctx.db_path),
        exists=ctx.exists,
        size_bytes=file_size(ctx.db_path),
        wal_bytes=file_size(side_file(ctx.db_path, "-wal")),
        driver=drv.name,
        sqlite_version=drv.sqlite_version,
        sqlite_has_wal_fix=drv.has_wal_reset_fix,
        head=HEAD_REVISION,
    )
    findings: list[Finding] = []
    upgrade = ctx.command("hermes-repo db upgrade")
    if not ctx.exists or facts.size_bytes == 0:
        findings.append(
            Finding(
                "store-missing",
                "error",
                f"there is no store at {ctx.db_path} (the folder may be the wrong one)",
                f"check --home / HERMES_HOME; to create an empty store run `{upgrade}`",
            )
        )
        return CheckResult("store", facts, findings)

    if not ctx.header_ok:
        return CheckResult("store", facts, findings)  # check_header reports it
    try:
        tables = _read_store(ctx, facts)
    except JournalFileError:
        return CheckResult("store", facts, findings)  # check_journal names the file
    except DoctorReadError as exc:
        # The facts gathered so far are still worth showing next to the finding.
        findings.append(unreadable("store", ctx, exc))
        return CheckResult("store", facts, findings)

    findings += revision_findings(ctx, facts.revision, facts.head, tables)
    findings += sqlite_findings(ctx, facts.journal_mode)
    return CheckResult("store", facts, findings)
