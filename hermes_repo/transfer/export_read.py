"""Reading one session for export: the row and its replay in one read transaction.

Apart from :mod:`.export` (what an export is and how it is written), which the CLI's
quick reader loads without SQLAlchemy: this module needs the repositories.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import HermesRepoError
from ..ids import check_session_id
from ..repositories import MessageRepository
from . import catalog
from .export import EXPORT_FORMATS, SessionExport

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from ..core import WriteCore
    from .catalog import SessionInfo

__all__ = ["export_session", "read_export"]


def read_export(store: WriteCore, session_id: str, fmt: str = "jsonl") -> SessionExport:
    """Read session ``session_id`` for export in ``fmt`` (``jsonl`` or ``markdown``).

    Raises :class:`~hermes_repo.errors.NotFoundError` when there is no such session.
    """
    if fmt not in EXPORT_FORMATS:
        raise HermesRepoError(
            f"unknown export format {fmt!r}; pass one of {', '.join(EXPORT_FORMATS)}"
        )
    check_session_id(session_id)

    def read(conn: Connection) -> tuple[SessionInfo, list[dict[str, Any]]]:
        # The row and the replay in one read transaction: the export is one moment.
        return catalog.get_session(conn, session_id), MessageRepository(conn).list(session_id)

    info, messages = store.read(read)
    return SessionExport(info, messages, fmt)


def export_session(store: WriteCore, session_id: str, fmt: str = "jsonl") -> str:
    """The export of session ``session_id`` as one string (see :func:`read_export`)."""
    return read_export(store, session_id, fmt).text()
