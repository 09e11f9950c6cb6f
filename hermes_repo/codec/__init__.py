"""Message dicts to rows and back, byte for byte.

A message is an OpenAI-style dict. Known keys map to columns; JSON-valued keys are stored
as compact JSON text; any other key is kept in ``extra`` so nothing the caller handed in
is dropped. Returned dicts omit keys whose value is None.

**Keys the layer writes itself** (:data:`LAYER_KEYS`: ``id``, ``session_id``,
``active``, ``archived_at``, ``archive_reason``) are kept too when a caller sends them
(``id`` is common in Anthropic and OpenAI Responses messages): ``extra`` stores them
under an escaped name, :data:`TEXT_MARK` + the key, and any caller key that itself
starts with :data:`TEXT_MARK` gets one more mark, so names never collide. A plain read
restores the caller's keys exactly. The output stays unambiguous: when the layer writes
one of these keys into a returned message (``id`` with ``with_ids=True``; ``active``,
``archived_at`` and ``archive_reason`` on an archived row) and the caller sent the same
key, that message's ``extra`` keys are returned in their stored, escaped form (the
caller's ``id`` as ``"\ufdd0id"``), so the layer's value and the caller's never mix.
``display_only`` must be a bool (or None).

**Any string is stored, lone surrogates included.** Python strings may hold lone
surrogates (``"\\ud83d"`` from a stream cut mid-emoji, ``"\\udc80"`` from
``os.fsdecode``); SQLite text and UTF-8 files cannot. No schema change is needed:

* JSON text (``tool_calls``, ``reasoning_details``, ``extra``, ``content_parts``, spool
  lines): :func:`dumps` writes non-ASCII text as UTF-8 and only a lone surrogate as the
  JSON escape ``\\udXXX``. :func:`loads` reads every such escape back as that one code
  point: a high surrogate escape followed by a low one stays two code points (our JSON
  never escapes a real astral character, so the pair can only mean two lone ones).
* ``content`` (indexed by full-text search): a string holding a lone surrogate is kept
  exactly as a JSON string in ``content_parts``, and ``content_text`` holds a searchable
  copy with each lone surrogate replaced by U+FFFD, so search finds the rest of the text.
* other text columns (``reasoning``, ``finish_reason``, ``tool_name``, ``tool_call_id``,
  ``api_content``, and the session fields): :func:`encode_text` keeps a value as it is
  unless it holds a lone surrogate or starts with :data:`TEXT_MARK` (U+FDD0, a Unicode
  noncharacter); then it stores ``TEXT_MARK`` + the value's JSON string. :func:`decode_text`
  undoes it on read. The encoding is per column, so a repair that rewrites one column
  never leaves a stale copy elsewhere.

**What cannot be stored is refused before anything is written**, with an
:class:`~hermes_repo.errors.IntegrityViolation` naming the field and the fix: a value of
the wrong type in a column (a dict as ``finish_reason``, bytes as ``reasoning``), an
integer column (``token_count``) outside SQLite's signed 64 bits, NaN or infinite numbers
inside JSON values, bytes, sets, other objects JSON cannot say, circular or too deeply
nested structures, a non-string key anywhere in a message (JSON would silently turn
``1``, ``True`` and ``None`` into ``"1"``, ``"true"`` and ``"null"``; the error names
the key's path), a ``uid`` that is not plain text, and a timestamp
that is not plausible epoch seconds (:func:`check_timestamp`: a real number with
``0 <= t <`` :data:`MAX_TIMESTAMP`, the start of the year 3000 UTC; a millisecond epoch
is named as such). Inside JSON values integers of any size are kept (JSON text holds
them), and JSON's own rules apply: tuples come back as lists.
"""

from __future__ import annotations

import json
import numbers
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

from ..errors import IntegrityViolation
from ..models import ROLES

