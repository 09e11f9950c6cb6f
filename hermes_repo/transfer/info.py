"""A session's row as listings and exports show it: :class:`SessionInfo`.

Kept apart from the queries (:mod:`.catalog`, built on the ORM's session repository):
the read commands build it from the rows they read on the driver's cursor, without
loading the ORM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from ..codec import INVALID_KEY, invalid_reason, loads, raw_value

if TYPE_CHECKING:
    from ..models import AgentSession

__all__ = ["SessionInfo", "session_extra"]


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
        values["extra"] = None if row.extra is None else session_extra(row.extra)
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every column (None included), in column order."""
        return asdict(self)


def session_extra(stored: Any) -> dict[str, Any]:
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
