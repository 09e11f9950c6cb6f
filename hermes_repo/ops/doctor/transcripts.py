"""Transcripts that break role alternation or tool pairing: what `sessions repair` tidies.

The same scan as ``sessions repair --check-only`` (:func:`scan_rows`), read through the
doctor's read-only connection, so the two report the same sessions. It is a section of
facts, not a finding: such rows are what agents write every day (two user turns in a
row), a repairing load (``load_conversation(repair=True)``, the framework doors) fixes
them as it reads, and nothing about the store is broken. The doctor's exit code stays
about the store; ``sessions repair --check-only`` exits 1 when a repair would change
anything, transcripts included.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...codec import row_to_message
from ..transcript_scan import SCAN_SQL, WHOLE_SQL, SessionViolations, scan_rows
from .context import CheckResult, DoctorContext, file_size

__all__ = ["TranscriptFacts", "check_transcripts"]

#: Sessions listed in the report (all are counted).
MAX_LISTED = 10


@dataclass
class TranscriptFacts:
    """How many active rows were checked, and the sessions that violate a rule."""

    title = "transcripts"
    rows_checked: int = 0
    violating: list[SessionViolations] = field(default_factory=list)

    def note(self) -> str | None:
        """What the report says of these sessions: a note, not a finding (nothing to do),
        or None when none violates."""
        found = len(self.violating)
        if not found:
            return None
        return (
            f"{found} session(s) break role alternation or tool pairing; a repairing load "
            "tidies them when it reads them (or `hermes-repo sessions repair` now): "
            "nothing to do"
        )

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return {
            "rows_checked": self.rows_checked,
            "sessions_violating": len(self.violating),
            "sessions": [v.session_id for v in self.violating[:MAX_LISTED]],
        }

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        found = len(self.violating)
        verdict = (
            f"{found} session(s), tidied when read: nothing to do" if found else "none violates"
        )
        out = [("checked", f"{self.rows_checked} active row(s)"), ("violations", verdict)]
        out += [("session", v.session_id) for v in self.violating[:MAX_LISTED]]
        return out


def check_transcripts(ctx: DoctorContext) -> CheckResult:
    """Role alternation and tool pairing of every session (SQLite stores)."""
    if not ctx.exists or file_size(ctx.db_path) == 0 or not ctx.header_ok:
        return CheckResult("transcripts", None)
    if any(f.code == "file-damaged" for f in ctx.findings):
        return CheckResult("transcripts", None)  # the salvage comes first
    tables = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"messages", "sessions"} <= tables:
        return CheckResult("transcripts", None)  # no schema yet: check_store reports it

    def whole(session_id: str) -> list[dict[str, Any]]:
        return [row_to_message(row) for row in ctx.rows(WHOLE_SQL, (session_id,))]

    rows_checked, found = scan_rows(ctx.rows(SCAN_SQL), whole)
    return CheckResult("transcripts", TranscriptFacts(rows_checked, found))
