"""The full-text indexes: the stale marker, the sync triggers, each index's integrity.

FTS integrity is checked with ``PRAGMA integrity_check(<index>)``, which works on a
read-only connection from SQLite 3.45.1 on. FTS5's own ``'integrity-check'`` command is
an INSERT: a read-only connection refuses it. ``integrity_check`` tests the index's
structure, not whether it agrees with the canonical rows, so the doctor adds cheap
read-only comparisons: documents indexed vs rows the index covers, the presence of the
structure, averages and version records, and probes of what the index finds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ...maintenance.fts_rebuild import BACKUP_LABEL, MAX_AUTOMATIC_ATTEMPTS, REPAIR_COMMAND
from ...schema import fts
from ...schema.files import side_file
from .context import (
    STOP_FIRST,
    CheckResult,
    DoctorContext,
    DoctorReadError,
    Finding,
    JournalFileError,
    file_size,
    when,
)

__all__ = [
    "FTS_READONLY_CHECK_VERSION",
    "FtsIndexStatus",
    "FtsStatus",
    "check_fts",
    "check_fts_coverage",
]

# FTS5 checks its index read-only through PRAGMA integrity_check from this version on
# (3.44 added the hook; before 3.45.1 it failed on read-only connections).
FTS_READONLY_CHECK_VERSION = (3, 45, 1)
_FTS_VERSIONS = ("4", "5")  # file-format versions FTS5 reads


@dataclass
class FtsIndexStatus:
    """One index: its integrity check, and how it compares with the rows it covers."""

    name: str
    integrity: str  # "ok", the failure, or why it was not checked
    indexed_rows: int | None  # documents in the index (its docsize table)
    covered_rows: int | None  # canonical rows the index should hold
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is known to be wrong with the index."""
        checked = self.integrity == "ok" or self.integrity.startswith("not checked")
        return checked and not self.problems and self.indexed_rows == self.covered_rows


@dataclass
class FtsStatus:
    """The ``fts_stale`` marker, the sync triggers, each index, the rebuild ledger."""

    title = "full-text search"
    stale: bool
    marker: dict[str, Any] | None
    triggers: dict[str, bool]
    indexes: list[FtsIndexStatus]
    rebuild_attempts: int = 0
    rebuild_last_error: str | None = None
    backups: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        if self.marker is None:
            state = "live"
        else:
            where = self.marker.get("index") or "index"
            state = (
                f"STALE since {when(self.marker.get('since'))} "
                f"({where}: {self.marker.get('error')}); search uses the LIKE fallback"
            )
        out = [("state", state)]
        missing = [name for name, present in self.triggers.items() if not present]
        out.append(
            ("triggers", "all 6 present" if not missing else f"missing: {', '.join(missing)}")
        )
        for ix in self.indexes:
            counts = f"{ix.indexed_rows} of {ix.covered_rows} rows indexed"
            detail = "; ".join([f"integrity {ix.integrity}", counts, *ix.problems])
            out.append((ix.name, detail))
        if self.rebuild_attempts:
            out.append(
                (
                    "rebuild attempts",
                    f"{self.rebuild_attempts} of {MAX_AUTOMATIC_ATTEMPTS} automatic "
                    f"(last error: {self.rebuild_last_error})",
                )
            )
        if self.backups:
            out.append(("rebuild backups", ", ".join(self.backups)))
        return out


def _index_status(ctx: DoctorContext, ix: fts.FtsIndex, tables: set[str]) -> FtsIndexStatus:
    data, _idx, docsize, config = ix.shadow_tables
    status = FtsIndexStatus(ix.name, integrity="not checked", indexed_rows=None, covered_rows=None)
    covered = "SELECT count(*) FROM messages"
    if ix.row_filter:
        covered += f" WHERE {ix.row_filter.format(t='messages')}"
    status.covered_rows = int(ctx.value(covered))
    if not {ix.name, data, docsize, config} <= tables:
        status.problems.append("index tables missing")
        return status

    def read(what: str, sql: str) -> Any:
        try:
            return ctx.value(sql)
        except JournalFileError:
            raise  # reported once, by check_journal
        except DoctorReadError as exc:
            status.problems.append(f"{what} unreadable: {exc}")
            return None

    indexed = read("document sizes", f"SELECT count(*) FROM {docsize}")
    status.indexed_rows = None if indexed is None else int(indexed)
    structure = read("structure record", f"SELECT block FROM {data} WHERE id = 10")
    averages = read("averages record", f"SELECT count(*) FROM {data} WHERE id = 1")
    version = read("format version", f"SELECT v FROM {config} WHERE k = 'version'")
    if averages == 0:
        status.problems.append("averages record missing")
    if structure is None:
        status.problems.append("structure record missing")
    elif not any(bytes(structure)) and status.indexed_rows:
        # All zeros is the structure of an index without terms: right for an empty one,
        # and for one whose documents hold no token (messages of one or two characters
        # give the trigram index none, a run of punctuation gives unicode61 none). A
        # document size is a varint per column, 0x00 for no token: damage only when
        # some document has tokens that the structure does not lead to.
        tokens = read(
            "document sizes",
            f"SELECT EXISTS (SELECT 1 FROM {docsize} WHERE sz <> zeroblob(length(sz)))",
        )
        if tokens:
            status.problems.append("structure record is empty but documents are indexed")
    if version is not None and str(version) not in _FTS_VERSIONS:
        status.problems.append(f"unsupported format version {version}")

    if ctx.driver.version_tuple < FTS_READONLY_CHECK_VERSION:
        need = ".".join(map(str, FTS_READONLY_CHECK_VERSION))
        status.integrity = (
            f"not checked (SQLite {ctx.driver.sqlite_version} cannot check an FTS5 index "
            f"read-only; {need}+ can)"
        )
    else:
        try:
            result = [str(r[0]) for r in ctx.rows(f"PRAGMA integrity_check({ix.name})")]
        except JournalFileError:
            raise  # reported once, by check_journal
        except DoctorReadError as exc:
            status.integrity = str(exc)
        else:
            status.integrity = "ok" if result == ["ok"] else "; ".join(result)
    return status


