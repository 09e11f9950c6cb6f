"""Session rows as listings and exports show them: :class:`SessionInfo`.

The queries are the session repository's, run on the caller's connection: the store
runs them in a plain read transaction (:meth:`StateStore.list_sessions`,
:meth:`StateStore.get_session`), so listing never takes the write lock an agent needs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from sqlalchemy.engine import Connection

from ..codec import INVALID_KEY, invalid_reason, loads, raw_value
from ..models import AgentSession
from ..repositories import SessionRepository

__all__ = ["SessionInfo", "get_session", "list_sessions"]


@dataclass(frozen=True)
class SessionInfo:
    """One row of ``sessions``: every column, text decoded, ``extra`` parsed."""

    id: str
    source: str
    user_id: str | None
    model: str | None
    title: str | None
    parent_session_id: str | None
    started_at: float
    ended_at: float | None
    end_reason: str | None
    message_count: int
    tool_call_count: int
    input_tokens: int
    output_tokens: int
    #: Fields with no column (an imported Hermes session's billing, workspace...).
    extra: dict[str, Any] | None

    @classmethod
    def from_row(cls, row: AgentSession) -> SessionInfo:
        """The info of a mapped row (as the session repository returns it)."""
        values = {f.name: getattr(row, f.name) for f in fields(cls)}
        values["extra"] = None if row.extra is None else _extra(row.extra)
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every column (None included), in column order."""
        return asdict(self)


def _extra(stored: Any) -> dict[str, Any]:
    """A session's ``extra``; one the store cannot read (written by another tool or by
    hand) is kept as ``{"$invalid": {"extra": {"raw": ..., "reason": ...}}}``, the
    shape a message's unreadable value takes (:data:`~hermes_repo.codec.INVALID_KEY`),
    so one such row never fails a listing."""
    try:
        value = loads(stored)
    except (ValueError, TypeError):
        value = None
    if isinstance(value, dict):
        return value
    reason = invalid_reason("extra", stored) or "not a JSON object"
    return {INVALID_KEY: {"extra": {"raw": raw_value(stored), "reason": reason}}}


def list_sessions(
    conn: Connection, *, limit: int = 50, offset: int = 0, source: str | None = None
) -> list[SessionInfo]:
    """Sessions, most recently started first (``source`` filters on the exact value)."""
    rows = SessionRepository(conn).list(limit=limit, offset=offset, source=source)
    return [SessionInfo.from_row(row) for row in rows]


def get_session(conn: Connection, session_id: str) -> SessionInfo:
    """One session; :class:`~hermes_repo.errors.NotFoundError` (naming the command that
    lists sessions) when there is none with that id."""
    return SessionInfo.from_row(SessionRepository(conn).require(session_id))
