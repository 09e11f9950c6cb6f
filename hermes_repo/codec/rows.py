"""Message dicts to rows and back: column order, the keys kept in ``extra``, and the
checks each appended message goes through (:func:`message_to_row` is on the append path)."""

from __future__ import annotations

import numbers
import os
import time
from collections.abc import Mapping
from typing import Any

from ..errors import IntegrityViolation
from ..roles import ROLES
from .checks import (
    _INT64,
    MAX_TIMESTAMP,
    _bad,
    _extra_json,
    _json,
    _short,
    _text,
    check_timestamp,
)
from .content import calls_text, content_columns
from .keys import _check_keys
from .text import _SURROGATE, TEXT_MARK, decode_text, loads

__all__ = [
    "INVALID_KEY",
    "LAYER_KEYS",
    "MESSAGE_COLUMNS",
    "ROW_COLUMNS",
    "invalid_reason",
    "message_to_row",
    "new_uid",
    "raw_value",
    "row_to_message",
    "tool_call_count",
]

# Keys stored in their own column (after the aliases below are applied).
_TEXT = ("tool_call_id", "tool_name", "finish_reason", "reasoning", "api_content")
_PLAIN = ("role", "tool_call_id", "tool_name", "token_count", "finish_reason", "reasoning")
_JSON = ("tool_calls", "reasoning_details")
# Keys stored in columns (or derived): never copied to `extra` as they are.
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
    }
)
# Keys the layer itself writes into returned messages (row id, archive state). A
# caller's value under one of them is kept in `extra` under an escaped name.
LAYER_KEYS = frozenset({"id", "session_id", "active", "archived_at", "archive_reason", "$invalid"})

