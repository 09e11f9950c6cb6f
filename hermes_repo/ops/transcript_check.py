"""The operator's view of transcript invariants: check every session, repair on request.

Two invariants make a transcript replayable: role alternation (no two user or two
assistant turns in a row) and tool pairing (each tool result answers an open call of the
assistant turn before it, once). :func:`check_transcripts` counts, for the whole store,
the sessions and active rows that break them, in one read transaction that writes
nothing. :func:`repair_session` applies the durable repair of
:mod:`hermes_repo.transcript.reconcile` to one session and reports what changed;
:func:`repair_transcripts` does that for every session the check flags.

Counts are of *violating rows* as :func:`~hermes_repo.transcript.repair.violations`
reports them. A repair can take out a few more rows than that: dropping an orphan tool
result can make the two user turns around it adjacent, and they merge too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from ..codec import MESSAGE_COLUMNS, row_to_message
from ..errors import NotFoundError
from ..models import messages_table, sessions_table
from ..store import StateStore
from ..transcript.reconcile import ArchivedRow, reconcile_session
from ..transcript.repair import RULES
from .transcript_scan import (
    ALTERNATION_RULES,
    SCAN_SQL,
    TOOL_PAIRING_RULES,
    WHOLE_SQL,
    SessionViolations,
    scan_rows,
)

__all__ = [
    "ALTERNATION_RULES",
    "SCAN_SQL",
    "TOOL_PAIRING_RULES",
    "WHOLE_SQL",
    "SessionRepair",
    "SessionViolations",
    "TranscriptRepairSummary",
    "TranscriptReport",
    "check_transcripts",
    "repair_session",
    "repair_transcripts",
    "scan_rows",
]

_m = messages_table
_s = sessions_table


@dataclass(frozen=True)
class TranscriptReport:
    """Transcript invariants across a store, as one read transaction saw them."""

    sessions_checked: int
    rows_checked: int
    """Active rows read (display-only rows included; they never violate)."""
    sessions: tuple[SessionViolations, ...]
    """The violating sessions, by session id."""

    @property
    def ok(self) -> bool:
        """True when no session violates an invariant."""
        return not self.sessions

    @property
    def sessions_violating(self) -> int:
        """Sessions with at least one violating row."""
        return len(self.sessions)

    @property
    def rows_violating(self) -> int:
        """Violating rows across the store."""
        return sum(s.violating_rows for s in self.sessions)

    @property
    def by_rule(self) -> dict[str, int]:
        """Violating rows per rule, every rule listed."""
        total: Counter[str] = Counter()
        for s in self.sessions:
            total.update(s.by_rule)
        return {rule: total.get(rule, 0) for rule in RULES}

    @property
    def alternation(self) -> tuple[int, int]:
        """(sessions, rows) breaking role alternation."""
        hit = [s.alternation_rows for s in self.sessions if s.alternation_rows]
        return len(hit), sum(hit)

    @property
    def tool_pairing(self) -> tuple[int, int]:
        """(sessions, rows) breaking tool pairing."""
        hit = [s.tool_pairing_rows for s in self.sessions if s.tool_pairing_rows]
        return len(hit), sum(hit)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (what ``sessions repair --check-only --json`` prints)."""
        alt, pairing = self.alternation, self.tool_pairing
        return {
            "ok": self.ok,
            "sessions_checked": self.sessions_checked,
            "rows_checked": self.rows_checked,
            "sessions_violating": self.sessions_violating,
            "rows_violating": self.rows_violating,
            "alternation": {"sessions": alt[0], "rows": alt[1]},
            "tool_pairing": {"sessions": pairing[0], "rows": pairing[1]},
            "by_rule": self.by_rule,
            "sessions": [s.as_dict() for s in self.sessions],
        }


def _scan(conn: Connection) -> tuple[int, int, list[SessionViolations]]:
    sessions_checked = int(conn.execute(select(func.count()).select_from(_s)).scalar_one())
    # Only what violations() reads: decoding whole messages would cost far more.
    stmt = (
        select(_m.c.session_id, _m.c.role, _m.c.tool_calls, _m.c.tool_call_id, _m.c.display_only)
        .where(_m.c.active == 1)
        .order_by(_m.c.session_id, _m.c.id)
    )
    rows_checked, found = scan_rows(conn.execute(stmt), lambda sid: _whole(conn, sid))
    return sessions_checked, rows_checked, found


