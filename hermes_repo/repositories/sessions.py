"""Sessions: create, read, list, end.

Text fields (``source``, ``user_id``, ``model``, ``title``, ``end_reason``) are stored
with the codec's reversible text encoding (:func:`hermes_repo.codec.encode_text`), so a
title holding a lone surrogate is stored and comes back exactly; rows read through this
repository are decoded (without marking them changed). Times are checked to be
plausible epoch seconds (:func:`hermes_repo.codec.check_timestamp`).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from ..backend import backend_of
from ..codec import TEXT_MARK, check_timestamp, decode_text, dumps, encode_text, loads
from ..errors import IntegrityViolation, NotFoundError
from ..identity import Identities
from ..ids import check_session_id, new_session_id, validate_session_id
from ..models import AgentSession, sessions_table

__all__ = ["SessionRepository"]

_sessions = sessions_table
_TEXT_FIELDS = ("source", "user_id", "model", "title", "end_reason")


def _text(field: str, value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise IntegrityViolation(
            f"session {field} must be a string or None, got {type(value).__name__}; pass text"
        )
    return encode_text(value)


def _decoded(row: AgentSession) -> AgentSession:
    # The identity map hands the same object out again, and a decoded value may itself
    # start with the mark: a value this function produced is never decoded twice.
    done: dict[str, str] = row.__dict__.setdefault("_hermes_decoded_text", {})
    for field in _TEXT_FIELDS:
        value = getattr(row, field)
        if value.__class__ is str and value.startswith(TEXT_MARK) and value is not done.get(field):
            plain = decode_text(value)
            done[field] = plain
            # set_committed_value: what the row holds, not a change for a flush to write.
            set_committed_value(row, field, plain)
    return row


class SessionRepository:
    """Reads and writes ``sessions`` rows inside the caller's transaction.

    ``db`` runs the Core statements (a connection or an ORM session); the methods that
    return mapped :class:`AgentSession` objects use ``orm`` (default: ``db`` itself when
    it is an ORM session, else a session joined to the connection's transaction).
    ``ids`` (the unit of work's) gives generated session ids that stay the same on
    every attempt of a write, and records the sessions created.
    """

    def __init__(
        self,
        db: Connection | Session,
        orm: Callable[[], Session] | None = None,
        *,
        ids: Identities | None = None,
    ) -> None:
        self._db = db
        self._ids = ids
        self._orm_factory = orm
        self._orm_session: Session | None = db if isinstance(db, Session) else None

    @property
    def _session(self) -> Session:
        if self._orm_session is None:
            if self._orm_factory is not None:
                self._orm_session = self._orm_factory()
            else:
                assert isinstance(self._db, Connection)
                self._orm_session = Session(bind=self._db)
        return self._orm_session

    def create(
        self,
        source: str = "cli",
        *,
        id: str | None = None,
        user_id: str | None = None,
        model: str | None = None,
        title: str | None = None,
        parent_session_id: str | None = None,
        started_at: float | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> str:
        """Create a session and return its id (generated when not given).

        ``extra`` holds fields that have no column, kept as a JSON object.
        """
        ids = self._ids
        if id is not None:
            sid = validate_session_id(id)
        elif ids is not None:
            # The same id on every attempt of the write: a retry after a commit whose
            # reply was lost must find this session, not create a second one.
            sid = ids.take("session", new_session_id)
        else:
            sid = new_session_id()
        if parent_session_id is not None:
            validate_session_id(parent_session_id)
        values = {
            "source": _text("source", source),
            "user_id": _text("user_id", user_id),
            "model": _text("model", model),
            "title": _text("title", title),
            "started_at": (
                time.time()
                if started_at is None
                else check_timestamp(started_at, "session started_at")
            ),
        }
        if values["source"] is None:
            raise IntegrityViolation("session source must be a string; pass e.g. 'cli'")
        if self.exists(sid):
            raise IntegrityViolation(f"session {sid!r} already exists")
        self._db.execute(
            insert(_sessions).values(
                id=sid,
                parent_session_id=parent_session_id,
                extra=dumps(dict(extra)) if extra else None,
                **values,
            )
        )
        if ids is not None:
            ids.session_created(sid)
        return sid

    def update(
        self,
        session_id: str,
        *,
        title: str | None = None,
        ended_at: float | None = None,
        end_reason: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        """Set these fields of an existing session to the given values (None clears).

        Used to bring a session up to date with a later copy of its source (an import).
        """
        result = self._db.execute(
            update(_sessions)
            .where(_sessions.c.id == session_id)
            .values(
                title=_text("title", title),
                ended_at=None if ended_at is None else check_timestamp(ended_at, "ended_at"),
                end_reason=_text("end_reason", end_reason),
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                extra=dumps(dict(extra)) if extra else None,
            )
        )
        if result.rowcount == 0:  # type: ignore[attr-defined]
            raise NotFoundError(f"session {session_id!r} does not exist")

    def ensure(
        self,
        session_id: str,
        *,
        source: str = "cli",
        started_at: float | None = None,
        title: str | None = None,
    ) -> bool:
        """Create the session if it is missing (with ``title``); True when it was created."""
        if self.exists(session_id):
            return False
        # Another host may create it between the check and the insert (the first flush
        # of a session on several hosts at once): the backend settles that race.
        return backend_of(self._db).insert_racing(
            self._db,
            lambda: self.create(source, id=session_id, started_at=started_at, title=title),
            lambda: self.exists(session_id),
        )

    def exists(self, session_id: str) -> bool:
        stmt = select(_sessions.c.id).where(_sessions.c.id == check_session_id(session_id))
        return self._db.execute(stmt).first() is not None

    def get(self, session_id: str) -> AgentSession | None:
        found = self._session.get(AgentSession, check_session_id(session_id))
        return None if found is None else _decoded(found)

    def require(self, session_id: str) -> AgentSession:
        found = self.get(session_id)
        if found is None:
            raise NotFoundError(
                f"session {session_id!r} does not exist; "
                "list sessions with `hermes-repo sessions list`"
            )
        return found

    def list(
        self, *, limit: int = 50, offset: int = 0, source: str | None = None
    ) -> list[AgentSession]:
        """Sessions, most recently started first."""
        stmt = select(AgentSession).order_by(AgentSession.started_at.desc(), AgentSession.id.desc())
        if source is not None:
            stmt = stmt.where(AgentSession.source == encode_text(source))  # as stored
        return [_decoded(r) for r in self._session.scalars(stmt.limit(limit).offset(offset))]

    def count(self) -> int:
        return int(self._db.execute(select(func.count()).select_from(_sessions)).scalar_one())

    def end(self, session_id: str, reason: str | None = None, *, at: float | None = None) -> None:
        ended = time.time() if at is None else check_timestamp(at, "session ended_at")
        result = self._db.execute(
            update(_sessions)
            .where(_sessions.c.id == session_id)
            .values(ended_at=ended, end_reason=_text("end_reason", reason))
        )
        if result.rowcount == 0:  # type: ignore[attr-defined]
            raise NotFoundError(f"session {session_id!r} does not exist")

    def source_and_extra(
        self, session_id: str, *, lock: bool = False
    ) -> tuple[str, dict[str, Any]] | None:
        """The session's source and ``extra`` (``{}`` when it has none), or None when
        the store has no such session.

        With ``lock`` the row stays locked against other writers until the unit ends
        (``FOR UPDATE`` on a server, where two units may run at once under READ
        COMMITTED and the second then reads the row the first committed; a SQLite unit
        holds the write lock already): what the caller decides on it and writes back
        with :meth:`update` is a compare-and-set.
        """
        stmt = select(_sessions.c.source, _sessions.c.extra).where(
            _sessions.c.id == check_session_id(session_id)
        )
        row = self._db.execute(stmt.with_for_update() if lock else stmt).first()
        if row is None:
            return None
        source, extra = row
        return decode_text(source), (loads(extra) if extra is not None else {})

    def extras_of_source(self, source: str) -> builtins.list[tuple[str, dict[str, Any]]]:
        """``(id, extra)`` of every session of ``source`` that has an ``extra``, in id
        order: one statement, for a caller that keeps its own records there."""
        stmt = (
            select(_sessions.c.id, _sessions.c.extra)
            .where(_sessions.c.source == encode_text(source), _sessions.c.extra.is_not(None))
            .order_by(_sessions.c.id)
        )
        return [(sid, loads(extra)) for sid, extra in self._db.execute(stmt)]

    def title_if_untitled(self, session_id: str, title: str) -> bool:
        """Give the session ``title`` when it has none (a session a spool replay created
        knows only its source); True when it was set. Touches no other field."""
        result = self._db.execute(
            update(_sessions)
            .where(_sessions.c.id == session_id, _sessions.c.title.is_(None))
            .values(title=_text("title", title))
        )
        return bool(result.rowcount)  # type: ignore[attr-defined]
