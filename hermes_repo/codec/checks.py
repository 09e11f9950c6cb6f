"""Value checks: what a column cannot hold is refused with an
:class:`~hermes_repo.errors.IntegrityViolation` naming the field and the fix."""

from __future__ import annotations

import numbers
from collections.abc import MutableMapping
from typing import Any

from ..errors import IntegrityViolation
from .text import dumps, encode_text

__all__ = ["MAX_DEPTH", "MAX_TIMESTAMP", "check_server_text", "check_timestamp", "short_repr"]

#: Timestamps are epoch seconds in ``[0, MAX_TIMESTAMP)``: 3000-01-01T00:00:00Z.
MAX_TIMESTAMP = 32503680000.0
#: The deepest nesting a message field may hold: ``[]`` and ``{}`` are 1 level, ``"x"``
#: is 0. Every reader of the stored JSON must parse what the store accepted: Python's
#: parser stops near its recursion limit (1000 frames, fewer when the stack is already
#: deep), SQLite's JSON functions at 1000 levels, and a spool line or an export line
#: wraps the message in 2 to 3 more levels. 200 leaves a wide margin under all of them.
MAX_DEPTH = 200
_INT64 = (-(2**63), 2**63 - 1)


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


def short_repr(value: Any) -> str:
    """``repr(value)`` cut to 60 characters, for an error message; never raises (a value
    nested deeper than ``repr`` can follow, or whose ``repr`` fails, is named by type)."""
    try:
        text = repr(value)
    except RecursionError:
        return f"<{type(value).__name__} nested too deeply to show>"
    except Exception:  # a caller's object whose __repr__ raises must not mask the error
        return f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


_short = short_repr


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
        if isinstance(exc, RecursionError) or "nested too deeply" in detail:
            fix = f"flatten it to at most {MAX_DEPTH} levels (e.g. keep the deep part as JSON text)"
        elif "Circular" in detail:
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


# Row columns named as the message field they hold (the rest are named alike).
_FIELD_OF_COLUMN = {"content_text": "content", "content_parts": "content"}


def check_server_text(row: MutableMapping[str, Any]) -> None:
    """Refuse a row (made by ``message_to_row``) holding U+0000 in a text column, with an
    :class:`IntegrityViolation` naming the field: PostgreSQL text cannot hold that
    character, so the write could never succeed however often it were replayed. JSON
    columns are safe (the character is written as the escape ``\\u0000``); a SQLite
    store keeps the character and never calls this.

    The searchable copy of a content list (``content_text`` beside ``content_parts``)
    is derived, not the caller's text: there the character becomes U+FFFD in place, as
    a lone surrogate does, and the list itself is kept exactly.
    """
    for column, value in row.items():
        if value.__class__ is str and "\x00" in value:
            if column == "content_text" and row.get("content_parts") is not None:
                row["content_text"] = value.replace("\x00", "\ufffd")
                continue
            raise _bad(
                _FIELD_OF_COLUMN.get(column, column),
                "holds the character U+0000 (NUL), which PostgreSQL text cannot store",
                "remove it or replace it (e.g. with U+FFFD) before writing; a SQLite "
                "store keeps it as it is",
            )
