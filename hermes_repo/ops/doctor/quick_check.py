"""A read-only ``quick_check`` of the canonical tables: damaged file or damaged index."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...driver_errors import classify
from ...errors import ErrorKind
from ...schema.tables import CANONICAL_TABLES
from .context import (
    CheckResult,
    DoctorContext,
    DoctorReadError,
    Finding,
    JournalFileError,
    file_size,
)
from .fixes import damaged_file_fix

__all__ = ["QuickCheckFacts", "check_quick_check"]


@dataclass
class QuickCheckFacts:
    """``PRAGMA quick_check`` of each canonical table (read-only)."""

    title = "canonical tables"
    tables: dict[str, str]  # table -> "ok", the problems, or why it could not be checked

    @property
    def damaged(self) -> dict[str, str]:
        """The tables that fail the check."""
        return {t: r for t, r in self.tables.items() if r != "ok"}

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return {"tables": dict(self.tables), "ok": not self.damaged}

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        return [(f"quick_check({t})", r) for t, r in self.tables.items()]


def check_quick_check(ctx: DoctorContext) -> CheckResult:
    """``quick_check`` of ``sessions``, ``messages`` and ``state_meta``, read-only.

    These decide between the two kinds of damage: a failing canonical table means the
    file itself is damaged (salvage with ``sessions salvage``; a rebuild would make it
    worse), while damage confined to the FTS tables is the index's, which the repair
    rebuilds. ``schema`` stands for the schema table, read first.
    """
    if not ctx.exists or file_size(ctx.db_path) == 0 or not ctx.header_ok:
        return CheckResult("quick_check", None)
    facts = QuickCheckFacts(tables={})
    try:
        present = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except JournalFileError:
        raise  # reported once, by check_journal
    except DoctorReadError as exc:
        if not _is_damage(exc):
            raise
        facts.tables["schema"] = str(exc)
        present = set()
    for table in CANONICAL_TABLES:
        if table not in present:
            continue  # no schema yet (check_store reports it), or the schema is unreadable
        try:
            result = [str(r[0]) for r in ctx.rows(f"PRAGMA quick_check({table})")]
        except JournalFileError:
            raise  # reported once, by check_journal
        except DoctorReadError as exc:
            if not _is_damage(exc):
                raise
            facts.tables[table] = str(exc)
        else:
            facts.tables[table] = "ok" if result == ["ok"] else "; ".join(result[:3])
    if not facts.damaged:
        return CheckResult("quick_check", facts)
    what = "; ".join(f"{t}: {r}" for t, r in facts.damaged.items())
    finding = Finding(
        "file-damaged",
        "error",
        f"the canonical tables fail quick_check ({what}): the file itself is damaged, "
        "not only the search index, and a repair in place would make it worse",
        damaged_file_fix(ctx),
    )
    return CheckResult("quick_check", facts, [finding])


def _is_damage(exc: DoctorReadError) -> bool:
    """True when a read failed because the file is damaged (not locked, not missing)."""
    cause = exc.__cause__
    return cause is not None and classify(cause) is ErrorKind.CORRUPT