__all__ = [
    "LAYER_KEYS",
    "MAX_TIMESTAMP",
    "MESSAGE_COLUMNS",
    "ROW_COLUMNS",
    "TEXT_MARK",
    "check_timestamp",
    "content_columns",
    "decode_text",
    "dumps",
    "encode_text",
    "escape_surrogates",
    "has_surrogates",
    "loads",
    "message_to_row",
    "new_uid",
    "parts_text",
    "row_to_message",
    "scrub",
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
LAYER_KEYS = frozenset({"id", "session_id", "active", "archived_at", "archive_reason"})

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

_ARCHIVE_KEYS = ("active", "archived_at", "archive_reason")
#: Timestamps are epoch seconds in ``[0, MAX_TIMESTAMP)``: 3000-01-01T00:00:00Z.
MAX_TIMESTAMP = 32503680000.0
#: First character of a text column value stored in its reversible encoding.
TEXT_MARK = "\ufdd0"
_INT64 = (-(2**63), 2**63 - 1)
_SURROGATE = re.compile("[\ud800-\udfff]")
# A \\u escape of a surrogate (or of NUL, which the slow decoder uses as its marker),
# preceded by an even number of backslashes (so the backslash itself is not escaped).
_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_PAIR = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_MARKED = re.compile("\x00(\x00|[0-9a-f]{4})")


def has_surrogates(text: str) -> bool:
    """True when ``text`` holds a lone surrogate (it cannot be encoded as UTF-8)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def scrub(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD: printable, searchable."""
    if text.isascii():
        return text
    return _SURROGATE.sub("\ufffd", text)


def escape_surrogates(json_text: str) -> str:
    """JSON text (as ``json.dumps(..., ensure_ascii=False)`` writes it) with each lone
    surrogate written as its ``\\udXXX`` escape: valid JSON, encodable as UTF-8.

    A raw surrogate can only sit inside a JSON string, where the escape means the same.
    """
    if json_text.isascii():
        return json_text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)


def dumps(value: Any, *, strict: bool = False, sort_keys: bool = False) -> str:
    """Compact JSON that keeps non-ASCII text as is (CJK stays readable in the file).

    Lone surrogates become ``\\udXXX`` escapes (see the module docstring; read it back
    with :func:`loads`). ``strict`` refuses NaN and infinite numbers (ValueError), as
    the store's columns do; without it they are written as Python's JSON writes them.
    """
    out = json.dumps(
        value,
        ensure_ascii=False,
        separators=(",", ":"),
        allow_nan=not strict,
        sort_keys=sort_keys,
    )
    return escape_surrogates(out)


