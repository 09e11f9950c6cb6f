"""The transcript scan itself: which active rows break role alternation or tool pairing.

Split from :mod:`hermes_repo.ops.transcript_check` so that a reader on a raw DB-API
connection (the doctor) runs the same scan without loading the store, the ORM models
or the repair machinery; ``transcript_check`` re-exports every name here.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..codec import MESSAGE_COLUMNS
from ..transcript.repair import (
    RULE_DUPLICATE_TOOL,
    RULE_MERGE_ASSISTANT,
    RULE_MERGE_USER,
    RULE_ORPHAN_TOOL,
    RULE_UNMERGEABLE_ASSISTANT,
    violations,
)

__all__ = [
    "ALTERNATION_RULES",
    "SCAN_SQL",
    "TOOL_PAIRING_RULES",
    "WHOLE_SQL",
    "SessionViolations",
    "scan_rows",
]

ALTERNATION_RULES = (RULE_MERGE_USER, RULE_MERGE_ASSISTANT, RULE_UNMERGEABLE_ASSISTANT)
"""Rules of role alternation: two user or two assistant turns in a row."""
TOOL_PAIRING_RULES = (RULE_ORPHAN_TOOL, RULE_DUPLICATE_TOOL)
"""Rules of tool pairing: a result that answers no open call, or answers one twice."""


@dataclass(frozen=True)
class SessionViolations:
    """One session whose active transcript breaks an invariant."""

    session_id: str
    active_rows: int
    by_rule: dict[str, int]
    """Violating rows per rule (only rules that occur)."""

    @property
    def violating_rows(self) -> int:
        """Rows that break any invariant."""
        return sum(self.by_rule.values())

    @property
    def alternation_rows(self) -> int:
        """Rows that break role alternation."""
        return sum(self.by_rule.get(r, 0) for r in ALTERNATION_RULES)

    @property
    def tool_pairing_rows(self) -> int:
        """Rows that break tool pairing."""
        return sum(self.by_rule.get(r, 0) for r in TOOL_PAIRING_RULES)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "session_id": self.session_id,
            "active_rows": self.active_rows,
            "violating_rows": self.violating_rows,
            "alternation_rows": self.alternation_rows,
            "tool_pairing_rows": self.tool_pairing_rows,
            "by_rule": dict(self.by_rule),
        }


def _calls(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        # A row salvaged from a damaged file may hold broken JSON: it then pairs with
        # nothing, which is what a replay of it would get too.
        return None


SCAN_SQL = (
    "SELECT session_id, role, tool_calls, tool_call_id, display_only FROM messages "
    "WHERE active = 1 ORDER BY session_id, id"
)
"""The rows :func:`scan_rows` reads, for a caller on a raw DB-API connection."""
WHOLE_SQL = (
    f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages "
    "WHERE session_id = ? AND active = 1 ORDER BY id"
)
"""One session's active rows in :data:`MESSAGE_COLUMNS` order (SQLite parameters)."""


def scan_rows(
    rows: Iterable[Any], whole: Callable[[str], list[dict[str, Any]]]
) -> tuple[int, list[SessionViolations]]:
    """The violations in ``rows`` (:data:`SCAN_SQL`'s columns and order): the rows
    checked and each violating session; ``whole(session_id)`` loads a session's
    messages when only its whole rows can tell (a possible merge)."""
    rows_checked = 0
    found: list[SessionViolations] = []
    for sid, group in itertools.groupby(rows, key=lambda r: r[0]):
        transcript = [
            {
                "role": role,
                "tool_calls": _calls(calls) if role == "assistant" else None,
                "tool_call_id": call_id,
                "display_only": bool(display),
            }
            for _sid, role, calls, call_id, display in group
        ]
        rows_checked += len(transcript)
        hits = violations(transcript)
        if any(rule in ALTERNATION_RULES for _index, rule in hits):
            # Whether two same-role turns merge depends on their speakers and content
            # shapes: only these (rare) sessions are read whole.
            hits = violations(whole(str(sid)))
        if hits:
            by_rule = Counter(rule for _index, rule in hits)
            found.append(SessionViolations(str(sid), len(transcript), dict(by_rule)))
    return rows_checked, found
