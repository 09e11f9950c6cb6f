"""Hermes rows to this store's values: each source column mapped by name, every value
with no column of ours kept in ``extra``, unusable values named in a warning."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..codec import MAX_DEPTH, check_timestamp, dumps, message_to_row, nesting_depth
from ..errors import HermesRepoError, IntegrityViolation
from ..ids import validate_session_id
from ..models import ROLES
from ..repositories.search import COMPACTED_REASON
from .report import HermesImportReport

__all__ = ["ARCHIVE_PREFIX", "JSON_CONTENT_PREFIX", "ORIGINAL_ID_KEY", "store_session_id"]

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


#: Key of a session's ``extra`` holding the Hermes id of a session stored under a mapped id.
ORIGINAL_ID_KEY = "hermes_session_id"
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9_:-]+")


# -- ids ------------------------------------------------------------------------------


def store_session_id(hermes_id: str) -> str:
    """The id a Hermes session is stored under: its own when this store's id rule takes
    it, else ``hermes-<readable part>-<hash>``.

    Hermes takes any id up to 256 characters without ``/ \\ ..`` CR LF NUL (its API
    server passes a client's id through); this store's ids become file names, so they are
    narrower. The mapped id is derived from a hash of the original alone, so every
    import of the same file (or a later copy of it) maps a session the same way and
    finds what an earlier run stored.
    """
    try:
        return validate_session_id(hermes_id)
    except HermesRepoError:
        pass
    digest = hashlib.sha256(hermes_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    slug = _SLUG_UNSAFE.sub("_", hermes_id)[:48].strip("_")
    return f"hermes-{slug}-{digest}" if slug else f"hermes-{digest}"


# -- values ---------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A source value as JSON can hold it (a BLOB as base64 in a tagged object, a NaN
    or infinite REAL as its text: strict JSON has no such numbers)."""
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


def _not_finite(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinite number replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, list):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def _too_deep(text: str, parsed: Any) -> bool:
    """Whether JSON ``parsed`` (read from ``text``) nests deeper than the store keeps.

    Each level opens a bracket in the text: a text with no more brackets than
    :data:`MAX_DEPTH` cannot be deeper, which spares the walk of nearly every row."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    return (nesting_depth(parsed) or 0) > MAX_DEPTH


def _json_column(text: str) -> tuple[Any, bool]:
    """(parsed value, whether it held NaN/Infinity, which are replaced by null).

    Hermes writes JSON columns with ``json.dumps``, which writes ``NaN`` and
    ``Infinity`` (not JSON: no model API or PostgreSQL takes them). Raises ValueError
    for text that is not JSON at all."""
    try:
        return json.loads(text, parse_constant=_not_finite), False
    except ValueError:
        parsed = json.loads(text)  # raises again when it is not JSON even with NaN
        return _finite(parsed), True


def _server_text(
    value: Any, key: str, where: str, extra: dict[str, Any], warnings: list[str]
) -> Any:
    """On a PostgreSQL store, a text holding U+0000 (which its text type cannot store):
    the character as U+FFFD in the column, the exact original in ``extra`` (JSON keeps
    it as an escape)."""
    if not isinstance(value, str) or "\x00" not in value:
        return value
    extra[f"hermes_original_{key}"] = value
    warnings.append(
        f"{where}: {key} holds U+0000, which a PostgreSQL store cannot keep in text; "
        f"stored with U+FFFD in its place, the exact original kept in extra as "
        f"hermes_original_{key}"
    )
    return value.replace("\x00", "\ufffd")


def _content(raw: Any, where: str, warnings: list[str]) -> tuple[Any, Any]:
    """(content for our columns, value to keep in extra or None)."""
    if isinstance(raw, str) and raw.startswith(JSON_CONTENT_PREFIX):
        try:
            parsed, had_nan = _json_column(raw[len(JSON_CONTENT_PREFIX) :])
        except (ValueError, RecursionError):  # not JSON, or nested past the parser
            parsed, had_nan = raw, False
        if parsed is not raw and not had_nan and not _too_deep(raw, parsed):
            return parsed, None
        warnings.append(
            f"{where}: content starts with the JSON marker but is not JSON the store keeps "
            f"(malformed, NaN or Infinity, or nested deeper than {MAX_DEPTH} levels); "
            "kept as text"
        )
        return raw, None
    if raw is None or isinstance(raw, str):
        return raw, None
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8"), None
        except UnicodeDecodeError:
            # Replayed as text (a model API takes no bytes), the exact bytes kept.
            warnings.append(
                f"{where}: content is a BLOB that is not UTF-8; replayed as text with "
                "U+FFFD for the bad bytes, the exact bytes kept in extra as "
                "hermes_content_bytes"
            )
            return raw.decode("utf-8", "replace"), _plain(raw)
    return str(raw), None  # a number in a TEXT column: the text it stands for


def _break_cycles(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Sessions whose parent link closes a cycle (Hermes' own upsert can write one):
    {session id: its parent}. In each cycle the link of the session that started first
    (then the smallest id) is the one cut, so it becomes the root of the rest."""
    cut: dict[str, str] = {}
    state: dict[str, int] = {}  # 1: on the current walk, 2: done
    for sid in sorted(rows):
        path: list[str] = []
        cur: str | None = sid
        while cur is not None and cur in rows and state.get(cur) is None:
            state[cur] = 1
            path.append(cur)
            parent = rows[cur].get("parent_session_id")
            cur = parent if isinstance(parent, str) and cur not in cut else None
        if cur is not None and state.get(cur) == 1:  # the walk came back into itself
            cycle = path[path.index(cur) :]
            first = min(cycle, key=lambda c: (_sort_key(rows[c].get("started_at")), c))
            cut[first] = str(rows[first]["parent_session_id"])
        for s in path:
            state[s] = 2
    return cut


def _session_order(rows: Mapping[str, Mapping[str, Any]], cut: Mapping[str, str]) -> list[str]:
    """Session ids with every parent before its children (then by start time); the
    links in ``cut`` are not followed."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: being visited, 2: done

    def visit(sid: str) -> None:
        path = []
        cur: str | None = sid
        while cur is not None and cur in rows and state.get(cur) is None:
            state[cur] = 1
            path.append(cur)
            parent = rows[cur].get("parent_session_id")
            cur = parent if isinstance(parent, str) and cur not in cut else None
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
    """One session's rows to write, or one part of a long session's rows."""

    sid: str  # the id in this store
    values: dict[str, Any]  # our columns
    extra: dict[str, Any]
    messages: list[dict[str, Any]]  # rows for insert_rows
    #: The part that creates or updates the session row (the first).
    first: bool = True
    #: The part after which the source holds no more rows of the session (the last):
    #: rows imported earlier and gone from the source are archived then.
    last: bool = True
    #: On the last part, every uid the source holds for the session.
    source_uids: set[str] | None = None


@dataclass
class Mapper:
    """How one import maps the source: the ids of its sessions here, the parent links
    cut to break cycles, and whether the store is a server (no U+0000 in text)."""

    report: HermesImportReport
    ids: dict[str, str]  # Hermes session id -> id here
    cut: Mapping[str, str]
    server: bool

    def __post_init__(self) -> None:
        # Looked up once: the report's accessor builds its default on every call.
        self._message_counts = self.report.messages

    def session_values(self, row: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """(our columns, the session's extra) of a source session row."""
        report = self.report
        hermes_id = str(row["id"])
        sid = self.ids[hermes_id]
        where = f"session {hermes_id!r}"
        extra = {k: _plain(v) for k, v in row.items() if k not in _SESSION_MAPPED and v is not None}
        if sid != hermes_id:
            extra[ORIGINAL_ID_KEY] = hermes_id
        values: dict[str, Any] = {}
        for key in ("source", "user_id", "model", "title", "end_reason"):
            value = row.get(key)
            if value is not None and not isinstance(value, str):
                extra[key] = _plain(value)
                value = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            if self.server:
                value = _server_text(value, key, where, extra, report.warnings)
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
        if parent is None:
            return values, extra
        if hermes_id in self.cut:
            extra["parent_session_id"] = _plain(parent)
            report.warnings.append(
                f"{where}: its parent link {parent!r} closes a cycle of parents; the link is "
                "cut here (the session becomes the root of the cycle) and kept in the "
                "session's extra"
            )
        elif isinstance(parent, str) and parent in self.ids:
            values["parent_session_id"] = self.ids[parent]
        else:
            extra["parent_session_id"] = _plain(parent)
            report.warnings.append(
                f"{where}: its parent {parent!r} is not in the source (the source "
                "lost it); the link is kept in the session's extra"
            )
        return values, extra

    def message_row(
        self, hermes_sid: str, row: Mapping[str, Any], last_ts: float | None
    ) -> dict[str, Any]:
        """A source message row as a row of ours (see ``insert_rows``)."""
        report = self.report
        sid = self.ids[hermes_sid]
        warnings = report.warnings
        where = f"message {row['id']} of session {hermes_sid!r}"
        extra = {k: _plain(v) for k, v in row.items() if k not in _MESSAGE_MAPPED and v is not None}
        message: dict[str, Any] = {"uid": f"hermes:{sid}:{row['id']}"}
        content, kept = _content(row.get("content"), where, warnings)
        if kept is not None:
            extra["hermes_content_bytes"] = kept
        if self.server:
            content = _server_text(content, "content", where, extra, warnings)
        message["content"] = content
        role = row.get("role")
        if role not in ROLES:
            # No column can hold it: shown, never replayed; the export gives the role back.
            extra["role"] = _plain(role)
            message["role"] = "system"
            message["display_only"] = True
            warnings.append(f"{where}: unknown role {role!r}, kept as a display-only row")
        else:
            message["role"] = role
        for key in _MESSAGE_TEXT:
            value = row.get(key)
            if value is None or isinstance(value, str):
                message[key] = (
                    _server_text(value, key, where, extra, warnings) if self.server else value
                )
            else:
                extra[key] = _plain(value)
        for key in _MESSAGE_JSON:
            value = row.get(key)
            if value is None:
                continue
            parsed: Any = None
            try:
                if isinstance(value, str):
                    parsed, had_nan = _json_column(value)
                    if had_nan:
                        extra[f"hermes_original_{key}"] = value
                        warnings.append(
                            f"{where}: {key} holds NaN or Infinity (not JSON); replaced by "
                            f"null, the exact text kept in extra as hermes_original_{key}"
                        )
            except (ValueError, RecursionError):  # not JSON, or nested past the parser
                parsed = None
            if parsed is not None and _too_deep(value, parsed):
                parsed = None  # deeper than the store keeps: its text is kept instead
            if parsed is None:
                extra.pop(f"hermes_original_{key}", None)
                extra[key] = _plain(value)
                warnings.append(
                    f"{where}: {key} is not JSON the store keeps (malformed, or nested deeper "
                    f"than {MAX_DEPTH} levels); kept in extra as it is"
                )
            else:
                message[key] = parsed
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
            warnings.append(f"{exc}; kept in extra, the row keeps its place")
        # message_to_row derives calls_text: a word only in a call's arguments is found,
        # as Hermes (which indexes tool_calls beside content) found it.
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
            # The compacted reason is the one search keeps covering (as Hermes does).
            reason = COMPACTED_REASON if compacted else ARCHIVE_PREFIX + "undone (rewound)"
            out["archive_reason"] = reason
        self._message_counts.kept_in_extra += len(extra)
        return out
