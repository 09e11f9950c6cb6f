"""How pydantic-ai's conversations lie in the store: ids, records and entry rows.

A conversation is a session of source ``pydantic-ai`` titled with the conversation id;
its :class:`~pydantic_ai.conversation_store.ConversationRecord` is one key of the
session's ``extra``. Each entry is one ``display_only`` message row whose ``uid`` is the
entry id and whose ``extra`` holds the parent, the kind and the message as JSON (the
framework's own adapter), so it comes back equal; ``content`` is only the searchable
text of the message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse

from hermes_repo import IntegrityViolation, SessionTakenError, check_server_text, message_to_row

from ._ids import door_session_id

__all__ = [
    "ENTRY_KEY",
    "RECORD_KEY",
    "SOURCE",
    "check_owner",
    "checked_rows",
    "entry_from_row",
    "entry_row",
    "record_from_json",
    "record_json",
    "session_id_for",
]

#: The ``source`` of every session that holds a pydantic-ai conversation.
SOURCE = "pydantic-ai"
#: The session ``extra`` key holding the conversation's record.
RECORD_KEY = "pydantic_ai_record"
#: The message ``extra`` key holding an entry's parent, kind and message.
ENTRY_KEY = "pydantic_ai_entry"

_RECORD = TypeAdapter(ConversationRecord)
_YEAR_3000 = 32503680000.0


def session_id_for(conversation_id: str) -> str:
    """The session holding ``conversation_id``: the id itself when it is a valid session
    id, else ``pai-`` and 40 hex digits of its SHA-256 (the original is the session's
    title and is in the record)."""
    return door_session_id(conversation_id, "pai")


def check_owner(
    conversation_id: str, session_id: str, source: str, extra: Mapping[str, Any]
) -> None:
    """Refuse a session that is not this conversation's (see :class:`SessionTakenError`)."""
    if source != SOURCE:
        raise SessionTakenError(
            f"conversation {conversation_id!r} maps to session {session_id!r}, which is a "
            f"session of source {source!r}, not {SOURCE!r}: the conversation store never "
            "writes into another source's session; use another conversation_id"
        )
    stored = extra.get(RECORD_KEY)
    if stored is not None and stored.get("conversation_id") != conversation_id:
        raise SessionTakenError(
            f"conversation {conversation_id!r} maps to session {session_id!r}, which holds "
            f"conversation {stored.get('conversation_id')!r}: use another conversation_id"
        )


def record_json(record: ConversationRecord) -> dict[str, Any]:
    """The record as JSON values (it comes back equal through :func:`record_from_json`)."""
    return dict(_RECORD.dump_python(record, mode="json"))


def record_from_json(value: Any) -> ConversationRecord:
    return _RECORD.validate_python(value)


def searchable_text(message: ModelMessage) -> str:
    """The text a person would search the message for: prompts, text and thinking,
    tool calls (name and arguments) and tool returns, one part a line."""
    lines: list[str] = []
    for part in message.parts:
        if hasattr(part, "args_as_json_str"):
            lines.append(f"{getattr(part, 'tool_name', '')} {part.args_as_json_str()}")
        elif hasattr(part, "model_response_str"):
            lines.append(part.model_response_str())
        elif hasattr(part, "model_response"):
            lines.append(part.model_response())
        else:
            content = getattr(part, "content", None)
            if isinstance(content, str):
                lines.append(content)
            elif isinstance(content, list | tuple):
                lines.extend(item for item in content if isinstance(item, str))
    # A server's text column refuses U+0000; the exact message is in `extra` anyway.
    return "\n".join(lines).replace("\x00", " ")


def entry_row(entry: ConversationEntry) -> dict[str, Any]:
    """The message row of ``entry`` (for ``uow.messages.append_many``)."""
    message = entry.message
    row: dict[str, Any] = {
        "role": "assistant" if isinstance(message, ModelResponse) else "user",
        "content": searchable_text(message),
        "uid": entry.id,
        # Replayed by the framework, never by hermes: see the store's docstring.
        "display_only": True,
        ENTRY_KEY: {
            "parent_id": entry.parent_id,
            "kind": entry.kind,
            "message": ModelMessagesTypeAdapter.dump_python([message], mode="json")[0],
        },
    }
    when = getattr(message, "timestamp", None)
    # The store takes epoch seconds from 1970 to the year 3000; else the time of the save.
    if when is not None and 0 <= when.timestamp() < _YEAR_3000:
        row["timestamp"] = when.timestamp()
    return row


def checked_rows(
    entries: list[ConversationEntry], session_id: str, *, server: bool
) -> list[dict[str, Any]]:
    """The rows of ``entries``, each checked to be a row the store takes (``server``:
    PostgreSQL's text rules too) before any is written: one that is not refuses the
    whole save, naming its index."""
    rows = []
    for index, entry in enumerate(entries):
        try:
            if isinstance(entry.id, str) and "\x00" in entry.id:
                # Kept out on every backend: a server's text cannot hold it.
                raise IntegrityViolation(
                    f"the id {entry.id!r} holds the character U+0000 (NUL); use entry ids "
                    "without it"
                )
            row = entry_row(entry)
            checked = message_to_row(session_id, row)
            if server:
                check_server_text(checked)
        except IntegrityViolation as exc:
            raise IntegrityViolation(
                f"entry {index} ({entry.id!r}) cannot be stored: {exc}; nothing of this save "
                "was written"
            ) from exc
        except (RecursionError, ValueError, TypeError) as exc:
            raise IntegrityViolation(
                f"entry {index} ({entry.id!r}) cannot be stored ({type(exc).__name__}: "
                f"{exc}); nothing of this save was written"
            ) from exc
        rows.append(row)
    return rows


def entry_from_row(row: Mapping[str, Any]) -> ConversationEntry:
    """The entry a row made by :func:`entry_row` holds."""
    stored = row[ENTRY_KEY]
    return ConversationEntry(
        id=row["uid"],
        parent_id=stored["parent_id"],
        message=ModelMessagesTypeAdapter.validate_python([stored["message"]])[0],
        kind=stored["kind"],
    )