def _ledger(ctx: DoctorContext) -> dict[str, Any]:
    try:
        data = json.loads(side_file(ctx.db_path, ".fts-rebuild.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def check_fts(ctx: DoctorContext) -> CheckResult:
    """The ``fts_stale`` marker, the six sync triggers, each index's integrity."""
    if not ctx.exists or file_size(ctx.db_path) == 0 or not ctx.header_ok:
        return CheckResult("fts", None)  # no store, or not a database: reported elsewhere
    if any(f.code == "file-damaged" for f in ctx.findings):
        # The index is derived from tables that are damaged themselves: its state says
        # nothing more, and the salvage (`sessions salvage`) builds a new one anyway.
        return CheckResult("fts", None)
    tables = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"messages", "state_meta"} <= tables:
        return CheckResult("fts", None)  # no schema: check_store reports it
    raw = ctx.value("SELECT value FROM state_meta WHERE key = ?", (fts.STALE_KEY,))
    marker: dict[str, Any] | None = None
    if raw is not None:
        # The raw row: fts.stale_marker needs a SQLAlchemy connection.
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        marker = parsed if isinstance(parsed, dict) else {"error": str(raw)}
    present = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    ledger = _ledger(ctx) if marker is not None else {}
    status = FtsStatus(
        stale=marker is not None,
        marker=marker,
        triggers={name: name in present for name in fts.TRIGGER_NAMES},
        indexes=[_index_status(ctx, ix, tables) for ix in fts.INDEXES],
        rebuild_attempts=int(ledger.get("attempts", 0) or 0),
        rebuild_last_error=ledger.get("last_error"),
        backups=sorted(p.name for p in ctx.home.glob(f"{ctx.db_path.name}.{BACKUP_LABEL}-*.bak")),
    )

    repair = f"{STOP_FIRST} `{ctx.command(REPAIR_COMMAND)}`"
    findings: list[Finding] = []
    if marker is not None:
        where = marker.get("index") or "the index"
        summary = (
            f"the full-text index is detached since {when(marker.get('since'))} "
            f"({where}: {marker.get('error')}); search answers from a slower LIKE scan"
        )
        if status.rebuild_attempts >= MAX_AUTOMATIC_ATTEMPTS:
            summary += (
                f"; the automatic rebuild gave up after {status.rebuild_attempts} attempts "
                f"(last error: {status.rebuild_last_error})"
            )
        findings.append(Finding("fts-stale", "error", summary, repair))
    else:
        missing = [name for name, ok in status.triggers.items() if not ok]
        if missing:
            findings.append(
                Finding(
                    "fts-triggers-missing",
                    "error",
                    f"sync triggers missing without a stale marker ({', '.join(missing)}): "
                    "new messages are not indexed and search silently misses them",
                    repair,
                )
            )
        for ix in status.indexes:
            if ix.ok:
                continue
            what = [*ix.problems]
            if ix.integrity != "ok" and not ix.integrity.startswith("not checked"):
                what.append(f"integrity check: {ix.integrity}")
            if what:
                findings.append(
                    Finding(
                        "fts-damaged",
                        "error",
                        f"{ix.name} is damaged but not detached yet ({'; '.join(what)}): "
                        "search may miss messages; the next write that meets it detaches it",
                        repair,
                    )
                )
            else:
                findings.append(
                    Finding(
                        "fts-behind",
                        "error",
                        f"{ix.name} holds {ix.indexed_rows} of the {ix.covered_rows} rows it "
                        "covers: search silently misses the others",
                        repair,
                    )
                )
    return CheckResult("fts", status, findings)


def check_fts_coverage(ctx: DoctorContext) -> CheckResult:
    """Whether each live index finds what the table holds (:func:`fts.coverage_check`).

    FTS5's integrity checks pass when rows of an index's ``_idx`` b-tree are gone, yet
    every term on the pages they led to is then unfindable. Skipped when the index is
    detached or already reported damaged: the repair for those rebuilds it anyway.
    """
    if not ctx.exists or not ctx.header_ok:
        return CheckResult("fts_coverage", None)
    if any(f.code.startswith(("fts-", "file-")) for f in ctx.findings):
        return CheckResult("fts_coverage", None)
    tables = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"messages", *(ix.name for ix in fts.INDEXES)} <= tables:
        return CheckResult("fts_coverage", None)  # no schema, or no index: reported elsewhere
    try:
        problems = [str(p) for p in fts.coverage_check(ctx.rows)]
    except JournalFileError:
        raise  # reported once, by check_journal
    except DoctorReadError as exc:
        problems = [f"the index could not be probed: {exc}"]
    findings = [
        Finding(
            "fts-partial",
            "error",
            f"the full-text index misses messages it should find ({'; '.join(problems)}): "
            "search silently returns fewer results",
            f"{STOP_FIRST} `{ctx.command(REPAIR_COMMAND + ' --rebuild-search')}`",
        )
    ]
    return CheckResult("fts_coverage", None, findings if problems else [])
