"""How LangGraph's threads lie in the store: ids, ownership and the thread's messages.

A thread is a session of source ``langgraph`` titled with the thread id, which is kept in
the session's ``extra`` too (the title is the operator's to change). The framework's own
state (checkpoints, channel values, pending writes) lives in the ``langgraph_*`` tables
keyed by the session; the messages of the root graph's ``messages`` channel are
display-only message rows of the session, one per message id.
"""

from __future__ import annotations

import json
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.engine import Connection

from hermes_repo import Backend, SessionTakenError, UnitOfWork, validate_session_id
from hermes_repo.codec import decode_text, dumps, loads
from hermes_repo.models import messages_table, sessions_table

from ._ids import door_session_id

__all__ = [
    "GENERATION_KEY",
    "LOCK_OWNER",
    "MESSAGES_CHANNEL",
    "SOURCE",
    "THREAD_KEY",
    "UID_PREFIX",
    "check_owner",
    "dialect_insert",
    "message_rows",
    "new_message_rows",
    "next_generation",
    "next_version",
    "own_for_write",
    "session_id_for",
    "uid_prefix",
]

#: The ``source`` of every session that holds a LangGraph thread.
SOURCE = "langgraph"
#: The session ``extra`` key holding the thread id the session keeps.
THREAD_KEY = "langgraph_thread"
#: The channel whose messages become the session's rows (``MessagesState``'s).
MESSAGES_CHANNEL = "messages"
#: A message row's uid is this and the LangChain message id (and, once the thread was
#: deleted, the generation before it: ``langgraph:2:<id>``).
UID_PREFIX = "langgraph:"
#: The session ``extra`` key counting the thread's deletions: a thread started afresh
#: after :meth:`delete_thread` stores its messages again even when their ids repeat.
GENERATION_KEY = "langgraph_generation"

_ROLES = {
    "human": "user",
    "user": "user",
    "ai": "assistant",
    "assistant": "assistant",
    "aimessagechunk": "assistant",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "tool",
}
# Chunks of an IN list: far below either backend's limit on bound parameters.
_CHUNK = 500

# Built once: every put and put_writes runs them, and building a statement (its
# ``FOR UPDATE``, its IN list) cost more than SQLite running it. An expanding
# parameter keeps one compiled form per list length. ``LOCK_OWNER``: the thread's
# session's source and ``extra``, its row locked for the unit (on a server).
LOCK_OWNER = (
    select(sessions_table.c.source, sessions_table.c.extra)
    .where(sessions_table.c.id == bindparam("sid"))
    .with_for_update()
)
_STORED_UIDS = select(messages_table.c.uid).where(
    messages_table.c.session_id == bindparam("sid"),
    messages_table.c.uid.in_(bindparam("uids", expanding=True)),
)


def session_id_for(thread_id: str) -> str:
    """The session keeping ``thread_id``: the id itself when it is a valid session id,
    else ``lg-`` and 40 hex digits of its SHA-256 (the original is the session's title
    and is in its ``extra``)."""
    return door_session_id(thread_id, "lg")


def check_owner(thread_id: str, session_id: str, source: str, extra: Mapping[str, Any]) -> None:
    """Refuse a session that is not this thread's (see :class:`SessionTakenError`)."""
    if source != SOURCE:
        raise SessionTakenError(
            f"LangGraph thread {thread_id!r} maps to session {session_id!r}, which is a "
            f"session of source {source!r}, not {SOURCE!r}: the checkpointer never reads "
            "or writes another source's session; use another thread_id"
        )
    stored = extra.get(THREAD_KEY)
    if stored is not None and stored != thread_id:
        raise SessionTakenError(
            f"LangGraph thread {thread_id!r} maps to session {session_id!r}, which holds "
            f"thread {stored!r}: use another thread_id"
        )


def own_for_write(
    uow: UnitOfWork, thread_id: str, session_id: str, *, create: bool
) -> dict[str, Any] | None:
    """Lock the thread's session for this unit (``FOR UPDATE`` on a server: writers of
    one thread take turns), creating it when ``create``; its ``extra``, or None when it
    is missing and not created. Refuses another owner's session."""
    state = _locked_owner(uow.connection, session_id)
    if state is None:
        if not create:
            return None
        if uow.sessions.ensure(session_id, source=SOURCE, title=thread_id):
            extra = {THREAD_KEY: thread_id}
            uow.sessions.update(session_id, title=thread_id, extra=extra)
            return extra
        # Another writer created it meanwhile: whose it is decides.
        state = uow.sessions.source_and_extra(session_id, lock=True)
        assert state is not None  # sessions are never deleted
    check_owner(thread_id, session_id, *state)
    return state[1]