def _whole(conn: Connection, session_id: str) -> list[dict[str, Any]]:
    stmt = (
        select(*(_m.c[name] for name in MESSAGE_COLUMNS))
        .where(_m.c.session_id == session_id, _m.c.active == 1)
        .order_by(_m.c.id)
    )
    return [row_to_message(row) for row in conn.execute(stmt)]


def check_transcripts(store: StateStore) -> TranscriptReport:
    """Count the sessions and active rows that break alternation or tool pairing.

    Read-only: one read transaction, no lock taken, nothing written.
    """
    sessions_checked, rows_checked, found = store.read(_scan)
    return TranscriptReport(sessions_checked, rows_checked, tuple(found))


@dataclass(frozen=True)
class SessionRepair:
    """What a durable repair of one session changed."""

    session_id: str
    repairs: int
    """Rows taken out of the replay (each one archived)."""
    updated_ids: tuple[int, ...]
    """Surviving rows that absorbed merged content."""
    archived: tuple[ArchivedRow, ...]
    rows_written: int
    counters_before: tuple[int, int] | None = None
    counters_after: tuple[int, int] | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "session_id": self.session_id,
            "repairs": self.repairs,
            "updated_ids": list(self.updated_ids),
            "archived": [
                {"id": a.id, "rule": a.rule, "survivor_id": a.survivor_id, "reason": a.reason}
                for a in self.archived
            ],
            "rows_written": self.rows_written,
            "counters_before": _counters(self.counters_before),
            "counters_after": _counters(self.counters_after),
        }


def _counters(pair: tuple[int, int] | None) -> dict[str, int] | None:
    if pair is None:
        return None
    return {"message_count": pair[0], "tool_call_count": pair[1]}


def repair_session(store: StateStore, session_id: str) -> SessionRepair:
    """Repair one session's transcript durably and report what changed.

    Raises :class:`NotFoundError` for an unknown session. A clean session changes nothing
    (and takes no write lock).
    """
    exists = store.read(
        lambda s: s.execute(select(_s.c.id).where(_s.c.id == session_id)).first() is not None
    )
    if not exists:
        raise NotFoundError(
            f"session {session_id!r} does not exist; list sessions with `hermes-repo sessions list`"
        )
    r = reconcile_session(store, session_id)
    return SessionRepair(
        session_id,
        r.repairs,
        r.updated_ids,
        r.archived,
        r.rows_written,
        r.counters_before,
        r.counters_after,
    )


@dataclass(frozen=True)
class TranscriptRepairSummary:
    """The outcome of repairing every violating session of a store."""

    checked: TranscriptReport
    """The check that chose the sessions (before the repair)."""
    repaired: tuple[SessionRepair, ...] = field(default=())

    @property
    def sessions_repaired(self) -> int:
        """Sessions where this run wrote a repair."""
        return sum(1 for r in self.repaired if r.repairs)

    @property
    def repairs(self) -> int:
        """Rows archived out of the replay, across the store."""
        return sum(r.repairs for r in self.repaired)

    @property
    def rows_updated(self) -> int:
        """Surviving rows rewritten with merged content."""
        return sum(len(r.updated_ids) for r in self.repaired)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "sessions_violating": self.checked.sessions_violating,
            "rows_violating": self.checked.rows_violating,
            "sessions_repaired": self.sessions_repaired,
            "repairs": self.repairs,
            "rows_updated": self.rows_updated,
            "sessions": [r.as_dict() for r in self.repaired],
        }


def repair_transcripts(store: StateStore) -> TranscriptRepairSummary:
    """Check the store, then durably repair each session that violates an invariant.

    Each session is repaired in its own write transaction, so a long run never holds
    the write lock for more than one session at a time.
    """
    report = check_transcripts(store)
    repaired = tuple(repair_session(store, s.session_id) for s in report.sessions)
    return TranscriptRepairSummary(report, repaired)
