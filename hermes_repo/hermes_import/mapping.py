"""Hermes rows to this store's values: each source column mapped by name, every value
with no column of ours kept in ``extra``, unusable values named in a warning."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..codec import MAX_DEPTH, check_timestamp, dumps, message_to_row, nesting_depth
from ..errors import IntegrityViolation
from ..models import ROLES
from .report import HermesImportReport

__all__ = ["ARCHIVE_PREFIX", "JSON_CONTENT_PREFIX"]

#: Prefix Hermes puts before JSON content it could not bind as text (multimodal lists).
JSON_CONTENT_PREFIX = "\x00json:"
#: Start of the archive reason of rows Hermes itself made inactive.
ARCHIVE_PREFIX = "hermes: "

# Source columns that have a column of ours; everything else goes to `extra`.
# message_count and tool_call_count are recomputed here, so the source's values are
# kept in `extra` too.
_SESSION_MAPPED = frozenset(
    {
        "id",
        "source",
        "user_id",
        "model",
        "title",
        "parent_session_id",
        "started_at",
        "ended_at",
        "end_reason",
        "input_tokens",
        "output_tokens",
    }
)
_MESSAGE_MAPPED = frozenset(
    {
        "id",
        "session_id",
        "role",
        "content",
        "tool_call_id",
        "tool_calls",
        "tool_name",
        "timestamp",
        "token_count",
        "finish_reason",
        "reasoning",
        "reasoning_details",
        "api_content",
        "active",
    }
)
_MESSAGE_TEXT = ("tool_call_id", "tool_name", "finish_reason", "reasoning", "api_content")
_MESSAGE_JSON = ("tool_calls", "reasoning_details")
_LOADED_KEYS = frozenset(
    {"timestamp", "uid", "id", "active", "archived_at", "archive_reason", "display_only"}
)


# -- values ---------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A source value as JSON can hold it (a BLOB as base64 in a tagged object)."""
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode("ascii")}
    return value


def _content(raw: Any, where: str, warnings: list[str]) -> tuple[Any, Any]:
    """(content for our columns, value to keep in extra or None)."""
    if isinstance(raw, str) and raw.startswith(JSON_CONTENT_PREFIX):
        try:
            parsed = json.loads(raw[len(JSON_CONTENT_PREFIX) :])
        except (ValueError, RecursionError):  # not JSON, or nested past the parser
            parsed = raw
        if parsed is not raw and (nesting_depth(parsed) or 0) <= MAX_DEPTH:
            return parsed, None
        warnings.append(
            f"{where}: content starts with the JSON marker but is not JSON the store keeps "
            f"(malformed, or nested deeper than {MAX_DEPTH} levels); kept as text"
        )
        return raw, None
    if raw is None or isinstance(raw, str):
        return raw, None
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8"), None
        except UnicodeDecodeError:
            return None, _plain(raw)
    return str(raw), None  # a number in a TEXT column: the text it stands for


