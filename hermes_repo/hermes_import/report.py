"""What an import of a Hermes ``state.db`` found and did: counts per table and warnings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["HermesImportReport", "TableCounts"]


@dataclass
class TableCounts:
    """Rows of one source table: read, imported, already present, values kept in extra,
    and present rows updated."""

    read: int = 0
    imported: int = 0
    already_present: int = 0
    kept_in_extra: int = 0
    #: Rows already present whose active state followed the source (a later /undo).
    updated: int = 0
    #: Rows already present whose values the source changed in place (an edit), now
    #: applied; the previous row is kept as an archived audit row.
    edited: int = 0
    #: Active rows imported earlier that the source no longer holds (Hermes deleted or
    #: rewrote them: /retry, /undo, /compress), now archived with the reason.
    archived: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "read": self.read,
            "imported": self.imported,
            "already_present": self.already_present,
            "kept_in_extra": self.kept_in_extra,
            "updated": self.updated,
            "edited": self.edited,
            "archived": self.archived,
        }


@dataclass
class HermesImportReport:
    """What an import of a Hermes ``state.db`` found and did (or, dry, would do)."""

    source: str
    schema_version: int | None = None
    dry_run: bool = False
    tables: dict[str, TableCounts] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: Hermes session id -> the id it is stored under, for ids this store's rule refuses.
    mapped_sessions: dict[str, str] = field(default_factory=dict)
    #: Tables of the source that could not be read and were skipped (with a warning).
    skipped_tables: list[str] = field(default_factory=list)

    def table(self, name: str) -> TableCounts:
        return self.tables.setdefault(name, TableCounts())

    @property
    def sessions(self) -> TableCounts:
        return self.table("sessions")

    @property
    def messages(self) -> TableCounts:
        return self.table("messages")

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": "hermes-db",
            "schema_version": self.schema_version,
            "dry_run": self.dry_run,
            "tables": {name: counts.as_dict() for name, counts in self.tables.items()},
            "mapped_sessions": dict(self.mapped_sessions),
            "skipped_tables": list(self.skipped_tables),
            "warnings": list(self.warnings),
        }