def _locked_owner(conn: Connection, session_id: str) -> tuple[str, dict[str, Any]] | None:
    """The session's source and ``extra``, its row locked until the unit ends (what
    :meth:`SessionRepository.source_and_extra` with ``lock`` reads, on a statement built
    once: the saver's session ids are valid by construction, see :func:`session_id_for`)."""
    row = conn.execute(LOCK_OWNER, {"sid": validate_session_id(session_id)}).first()
    if row is None:
        return None
    source, extra = row
    return decode_text(source), (loads(extra) if extra is not None else {})


def uid_prefix(extra: Mapping[str, Any]) -> str:
    """The uid prefix of the thread's messages in its current generation."""
    generation = extra.get(GENERATION_KEY)
    return f"{UID_PREFIX}{generation}:" if generation else UID_PREFIX


def next_generation(uow: UnitOfWork, session_id: str, extra: Mapping[str, Any]) -> None:
    """Count one more deletion of the thread in its session's ``extra`` (the title, the
    operator's, is left alone)."""
    changed = {**extra, GENERATION_KEY: int(extra.get(GENERATION_KEY) or 0) + 1}
    uow.connection.execute(
        update(sessions_table).where(sessions_table.c.id == session_id).values(extra=dumps(changed))
    )


def next_version(current: str | int | None) -> str:
    """The version after ``current``, as LangGraph's SQL savers make them: a counter
    padded to sort as text, then a random tiebreak."""
    if current is None:
        count = 0
    elif isinstance(current, int):
        count = current
    else:
        count = int(current.split(".")[0])
    return f"{count + 1:032}.{random.random():016}"


def dialect_insert(backend: Backend, table: Table) -> Any:
    """An INSERT that knows ``ON CONFLICT`` on the store's backend (either dialect's
    ``Insert``: the two share the methods used here)."""
    return backend.insert(table)


def _field(message: Any, name: str) -> Any:
    if isinstance(message, Mapping):
        return message.get(name)
    return getattr(message, name, None)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


def _row(message: Any, prefix: str) -> dict[str, Any] | None:
    """The display-only row of one LangChain message (a ``BaseMessage`` or a message
    dict), None when it has no id (no identity to keep it once by)."""
    mid = _field(message, "id")
    if not isinstance(mid, str) or not mid:
        return None
    kind = _field(message, "type") or _field(message, "role") or ""
    role = _ROLES.get(str(kind).lower(), "user")
    lines = [_text(_field(message, "content"))]
    for call in _field(message, "tool_calls") or ():
        name, args = _field(call, "name"), _field(call, "args")
        lines.append(f"{name} {json.dumps(args, ensure_ascii=False, default=str)}")
    row: dict[str, Any] = {
        "role": role,
        # A server's text refuses U+0000; the exact message is in the checkpoint.
        "content": "\n".join(line for line in lines if line).replace("\x00", " "),
        "uid": prefix + mid,
        # LangGraph replays its own state; hermes' replay and repair never touch them.
        "display_only": True,
    }
    if role == "tool":
        call_id = _field(message, "tool_call_id")
        if isinstance(call_id, str):
            row["tool_call_id"] = call_id.replace("\x00", " ")
        name = _field(message, "name")
        if isinstance(name, str):
            row["tool_name"] = name.replace("\x00", " ")
    return row


def message_rows(
    messages: Any, prefix: str = UID_PREFIX, known: Collection[str] = ()
) -> tuple[list[str], list[dict[str, Any]]]:
    """The uids of a ``messages`` channel value's messages, in order, each message id
    once (``prefix`` and the id, see :func:`uid_prefix`), and the rows of those whose
    uid is not in ``known`` (a checkpoint repeats the whole conversation: the rows of
    the messages already stored are not built again)."""
    if not isinstance(messages, Iterable) or isinstance(messages, str | bytes | Mapping):
        messages = [messages]
    uids: dict[str, None] = {}
    rows: list[dict[str, Any]] = []
    for message in messages:
        mid = _field(message, "id")
        if not isinstance(mid, str) or not mid or prefix + mid in uids:
            continue
        uids[prefix + mid] = None
        if prefix + mid not in known:
            row = _row(message, prefix)
            assert row is not None  # it has an id
            rows.append(row)
    return list(uids), rows


def new_message_rows(
    conn: Connection, session_id: str, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``rows`` whose uid the session does not hold yet (active or archived): a message
    a later checkpoint repeats is stored once."""
    stored: set[str] = set()
    uids = [row["uid"] for row in rows]
    for start in range(0, len(uids), _CHUNK):
        params = {"sid": session_id, "uids": uids[start : start + _CHUNK]}
        stored.update(conn.execute(_STORED_UIDS, params).scalars())
    return [row for row in rows if row["uid"] not in stored]
