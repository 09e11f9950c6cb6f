"""What makes two messages the same message: their content as the store keeps it.

A uid names one message. The transcript writer tells a message it made durable from
another dict under the same uid by the content columns (role, text, parts, tool
fields; not the time or the uid), compared as 16-byte digests of what the codec
stores, so a repeated flush costs one lookup per message.
"""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import select
from sqlalchemy.engine import Connection

from ..database import WriteCore
from ..models import messages_table
from ..retry import RetryPolicy

__all__ = [
    "CONTENT_COLUMNS",
    "CONTENT_NAMES",
    "content_of",
    "digest",
    "digest_of",
    "not_durable",
    "reused_reason",
    "same_message",
    "stored_digests",
]


#: The columns that make a message's content (its time and uid do not).
CONTENT_NAMES = ("role", "content", "content_parts", "tool_name", "tool_calls", "tool_call_id")
CONTENT_COLUMNS = tuple(messages_table.c[name] for name in CONTENT_NAMES)


def content_of(row: dict[str, Any]) -> tuple[Any, ...]:
    """The content columns of a message row, in :data:`CONTENT_NAMES` order."""
    return tuple(row[name] for name in CONTENT_NAMES)


def digest_of(values: tuple[Any, ...]) -> bytes:
    """16 bytes standing for a message's content columns (text or None each): each
    value length-prefixed, so no two different tuples share an input."""
    h = hashlib.blake2b(digest_size=16)
    for value in values:
        if value is None:
            h.update(b"-")
        else:
            data = str(value).encode("utf-8", "surrogatepass")
            h.update(b"%d:" % len(data))
            h.update(data)
    return h.digest()


def digest(row: dict[str, Any]) -> bytes:
    """The content of a message row, as the store keeps it, in 16 bytes."""
    return digest_of(content_of(row))


def reused_reason(uid: str, session_id: str, detail: str = "") -> str:
    """Why a message under a uid already durable with other content is refused."""
    return (
        f"uid {uid!r} is already stored (or spooled) in session {session_id!r} for a "
        f"message with different content{detail}; a uid names one message: give this "
        "one its own uid (or leave uid out)"
    )


def same_message(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two message dicts are equal (False when comparing them raises)."""
    try:
        return bool(a == b)
    except Exception:  # a value whose == raises (e.g. an array) cannot prove sameness
        return False


def stored_digests(
    store: WriteCore, session_id: str, uids: list[str], policy: RetryPolicy
) -> dict[str, bytes]:
    """The content digests of the stored messages of ``session_id`` under ``uids``."""

    def read(conn: Connection) -> dict[str, bytes]:
        out: dict[str, bytes] = {}
        for at in range(0, len(uids), 500):
            rows = conn.execute(
                select(messages_table.c.uid, *CONTENT_COLUMNS).where(
                    messages_table.c.session_id == session_id,
                    messages_table.c.uid.in_(uids[at : at + 500]),
                )
            ).all()
            out.update({row[0]: digest_of(tuple(row[1:])) for row in rows})
        return out

    return store.read(read, policy)


def not_durable(
    messages: list[dict[str, Any]], committed: set[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The messages to store, and those reusing an earlier message's uid of this list
    with different content (refused: storing either silently loses the other)."""
    seen: dict[str, dict[str, Any]] = {}
    todo = []
    reused = []
    for message in messages:
        uid = message["uid"]
        if uid in committed:
            continue
        first = seen.get(uid)
        if first is None:
            seen[uid] = message
            todo.append(message)
        elif first is not message and not same_message(first, message):
            reused.append(message)
        # else: the same message twice in one list is one message
    return todo, reused
