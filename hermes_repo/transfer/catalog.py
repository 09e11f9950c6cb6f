"""Session rows as listings and exports show them: :class:`SessionInfo`.

The queries are the session repository's, run on the caller's connection: the store
runs them in a plain read transaction (:meth:`StateStore.list_sessions`,
:meth:`StateStore.get_session`), so listing never takes the write lock an agent needs.
"""

from __future__ import annotations

from sqlalchemy.engine import Connection

from ..repositories import SessionRepository
from .info import SessionInfo

__all__ = ["SessionInfo", "get_session", "list_sessions"]


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
