"""What a salvage reports: per-table counts, the source's state, what was written.

Also the salvage's error and its progress events: every module of the package uses them,
and the CLI shows them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..deprecation import moved_names
from ..errors import SalvageError
from .pagescan import ScanStats, WalInfo

__all__ = [
    "MAX_ROWID",
    "MIN_ROWID",
    "SAMPLE",
    "ProgressCallback",
    "ProgressEvent",
    "SalvageError",
    "SalvageInspection",
    "SalvageResult",
    "TableReport",
]

#: The rowid space of an SQLite table; a gap that runs to either end is open there.
MIN_ROWID, MAX_ROWID = -(1 << 63), (1 << 63) - 1
#: How many examples (missing ids, refused rows) a report lists at most.
SAMPLE = 20


#: Names this module had before "salvage" and "replay" were told apart (warn on use).
_moved = moved_names(
    "hermes_repo.salvage.report", {"RecoveryError": "hermes_repo.errors:SalvageError"}
)


def __getattr__(name: str) -> Any:
    return _moved(name)


@dataclass(frozen=True)
class ProgressEvent:
    """Where a salvage is: ``phase`` is copy, read, scan, write, index or verify."""

    phase: str
    done: int
    total: int | None = None


ProgressCallback = Callable[[ProgressEvent], None]


@dataclass
class TableReport:
    """What one canonical table of the source holds, and how much of it was readable."""

    name: str
    claimed: int | None = None
    """The source's own ``count(*)`` (usually answered from an index); None if it failed."""
    sql_rows: int = 0
    """Rows read through SQL."""
    sql_gaps: list[tuple[int, int]] = field(default_factory=list)
    """Rowid ranges a SQL scan could not read (then read row by row where narrow)."""
    sql_errors: list[str] = field(default_factory=list)
    scan_rows: int | None = None
    """Rows the page scanner decoded for this table (None: the scanner did not run)."""
    scan_only: int = 0
    """Rows found by the page scanner and not by SQL."""
    invalid: int = 0
    """Rows on this table's pages that do not fit its columns (damage that decoded)."""
    recoverable: int = 0
    """Distinct rows found by either path."""
    known_missing: int | None = None
    """Rows that an index of the source lists but no path could read (messages only)."""
    missing_sample: list[Any] = field(default_factory=list)
    missing_by_session: dict[str, int] = field(default_factory=dict)

    @property
    def gaps(self) -> list[tuple[int | None, int | None]]:
        """``sql_gaps`` with an open end (the bottom or top of the rowid space) as None."""
        return [
            (None if lo == MIN_ROWID else lo, None if hi == MAX_ROWID else hi)
            for lo, hi in self.sql_gaps
        ]

    @property
    def complete(self) -> bool:
        """No sign of a lost row: nothing known missing, and the source's count reached."""
        if self.known_missing:
            return False
        return self.claimed is None or self.recoverable >= self.claimed

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "claimed": self.claimed,
            "sql_rows": self.sql_rows,
            "sql_gaps": [list(g) for g in self.gaps],
            "sql_errors": self.sql_errors,
            "scan_rows": self.scan_rows,
            "scan_only": self.scan_only,
            "invalid": self.invalid,
            "recoverable": self.recoverable,
            "known_missing": self.known_missing,
            "missing_sample": self.missing_sample,
            "missing_by_session": self.missing_by_session,
            "complete": self.complete,
        }


@dataclass
class SalvageInspection:
    """What ``inspect`` (and the first half of ``salvage``) found in the source."""

    source: str
    header: str
    """``valid``, ``notadb`` (the 16-byte magic string is damaged), ``empty`` or ``short``."""
    page_size: int = 0
    pages: int = 0
    wal: WalInfo = field(default_factory=WalInfo)
    hot_journal: bool = False
    sql_error: str | None = None
    """Why SQL could not open the copy at all (None: it could)."""
    schema_error: str | None = None
    """Why the page scanner could not read the whole schema b-tree, if it could not."""
    tables: dict[str, TableReport] = field(default_factory=dict)
    scanner_used: bool = False
    scan: ScanStats | None = None
    unassigned: dict[str, int] = field(default_factory=dict)
    """Decoded rows that fit no canonical table, by the table they resemble (or shape)."""
    messages_sequence: int | None = None
    """The highest message id the source ever assigned (``sqlite_sequence``)."""
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every row the source is known to hold was readable."""
        return all(t.complete for t in self.tables.values())

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "source": self.source,
            "header": self.header,
            "page_size": self.page_size,
            "pages": self.pages,
            "wal": self.wal.as_dict(),
            "hot_journal": self.hot_journal,
            "sql_error": self.sql_error,
            "schema_error": self.schema_error,
            "tables": {name: t.as_dict() for name, t in self.tables.items()},
            "scanner_used": self.scanner_used,
            "scan": self.scan.as_dict() if self.scan is not None else None,
            "unassigned": self.unassigned,
            "messages_sequence": self.messages_sequence,
            "complete": self.complete,
            "notes": self.notes,
        }


@dataclass
class SalvageResult:
    """What ``salvage`` wrote: the source's counts (``before``) and the output's (``after``)."""

    output: str
    before: SalvageInspection
    after: dict[str, int] = field(default_factory=dict)
    placeholders: list[str] = field(default_factory=list)
    """Sessions created for salvaged messages (or child sessions) whose row was lost."""
    rejected: int = 0
    """Salvaged rows the new store refused (a constraint), listed in ``rejected_sample``."""
    rejected_sample: list[dict[str, Any]] = field(default_factory=list)
    skipped_meta: list[str] = field(default_factory=list)
    """``state_meta`` keys not carried over (derived-state markers such as ``fts_stale``)."""
    counters_fixed: int = 0
    """Sessions whose message/tool-call counters were corrected to the salvaged rows."""
    integrity: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "output": self.output,
            "before": self.before.as_dict(),
            "after": self.after,
            "placeholders": self.placeholders,
            "rejected": self.rejected,
            "rejected_sample": self.rejected_sample,
            "skipped_meta": self.skipped_meta,
            "counters_fixed": self.counters_fixed,
            "integrity": self.integrity,
            "seconds": round(self.seconds, 3),
        }
