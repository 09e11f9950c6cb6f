"""The audit trail of a repair: rows archived, never deleted, and copies of rows as
they were before a repair rewrote them.

A row a repair removes is archived with a reason naming the rule and the survivor
(:func:`archive_reason`); before a survivor is rewritten its row as it was is copied
into an archived row of the same session (:func:`keep_original`, reason
``repair_original of #id``). Used by the repairing load
(:mod:`hermes_repo.transcript.reconcile`), the value repair and the importer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from sqlalchemy import String, insert, literal, select
from sqlalchemy.engine import Connection

from ..codec import new_uid
from ..errors import ReconcileConflict
from ..models import messages_table
from .repair import RULE_UNMERGEABLE_ASSISTANT

__all__ = [
    "ORIGINAL_REASON",
    "ArchivedRow",
    "archive_reason",
    "expect_rows",
    "keep_copy",
    "keep_original",
    "original_reason",
]

ORIGINAL_REASON: Final = "repair_original"
"""The ``archive_reason`` prefix of a survivor's row as it was before a repair rewrote it."""

_messages = messages_table


@dataclass(frozen=True)
class ArchivedRow:
    """A row the repair took out of the replay (kept as an inactive audit row)."""

    id: int
    rule: str
    """One of :data:`hermes_repo.transcript.repair.RULES`."""
    survivor_id: int | None
    """Row id of the row it was merged into; None for a dropped tool result."""

    @property
    def reason(self) -> str:
        """The ``archive_reason`` stored on the row."""
        return archive_reason(self.rule, self.survivor_id)


def archive_reason(rule: str, survivor_id: int | None) -> str:
    """The audit text of an archived row: the rule, and the survivor for a merge."""
    if survivor_id is None:
        return rule
    if rule == RULE_UNMERGEABLE_ASSISTANT:
        return f"{rule} after #{survivor_id}"
    return f"{rule} into #{survivor_id}"


def original_reason(survivor_id: int) -> str:
    """The audit text of the archived copy of a survivor's row before a repair."""
    return f"{ORIGINAL_REASON} of #{survivor_id}"


def expect_rows(rowcount: int, expected: int, session_id: str) -> int:
    """``rowcount``, when a repair's statement changed the ``expected`` rows; else
    :class:`ReconcileConflict` (the transaction rolls back)."""
    if rowcount != expected:
        # Impossible while the transaction guards what it read; if it happens, writing
        # the rest would leave a half-applied repair, so the transaction rolls back.
        raise ReconcileConflict(
            f"repair of session {session_id!r} expected to change {expected} rows, "
            f"changed {rowcount}; nothing was written. Load the session again"
        )
    return rowcount


# Every column but the row's identity and archive state, copied as stored.
_KEPT_COLUMNS: Final = tuple(
    c.name
    for c in _messages.columns
    if c.name not in ("id", "uid", "active", "archived_at", "archive_reason")
)


def keep_original(conn: Connection, session_id: str, row_id: int, now: float) -> int:
    """Copy the active row ``row_id`` as it is now into a new archived row (reason
    ``repair_original of #id``); its id."""
    return keep_copy(conn, session_id, row_id, original_reason(row_id), now)


def keep_copy(conn: Connection, session_id: str, row_id: int, reason: str, now: float) -> int:
    """Copy the active row ``row_id`` as it is now into a new archived row of the same
    session with ``reason`` (the audit trail of a row about to be rewritten); its id.

    Copied inside the database (INSERT ... SELECT), so every column is kept exactly as
    stored, whatever the codec would make of it.
    """
    copied = select(
        *(_messages.c[name] for name in _KEPT_COLUMNS),
        literal(new_uid(), String),
        literal(0),
        literal(now),
        literal(reason, String),
    ).where(
        _messages.c.id == row_id,
        _messages.c.session_id == session_id,
        _messages.c.active == 1,
    )
    stmt = (
        insert(_messages)
        .from_select([*_KEPT_COLUMNS, "uid", "active", "archived_at", "archive_reason"], copied)
        .returning(_messages.c.id)
    )
    found = conn.execute(stmt).scalars().all()
    expect_rows(len(found), 1, session_id)
    return int(found[0])
