"""Entries: message rows found by their uid across the sessions of one source.

A framework that keeps a conversation as a chain of entries (each row's uid is the
entry's id, its parent named in the row's ``extra``) reaches an entry by its id alone:
a fork's history runs into the rows of the conversation it was forked from. The lookup
is confined to the sessions of the caller's source, each probed through the
``(session_id, uid)`` unique index, so no other session's rows are read or matched.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from ..codec import MESSAGE_COLUMNS, encode_text, row_to_message
from ..models import messages_table, sessions_table

__all__ = ["EntryRepository"]

_messages = messages_table
_sessions = sessions_table
_columns = [_messages.c[name] for name in MESSAGE_COLUMNS]


class EntryRepository:
    """Reads rows by uid inside the caller's transaction."""

    def __init__(self, db: Connection | Session) -> None:
        self._db = db

    def find(self, uids: Collection[str], *, source: str) -> list[tuple[str, dict[str, Any]]]:
        """``(session id, message)`` of every row, active or archived, whose uid is one
        of ``uids`` in a session of ``source``, in row id order (archived rows carry
        ``active: False``, as :meth:`MessageRepository.list
        <hermes_repo.repositories.MessageRepository.list>` returns them)."""
        if not uids:
            return []
        of_source = select(_sessions.c.id).where(_sessions.c.source == encode_text(source))
        stmt = (
            select(_messages.c.session_id, *_columns)
            .where(_messages.c.session_id.in_(of_source), _messages.c.uid.in_(list(uids)))
            .order_by(_messages.c.id)
        )
        return [(row[0], row_to_message(row[1:])) for row in self._db.execute(stmt)]
