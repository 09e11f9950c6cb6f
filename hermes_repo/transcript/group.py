"""Group commit of a flush: a call's new messages in one transaction, else one each.

A transcript flush usually carries several new messages (a tool call, its result, the
answer). Writing them in one transaction costs one commit instead of one per message:
SQLite's commit (the WAL frames, both FTS indexes flushing their pending terms) is most
of the cost of a small append. :class:`SessionWrites` writes the group as one unit and
falls back to one transaction per message only when the group failed in a way that one
message can cause, so a single bad message never costs the others their place in the
database:

* a constraint the codec could not see (a uid stored meanwhile by another process, which
  the per-message path recognises as durable), a full disk or an I/O error (a big
  message may need pages the others do not; neither is retried, so the fallback costs
  one failed attempt before the spool), any other error a row can cause;
* never after a lock that outlasted the budget (the group already waited the whole
  budget: a locked database spools promptly, not after a second budget), structural
  damage (the file is quarantined: no more writes at all) or full-text damage the
  write core could not detach.

The fallback stops at the first message that fails: the caller spools that one and
every later one, in order, exactly as a flush without groups does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.engine import Connection

from ..codec import message_to_row, tool_call_count
from ..database import WriteCore
from ..driver_errors import classify, describe
from ..errors import ErrorKind, IntegrityViolation, NotFoundError, UidConflictError
from ..models import messages_table
from ..retry import RetryPolicy
from ..uow import UnitOfWork

__all__ = ["ONE_MESSAGE_KINDS", "SessionWrites"]

log = logging.getLogger("hermes_repo.transcript")

#: Failure kinds one message of a group can cause: after them the group is written
#: again one message per transaction. TRANSIENT (the budget is spent), CORRUPT (the
#: file is quarantined) and FTS (the index could not be detached) are never retried.
ONE_MESSAGE_KINDS = frozenset({ErrorKind.CONSTRAINT, ErrorKind.DISK, ErrorKind.OTHER})


@dataclass(frozen=True)
class SessionWrites:
    """The database side of one session's flush: commit new messages, as one group when
    there are several."""

    store: WriteCore
    session_id: str
    policy: RetryPolicy
    source: str

    def write(
        self,
        messages: list[dict[str, Any]],
        committed: set[str],
        rows: dict[str, dict[str, Any]] | None = None,
    ) -> Exception | None:
        """Commit ``messages`` (none of them in ``committed``) in list order and add each
        committed uid to ``committed``; returns the failure that stopped the writes
        (None when every message is committed). Never raises for database trouble.
        ``rows`` (by uid) are the rows ``message_to_row`` made of them, when the caller
        made them already: the group writes those."""
        if len(messages) > 1:
            try:
                self.write_group(messages, rows)
            except Exception as exc:  # classified here, reported by the caller
                if classify(exc) not in ONE_MESSAGE_KINDS:
                    return exc
                log.info(
                    "transcript of session %s: the group of %d messages failed (%s: %s); "
                    "writing them one per transaction",
                    self.session_id,
                    len(messages),
                    classify(exc).value,
                    describe(exc),
                )
            else:
                committed.update(m["uid"] for m in messages)
                return None
        for message in messages:
            try:
                self.write_one(message)
            except Exception as exc:
                return exc
            committed.add(message["uid"])
        return None

    def write_group(
        self,
        messages: list[dict[str, Any]],
        rows: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """All of ``messages`` in one transaction, creating the session when missing;
        ``rows`` (by uid), when given, are their rows as ``message_to_row`` made them."""
        sid = self.session_id
        if rows is None:
            rows = {}
        made = [rows.get(m["uid"]) for m in messages]
        if any(row is None for row in made):
            made = [message_to_row(sid, m) for m in messages]
        batch = cast(list[dict[str, Any]], made)
        calls = sum(tool_call_count(m) for m in messages)

        def first_messages(uow: UnitOfWork) -> int:
            # The session row is missing: create it and append the group in one unit.
            uow.sessions.ensure(sid, source=self.source, started_at=messages[0]["timestamp"])
            return uow.messages.append_rows(sid, batch, calls)

        try:
            self.store.append_rows(sid, batch, calls, policy=self.policy)
        except NotFoundError:
            self.store.write(first_messages, self.policy)

    def write_one(self, message: dict[str, Any]) -> None:
        """One message in its own transaction, creating the session when missing."""
        sid = self.session_id
        store = self.store

        def first_message(uow: UnitOfWork) -> int:
            # The session row is missing: create it and append in one unit.
            uow.sessions.ensure(sid, source=self.source, started_at=message["timestamp"])
            return uow.messages.append(sid, message)

        try:
            try:
                store.append_message(sid, message, policy=self.policy)
            except NotFoundError:
                store.write(first_message, self.policy)
        except UidConflictError:
            raise  # the uid is stored for another message: this one is not durable
        except IntegrityViolation:
            # The uid is already stored (another process replayed our spool file
            # first): the message is durable, which is all a flush promises.
            if self.uid_stored(message["uid"]):
                return
            raise

    def uid_stored(self, uid: str) -> bool:
        """True when ``uid`` is stored for the session."""
        stmt = select(messages_table.c.id).where(
            messages_table.c.session_id == self.session_id, messages_table.c.uid == uid
        )

        def stored(conn: Connection) -> bool:
            return conn.execute(stmt).first() is not None

        return self.store.read(stored, self.policy)