def _session_order(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Session ids with every parent before its children (then by start time)."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: being visited, 2: done

    def visit(sid: str) -> None:
        path = []
        cur: str | None = sid
        while cur is not None and cur in rows and state.get(cur) is None:
            state[cur] = 1
            path.append(cur)
            parent = rows[cur].get("parent_session_id")
            cur = parent if isinstance(parent, str) else None
        for s in reversed(path):
            state[s] = 2
            order.append(s)

    for sid in sorted(rows, key=lambda s: (_sort_key(rows[s].get("started_at")), s)):
        visit(sid)
    return order


def _sort_key(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


# -- one session ----------------------------------------------------------------------


@dataclass
class _Session:
    sid: str
    values: dict[str, Any]  # our columns
    extra: dict[str, Any]
    messages: list[dict[str, Any]]  # rows for insert_rows


def _session_values(
    row: Mapping[str, Any], parent_ok: Callable[[str], bool], report: HermesImportReport
) -> tuple[dict[str, Any], dict[str, Any]]:
    sid = str(row["id"])
    extra = {k: _plain(v) for k, v in row.items() if k not in _SESSION_MAPPED and v is not None}
    values: dict[str, Any] = {}
    for key in ("source", "user_id", "model", "title", "end_reason"):
        value = row.get(key)
        if value is not None and not isinstance(value, str):
            extra[key] = _plain(value)
            value = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        values[key] = value
    values["source"] = values["source"] or "cli"
    for key in ("started_at", "ended_at"):
        value = row.get(key)
        if value is None:
            values[key] = None
            continue
        try:
            values[key] = check_timestamp(value, f"session {sid} {key}")
        except IntegrityViolation as exc:
            extra[key] = _plain(value)
            values[key] = None
            report.warnings.append(f"{exc}; kept in the session's extra")
    for key in ("input_tokens", "output_tokens"):
        value = row.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            values[key] = value
        else:
            values[key] = 0
            if value is not None:
                extra[key] = _plain(value)
    parent = row.get("parent_session_id")
    values["parent_session_id"] = None
    if parent is not None:
        if isinstance(parent, str) and parent_ok(parent):
            values["parent_session_id"] = parent
        else:
            extra["parent_session_id"] = _plain(parent)
            report.warnings.append(
                f"session {sid}: its parent {parent!r} is not in the source (the source "
                "lost it); the link is kept in the session's extra"
            )
    return values, extra


def _message_row(
    sid: str, row: Mapping[str, Any], last_ts: float | None, report: HermesImportReport
) -> dict[str, Any]:
    where = f"message {row['id']} of session {sid}"
    extra = {k: _plain(v) for k, v in row.items() if k not in _MESSAGE_MAPPED and v is not None}
    message: dict[str, Any] = {"uid": f"hermes:{sid}:{row['id']}"}
    content, kept = _content(row.get("content"), where, report.warnings)
    message["content"] = content
    if kept is not None:
        extra["content"] = kept
    role = row.get("role")
    if role not in ROLES:
        # No column can hold it: shown, never replayed; the export gives the role back.
        extra["role"] = _plain(role)
        message["role"] = "system"
        message["display_only"] = True
        report.warnings.append(f"{where}: unknown role {role!r}, kept as a display-only row")
    else:
        message["role"] = role
    for key in _MESSAGE_TEXT:
        value = row.get(key)
        if value is None or isinstance(value, str):
            message[key] = value
        else:
            extra[key] = _plain(value)
    for key in _MESSAGE_JSON:
        value = row.get(key)
        if value is None:
            continue
        try:
            message[key] = json.loads(value) if isinstance(value, str) else None
        except (ValueError, RecursionError):  # not JSON, or nested past the parser
            message[key] = None
        if (nesting_depth(message[key]) or 0) > MAX_DEPTH:
            message[key] = None  # deeper than the store keeps: its text is kept instead
        if message[key] is None:
            extra[key] = _plain(value)
            message.pop(key)
            report.warnings.append(
                f"{where}: {key} is not JSON the store keeps (malformed, or nested deeper "
                f"than {MAX_DEPTH} levels); kept in extra as it is"
            )
    token_count = row.get("token_count")
    if isinstance(token_count, int) and not isinstance(token_count, bool):
        message["token_count"] = token_count
    elif token_count is not None:
        extra["token_count"] = _plain(token_count)
    ts = row.get("timestamp")
    try:
        message["timestamp"] = check_timestamp(ts, f"{where} timestamp")
    except IntegrityViolation as exc:
        # The row is kept at its place; its time falls back to the one before it.
        extra["timestamp"] = _plain(ts)
        message["timestamp"] = last_ts if last_ts is not None else 0.0
        report.warnings.append(f"{exc}; kept in extra, the row keeps its place")
    out = message_to_row(sid, message)
    # A loaded message sets these keys itself after merging extra: a source value kept
    # under the same name would be hidden, so it is kept as hermes_<name>.
    extra = {(f"hermes_{k}" if k in _LOADED_KEYS else k): v for k, v in extra.items()}
    out["extra"] = dumps(extra) if extra else None
    active = row.get("active")
    inactive = active is not None and not active
    out["active"] = 0 if inactive else 1
    out["archived_at"] = None
    out["archive_reason"] = None
    if inactive:
        compacted = row.get("compacted")
        out["archive_reason"] = ARCHIVE_PREFIX + ("compacted" if compacted else "undone (rewound)")
    report.messages.kept_in_extra += len(extra)
    return out