# The columns message_to_row fills, in INSERT order.
ROW_COLUMNS = (
    "session_id",
    "uid",
    "role",
    "content",
    "content_parts",
    "content_text",
    "tool_calls",
    "calls_text",
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

_ARCHIVE_KEYS = ("active", "archived_at", "archive_reason")


def new_uid() -> str:
    """A fresh idempotency key for a message: 32 hex digits, 128 random bits.

    The bytes straight from the OS, formatted in C: building a ``uuid.UUID`` (what
    ``uuid4().hex`` does) cost four times as much, on every append without a uid.
    """
    return os.urandom(16).hex()


def tool_call_count(message: Mapping[str, Any]) -> int:
    calls = message.get("tool_calls")
    return len(calls) if isinstance(calls, list) else 0


def message_to_row(
    session_id: str, message: Mapping[str, Any], *, now: float | None = None
) -> dict[str, Any]:
    """Validate a message dict and turn it into column values.

    A missing ``uid`` or ``timestamp`` is generated here; callers that must carry them
    (the transcript writer) assign them on the dict before calling. Raises
    :class:`IntegrityViolation` naming the field and the fix for anything that cannot
    be stored (see :mod:`hermes_repo.codec`); nothing else escapes for bad values.
    """
    # Exact-type checks first (here and below): an ABC isinstance costs more than the
    # rest of the check, and nearly every message is a plain dict of plain values.
    if message.__class__ is not dict and not isinstance(message, Mapping):
        raise IntegrityViolation(
            f"a message must be a dict, got {type(message).__name__}; pass "
            '{"role": ..., "content": ...}'
        )
    role = message.get("role")
    if role.__class__ is not str or role not in ROLES:
        raise IntegrityViolation(
            f"message role must be one of {', '.join(ROLES)}; got {_short(role)}"
        )
    timestamp = message.get("timestamp")
    if timestamp is None:
        timestamp = time.time() if now is None else now
    if timestamp.__class__ is not float or not 0.0 <= timestamp < MAX_TIMESTAMP:
        timestamp = check_timestamp(timestamp, "message timestamp")
    uid = message.get("uid") or new_uid()
    if uid.__class__ is not str:
        if not isinstance(uid, str):
            raise _bad(
                "uid",
                f"must be a string, got {type(uid).__name__} {_short(uid)}",
                "pass a text key (or leave it out: one is generated)",
            )
        uid = str(uid)
    if not uid.isascii() and _SURROGATE.search(uid):
        raise _bad("uid", f"{uid!r} holds a lone surrogate", "use a uid of valid Unicode text")
    token_count = message.get("token_count")
    if token_count is not None and (
        token_count.__class__ is not int or not _INT64[0] <= token_count <= _INT64[1]
    ):
        if not isinstance(token_count, int | bool) and isinstance(token_count, numbers.Integral):
            token_count = int(token_count)  # numpy and other integer types
        if isinstance(token_count, bool) or not isinstance(token_count, int):
            raise _bad(
                "token_count",
                f"must be an integer or None, got {type(token_count).__name__} "
                f"{_short(token_count)}",
                "pass a whole number",
            )
        if not _INT64[0] <= token_count <= _INT64[1]:
            raise _bad(
                "token_count",
                f"{_short(token_count)} is beyond SQLite's 64-bit integers",
                "pass a count that fits in a signed 64-bit integer",
            )
        token_count = int(token_count)
    extra: dict[str, Any] = {}
    for key, value in message.items():
        if key in _RESERVED:
            continue
        if key.__class__ is not str:
            if not isinstance(key, str):
                raise IntegrityViolation(
                    f"message key {_short(key)} is a {type(key).__name__}; message keys "
                    "must be strings"
                )
            key = str(key)
        if key in LAYER_KEYS or key[:1] == TEXT_MARK:
            key = TEXT_MARK + key  # the caller's value, kept apart from the layer's
        elif value.__class__ is str or value is None:
            extra[key] = value
            continue
        _check_keys(key, value)
        extra[key] = value
    # `name` is kept as given (in extra); on tool rows it also fills the indexed
    # tool_name column when the caller did not set tool_name.
    tool_name = message.get("tool_name")
    name = message.get("name")
    if name is not None:
        _check_keys("name", name)
        extra["name"] = name
        if tool_name is None and role == "tool" and isinstance(name, str):
            tool_name = name
    tool_calls = message.get("tool_calls")
    details = message.get("reasoning_details")
    if tool_calls is not None:
        _check_keys("tool_calls", tool_calls)
    if details is not None:
        _check_keys("reasoning_details", details)
    display_only = message.get("display_only")
    if display_only is not None and display_only.__class__ is not bool:
        raise _bad(
            "display_only",
            f"must be True, False or None, got {type(display_only).__name__} "
            f"{_short(display_only)}",
            "pass a bool",
        )
    row: dict[str, Any] = {
        "session_id": session_id,
        "uid": uid,
        "role": role,
        **content_columns(message.get("content")),
        "tool_calls": None if tool_calls is None else _json("tool_calls", tool_calls),
        "calls_text": None if tool_calls is None else calls_text(tool_calls),
        "tool_call_id": _text("tool_call_id", message.get("tool_call_id")),
        "tool_name": _text("tool_name", tool_name),
        "timestamp": timestamp,
        "token_count": token_count,
        "finish_reason": _text("finish_reason", message.get("finish_reason")),
        "reasoning": _text("reasoning", message.get("reasoning")),
        "reasoning_details": None if details is None else _json("reasoning_details", details),
        "api_content": _text("api_content", message.get("api_content")),
        "extra": _extra_json(extra) if extra else None,
        "display_only": 1 if display_only else 0,
    }
    return row


def row_to_message(row: Any, *, with_ids: bool = False) -> dict[str, Any]:
    """Turn a row (a tuple in :data:`MESSAGE_COLUMNS` order) back into the message dict.

    Never raises for a stored value: one the store did not write itself (another tool,
    an old version, a hand edit: malformed JSON, a timestamp stored as text, a count
    that is not an integer...) is left out of its field and kept under
    :data:`INVALID_KEY`, exactly as stored (see :func:`_kept_invalid`). The check costs
    nothing on rows the store wrote: only a row that fails to decode is examined.
    """
    try:
        return _message(row, with_ids, False)
    except Exception:  # a value not written by us: examine the row column by column
        return _kept_invalid(row, with_ids)


class _Unreadable(Exception):
    """A column holds a value of a type the store never writes there."""


def _text_col(stored: Any) -> str:
    """A text column's value (see :func:`decode_text`); anything but text is unreadable."""
    if stored.__class__ is str:
        return decode_text(stored) if stored[:1] == TEXT_MARK else stored
    raise _Unreadable


def _message(row: Any, with_ids: bool, keep_escaped: bool) -> dict[str, Any]:
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
        msg["content"] = loads(content_parts)
    elif content is not None:
        if content.__class__ is not str:
            raise _Unreadable("content")
        msg["content"] = content
    if tool_calls is not None:
        msg["tool_calls"] = loads(tool_calls)
    if tool_call_id is not None:
        msg["tool_call_id"] = _text_col(tool_call_id)
    extras = loads(extra) if extra is not None else None
    escaped = extras is not None and TEXT_MARK in extra
    if tool_name is not None:
        tool_name = _text_col(tool_name)
        # A tool_name that only mirrors the caller's `name` was derived, not given.
        if not (extras and extras.get("name") == tool_name):
            msg["tool_name"] = tool_name
    if token_count is not None:
        if token_count.__class__ is not int:
            raise _Unreadable("token_count")
        msg["token_count"] = token_count
    if finish_reason is not None:
        msg["finish_reason"] = _text_col(finish_reason)
    if reasoning is not None:
        msg["reasoning"] = _text_col(reasoning)
    if reasoning_details is not None:
        msg["reasoning_details"] = loads(reasoning_details)
    if api_content is not None:
        msg["api_content"] = _text_col(api_content)
    if extras:
        if escaped and not (
            keep_escaped
            or (with_ids and TEXT_MARK + "id" in extras)
            or (not active and any(TEXT_MARK + k in extras for k in _ARCHIVE_KEYS))
        ):
            # Plain read: restore the caller's keys (one mark less); see the docstring.
            extras = {k[1:] if k[:1] == TEXT_MARK else k: v for k, v in extras.items()}
        msg.update(extras)
    if display_only:
        msg["display_only"] = True
    if not active:
        msg["active"] = False
        if archived_at is not None:
            msg["archived_at"] = archived_at
        if archive_reason is not None:
            msg["archive_reason"] = archive_reason
    if timestamp.__class__ is not float and timestamp.__class__ is not int:
        raise _Unreadable("timestamp")
    msg["timestamp"] = timestamp
    msg["uid"] = uid
    if with_ids:
        msg["id"] = id_
    return msg


#: The key of a returned message that keeps the stored values the store cannot read
#: (see :func:`row_to_message`): ``{field: {"raw": stored value, "reason": why}}``.
INVALID_KEY = "$invalid"

_AT = {name: i for i, name in enumerate(MESSAGE_COLUMNS)}
# JSON columns, and the message field each holds ("extra": the keys without a column).
_JSON_FIELDS = (
    ("content_parts", "content"),
    ("tool_calls", "tool_calls"),
    ("reasoning_details", "reasoning_details"),
    ("extra", "extra"),
)
# Columns whose type the read path checks (a text column holds text; a number, a number).
_TEXT_COLUMNS = (
    "content",
    "tool_call_id",
    "tool_name",
    "finish_reason",
    "reasoning",
    "api_content",
)
_SCALAR_FIELDS = (
    *((c, c) for c in _TEXT_COLUMNS),
    ("timestamp", "timestamp"),
    ("token_count", "token_count"),
)


def raw_value(value: Any) -> Any:
    """A stored value as JSON can hold it exactly: text and integers as they are, a
    finite float as it is; anything else (bytes, NaN, infinities) as its ``repr``."""
    if value.__class__ in (str, int) or (
        value.__class__ is float and value - value == 0.0  # finite
    ):
        return value
    return repr(value)


def invalid_reason(column: str, value: Any) -> str | None:
    """Why the stored ``value`` of ``column`` cannot be read as the store writes it, or
    None when it can (the rules :func:`row_to_message` applies: a timestamp must be a
    number, not necessarily a plausible one)."""
    if value is None:
        return None
    if column == "timestamp":
        # A number is returned as stored, even an implausible one (an old row's
        # milliseconds, an infinity): JSON output writes a non-finite one as text, and
        # ``hermes-repo doctor`` names it.
        if value.__class__ in (float, int):
            return None
        return f"not a number of seconds since the epoch (stored as {type(value).__name__})"
    if column in _TEXT_COLUMNS:
        return None if value.__class__ is str else f"not text (stored as {type(value).__name__})"
    if column == "token_count":
        if value.__class__ is int:
            return None
        return f"not an integer (stored as {type(value).__name__})"
    if value.__class__ is not str:
        return f"not JSON text (stored as {type(value).__name__})"
    try:
        parsed = loads(value)
    except ValueError as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"not valid JSON ({detail})"
    if column == "extra" and not isinstance(parsed, dict):
        return f"not a JSON object (a {type(parsed).__name__})"
    return None


def _kept_invalid(row: Any, with_ids: bool) -> dict[str, Any]:
    """The message of a row holding values the store cannot read: each such value is
    left out of its field and kept exactly under :data:`INVALID_KEY` (error path only).

    A caller's own ``$invalid`` key (kept in ``extra``) is then returned in its escaped
    form (:data:`TEXT_MARK` + ``$invalid``), so the layer's marker and the caller's value
    never mix.
    """
    values = list(row)
    invalid: dict[str, dict[str, Any]] = {}
    for column, field in (*_JSON_FIELDS, *_SCALAR_FIELDS):
        at = _AT[column]
        reason = invalid_reason(column, values[at])
        if reason is None:
            continue
        invalid[field] = {"raw": raw_value(values[at]), "reason": reason}
        values[at] = 0.0 if column == "timestamp" else None
    msg = _message(values, with_ids, bool(invalid))
    if "timestamp" in invalid:
        del msg["timestamp"]
    if invalid:
        msg[INVALID_KEY] = invalid
    return msg