def loads(text: str | bytes) -> Any:
    """Parse JSON written by :func:`dumps`, every ``\\udXXX`` escape as one code point.

    The standard parser joins a high and a low surrogate escape into one astral
    character; :func:`dumps` never escapes a real astral character, so here that pair
    stays two lone surrogates, exactly as they were written.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if _PAIR.search(text) is None:
        return json.loads(text)

    # Rare: hide each surrogate escape from the parser behind a NUL marker (a real NUL
    # is always escaped in JSON, so doubling it keeps the marker unambiguous).
    def mark(m: re.Match[str]) -> str:
        code = m.group(2).lower()
        return m.group(1) + ("\\u0000\\u0000" if code == "0000" else "\\u0000" + code)

    return _unmark(json.loads(_ESCAPE.sub(mark, text)))


def _unmark(value: Any) -> Any:
    if isinstance(value, str):
        if "\x00" not in value:
            return value
        return _MARKED.sub(
            lambda m: "\x00" if m.group(1) == "\x00" else chr(int(m.group(1), 16)), value
        )
    if isinstance(value, list):
        return [_unmark(v) for v in value]
    if isinstance(value, dict):
        return {_unmark(k): _unmark(v) for k, v in value.items()}
    return value


def encode_text(value: str) -> str:
    """A text column's stored form: ``value`` itself, or the reversible encoding when it
    holds a lone surrogate or starts with :data:`TEXT_MARK` (see the module docstring)."""
    if value.isascii() or (not value.startswith(TEXT_MARK) and _SURROGATE.search(value) is None):
        return value
    return TEXT_MARK + dumps(value)


def decode_text(stored: Any) -> Any:
    """Undo :func:`encode_text` (anything else is returned as it is)."""
    if stored.__class__ is str and stored.startswith(TEXT_MARK):
        try:
            value = loads(stored[1:])
        except ValueError:
            return stored  # not ours: written by other means, returned as stored
        if isinstance(value, str):
            return value
    return stored


def check_timestamp(value: Any, what: str = "timestamp") -> float:
    """``value`` as epoch seconds, or :class:`IntegrityViolation` naming ``what`` and the fix.

    Accepted: an int or float (not a bool) with ``0 <= t <`` :data:`MAX_TIMESTAMP`
    (the year 3000). Anything else would be stored and then break every listing.
    """
    if not isinstance(value, int | float) and isinstance(value, numbers.Real):
        value = float(value)  # numpy and other real number types
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise IntegrityViolation(
            f"{what} must be a number of seconds since the epoch, got {type(value).__name__} "
            f"{_short(value)}; pass time.time() or a float"
        )
    try:
        t = float(value)
    except OverflowError:
        t = float("inf")
    if 0 <= t < MAX_TIMESTAMP:
        return t
    if MAX_TIMESTAMP <= t < MAX_TIMESTAMP * 1000:
        fix = "it looks like milliseconds: divide by 1000"
    elif MAX_TIMESTAMP * 1000 <= t < MAX_TIMESTAMP * 1_000_000:
        fix = "it looks like microseconds: divide by 1000000"
    elif t != t:
        fix = "NaN is not a time: pass time.time()"
    else:
        fix = "pass epoch seconds between 0 and the year 3000 (e.g. time.time())"
    raise IntegrityViolation(f"{what} {_short(value)} is not plausible epoch seconds; {fix}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad(field: str, problem: str, fix: str) -> IntegrityViolation:
    return IntegrityViolation(f"message field {field!r} {problem}; {fix}")


def _text(field: str, value: Any) -> str | None:
    if value is None:
        return None
    if value.__class__ is not str and not isinstance(value, str):
        raise _bad(
            field,
            f"must be a string or None, got {type(value).__name__} {_short(value)}",
            "pass text (serialize structured values into `extra` keys or JSON text)",
        )
    return encode_text(value)


def _json(field: str, value: Any) -> str:
    try:
        return dumps(value, strict=True)
    except (TypeError, ValueError, RecursionError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if isinstance(exc, RecursionError) or "Circular" in detail:
            fix = "pass a tree of dicts and lists that does not contain itself"
        elif "not JSON compliant" in detail:
            fix = "replace NaN and infinite numbers with null or a string"
        elif "bytes" in detail:
            fix = "decode bytes to text first (e.g. base64)"
        elif "set" in detail:
            fix = "pass a list instead of a set"
        elif "keys must be" in detail:
            fix = "use string keys"
        else:
            fix = "pass only strings, numbers, booleans, None, lists and string-keyed dicts"
        raise _bad(field, f"cannot be stored as JSON ({detail})", fix) from exc


def _extra_json(extra: dict[str, Any]) -> str:
    try:
        return dumps(extra, strict=True)
    except (TypeError, ValueError, RecursionError):
        # Name the key at fault (the error path only: one dumps per key).
        for key, value in extra.items():
            _json(key, value)
        return _json("extra keys", extra)


def _check_keys(field: str, value: Any) -> None:
    """Refuse a dict key JSON would silently turn into another string (``1``, ``True``,
    ``None``, ``1.5``), naming its path. Only containers are visited: plain values cost
    one type check."""
    cls = value.__class__
    if cls is not dict and cls is not list and not isinstance(value, Mapping | list | tuple):
        return
    # The common case (no bad key) costs one walk without building paths; the path
    # of a bad key is worked out only when there is one.
    if _bad_key_inside(value):
        _walk_keys(field, value)


def _bad_key_inside(value: Any) -> bool:
    stack = [value]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        children = node
        if isinstance(node, Mapping):
            for key in node:
                # A key JSON would silently turn into another string.
                if key.__class__ is not str and (isinstance(key, int | float) or key is None):
                    return True
            children = node.values()
        for child in children:
            cls = child.__class__
            if (
                cls is dict
                or cls is list
                or (cls is not str and isinstance(child, Mapping | list | tuple))
            ):
                stack.append(child)
    return False


def _walk_keys(field: str, value: Any) -> None:
    stack: list[tuple[str, Any]] = [(field, value)]
    # A structure that contains itself is visited once (json then names the cycle).
    seen: set[int] = set()
    while stack:
        path, node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, Mapping):
            for key, child in node.items():
                if key.__class__ is not str and not isinstance(key, str):
                    if isinstance(key, int | float) or key is None:
                        raise _bad(
                            path,
                            f"holds the {type(key).__name__} key {_short(key)}, which JSON "
                            f"would turn into a string",
                            "use string keys",
                        )
                    continue  # json itself refuses it, named by _json
                if (
                    child.__class__ is dict
                    or child.__class__ is list
                    or (isinstance(child, Mapping | list | tuple) and not isinstance(child, str))
                ):
                    stack.append((f"{path}[{key!r}]", child))
        elif isinstance(node, list | tuple):
            for i, child in enumerate(node):
                if isinstance(child, Mapping | list | tuple):
                    stack.append((f"{path}[{i}]", child))


def new_uid() -> str:
    """A fresh idempotency key for a message."""
    return uuid.uuid4().hex


def tool_call_count(message: Mapping[str, Any]) -> int:
    calls = message.get("tool_calls")
    return len(calls) if isinstance(calls, list) else 0


def content_columns(content: Any) -> dict[str, str | None]:
    """Column values for a message's content: text, or JSON parts plus their searchable text.

    Every writer of ``content`` (append, repair) goes through here, so the indexed
    projection of a row is always derived the same way. Text holding a lone surrogate
    is kept exactly as a JSON string in ``content_parts``, with a searchable copy
    (U+FFFD for each surrogate) in ``content_text``. Raises :class:`IntegrityViolation`
    for content JSON cannot hold.
    """
    if content is None:
        return {"content": None, "content_parts": None, "content_text": None}
    if isinstance(content, str):
        if not has_surrogates(content):
            return {"content": content, "content_parts": None, "content_text": None}
        return {"content": None, "content_parts": dumps(content), "content_text": scrub(content)}
    _check_keys("content", content)
    text = parts_text(content)
    return {
        "content": None,
        "content_parts": _json("content", content),
        "content_text": None if text is None else scrub(text),
    }


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
    (the transcript writer) assign them on the dict before calling. Raises
    :class:`IntegrityViolation` naming the field and the fix for anything that cannot
    be stored (see the module docstring); nothing else escapes for bad values.
    """
    if not isinstance(message, Mapping):
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
        msg["content"] = loads(content_parts)
    elif content is not None:
        msg["content"] = content
    if tool_calls is not None:
        msg["tool_calls"] = loads(tool_calls)
    if tool_call_id is not None:
        msg["tool_call_id"] = decode_text(tool_call_id)
    extras = loads(extra) if extra is not None else None
    escaped = extras is not None and TEXT_MARK in extra
    if tool_name is not None:
        tool_name = decode_text(tool_name)
        # A tool_name that only mirrors the caller's `name` was derived, not given.
        if not (extras and extras.get("name") == tool_name):
            msg["tool_name"] = tool_name
    if token_count is not None:
        msg["token_count"] = token_count
    if finish_reason is not None:
        msg["finish_reason"] = decode_text(finish_reason)
    if reasoning is not None:
        msg["reasoning"] = decode_text(reasoning)
    if reasoning_details is not None:
        msg["reasoning_details"] = loads(reasoning_details)
    if api_content is not None:
        msg["api_content"] = decode_text(api_content)
    if extras:
        if escaped and not (
            (with_ids and TEXT_MARK + "id" in extras)
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
    msg["timestamp"] = timestamp
    msg["uid"] = uid
    if with_ids:
        msg["id"] = id_
    return msg
