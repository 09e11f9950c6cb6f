"""Message dicts to rows and back, byte for byte.

A message is an OpenAI-style dict. Known keys map to columns; JSON-valued keys are stored
as compact JSON text; any other key is kept in ``extra`` so nothing the caller handed in
is dropped. Returned dicts omit keys whose value is None.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from .errors import IntegrityViolation
from .models import ROLES

__all__ = [
    "MESSAGE_COLUMNS",
    "ROW_COLUMNS",
    "content_columns",
    "dumps",
    "message_to_row",
    "new_uid",
    "parts_text",
    "row_to_message",
    "tool_call_count",
]

# Keys stored in their own column (after the aliases below are applied).
_PLAIN = ("role", "tool_call_id", "tool_name", "token_count", "finish_reason", "reasoning")
_JSON = ("tool_calls", "reasoning_details")
# Keys the layer owns or derives: never copied to `extra`.
_RESERVED = frozenset(
    {
        *_PLAIN,
        *_JSON,
        "content",
        "api_content",
        "display_only",
        "timestamp",
        "uid",
        "name",
        "id",
        "active",
        "archived_at",
        "archive_reason",
        "session_id",
    }
)

# The columns message_to_row fills, in INSERT order.
ROW_COLUMNS = (
    "session_id",
    "uid",
    "role",
    "content",
    "content_parts",
    "content_text",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_details",
    "api_content",
    "extra",
    "display_only",
)

# Column order of SELECTs that feed row_to_message.
MESSAGE_COLUMNS = (
    "id",
    "uid",
    "role",
    "content",
    "content_parts",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_details",
    "api_content",
    "extra",
    "display_only",
    "active",
    "archived_at",
    "archive_reason",
)


def dumps(value: Any) -> str:
    """Compact JSON that keeps non-ASCII text as is (CJK stays readable in the file)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def new_uid() -> str:
    """A fresh idempotency key for a message."""
    return uuid.uuid4().hex


def tool_call_count(message: Mapping[str, Any]) -> int:
    calls = message.get("tool_calls")
    return len(calls) if isinstance(calls, list) else 0


def content_columns(content: Any) -> dict[str, str | None]:
    """Column values for a message's content: text, or JSON parts plus their searchable text.

    Every writer of ``content`` (append, repair) goes through here, so the indexed
    projection of a row is always derived the same way.
    """
    if content is None or isinstance(content, str):
        return {"content": content, "content_parts": None, "content_text": None}
    return {"content": None, "content_parts": dumps(content), "content_text": parts_text(content)}


def parts_text(content: Any) -> str | None:
    """The text of multimodal parts (``{"type": "text", "text": ...}``) joined by spaces."""
    if not isinstance(content, list):
        return None
    texts = [
        p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
    ]
    return " ".join(texts) if texts else None


def message_to_row(
    session_id: str, message: Mapping[str, Any], *, now: float | None = None
) -> dict[str, Any]:
    """Validate a message dict and turn it into column values.

    A missing ``uid`` or ``timestamp`` is generated here; callers that must carry them
    (the transcript writer) assign them on the dict before calling.
    """
    if not isinstance(message, Mapping):
        raise IntegrityViolation(f"a message must be a dict, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise IntegrityViolation(f"message role must be one of {', '.join(ROLES)}; got {role!r}")
    content = message.get("content")
    api_content = message.get("api_content")
    timestamp = message.get("timestamp")
    if timestamp is None:
        timestamp = time.time() if now is None else now
    elif not isinstance(timestamp, int | float) or isinstance(timestamp, bool):
        raise IntegrityViolation(f"message timestamp must be a number, got {timestamp!r}")
    uid = message.get("uid") or new_uid()
    if api_content is not None and not isinstance(api_content, str):
        raise IntegrityViolation(
            "message api_content must be a string (the exact payload sent to the provider)"
        )
    extra = {k: v for k, v in message.items() if k not in _RESERVED}
    # `name` is kept as given (in extra); on tool rows it also fills the indexed
    # tool_name column when the caller did not set tool_name.
    tool_name = message.get("tool_name")
    if message.get("name") is not None:
        extra["name"] = message["name"]
        if tool_name is None and role == "tool":
            tool_name = message["name"]
    row: dict[str, Any] = {
        "session_id": session_id,
        "uid": str(uid),
        "role": role,
        **content_columns(content),
        "tool_calls": None if message.get("tool_calls") is None else dumps(message["tool_calls"]),
        "tool_call_id": message.get("tool_call_id"),
        "tool_name": tool_name,
        "timestamp": float(timestamp),
        "token_count": message.get("token_count"),
        "finish_reason": message.get("finish_reason"),
        "reasoning": message.get("reasoning"),
        "reasoning_details": (
            None
            if message.get("reasoning_details") is None
            else dumps(message["reasoning_details"])
        ),
        "api_content": api_content,
        "extra": dumps(extra) if extra else None,
        "display_only": 1 if message.get("display_only") else 0,
    }
    return row


def row_to_message(row: Any, *, with_ids: bool = False) -> dict[str, Any]:
    """Turn a row (a tuple in :data:`MESSAGE_COLUMNS` order) back into the message dict."""
    (
        id_,
        uid,
        role,
        content,
        content_parts,
        tool_calls,
        tool_call_id,
        tool_name,
        timestamp,
        token_count,
        finish_reason,
        reasoning,
        reasoning_details,
        api_content,
        extra,
        display_only,
        active,
        archived_at,
        archive_reason,
    ) = row
    msg: dict[str, Any] = {"role": role}
    if content_parts is not None:
        msg["content"] = json.loads(content_parts)
    elif content is not None:
        msg["content"] = content
    if tool_calls is not None:
        msg["tool_calls"] = json.loads(tool_calls)
    if tool_call_id is not None:
        msg["tool_call_id"] = tool_call_id
    extras = json.loads(extra) if extra is not None else None
    # A tool_name that only mirrors the caller's `name` was derived, not given.
    if tool_name is not None and not (extras and extras.get("name") == tool_name):
        msg["tool_name"] = tool_name
    if token_count is not None:
        msg["token_count"] = token_count
    if finish_reason is not None:
        msg["finish_reason"] = finish_reason
    if reasoning is not None:
        msg["reasoning"] = reasoning
    if reasoning_details is not None:
        msg["reasoning_details"] = json.loads(reasoning_details)
    if api_content is not None:
        msg["api_content"] = api_content
    if extras:
        msg.update(extras)
    if display_only:
        msg["display_only"] = True
    if not active:
        msg["active"] = False
        if archived_at is not None:
            msg["archived_at"] = archived_at
        if archive_reason is not None:
            msg["archive_reason"] = archive_reason
    msg["timestamp"] = timestamp
    msg["uid"] = uid
    if with_ids:
        msg["id"] = id_
    return msg
