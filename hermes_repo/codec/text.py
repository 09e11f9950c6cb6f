"""JSON and text columns that hold any Python string, lone surrogates included: compact
JSON with surrogate escapes (:func:`dumps`, :func:`loads`) and the reversible encoding of a
text column (:func:`encode_text`, :func:`decode_text`). See :mod:`hermes_repo.codec`."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = [
    "NOT_UTF8",
    "TEXT_MARK",
    "decode_text",
    "dumps",
    "encode_text",
    "escape_surrogates",
    "has_surrogates",
    "kept_bytes",
    "lenient_text",
    "loads",
    "not_utf8",
    "scrub",
]

#: First character of a text column value stored in its reversible encoding.
TEXT_MARK = "\ufdd0"
_SURROGATE = re.compile("[\ud800-\udfff]")
_KEPT_BYTE = re.compile("[\udc80-\udcff]")
# A \\u escape of a surrogate (or of NUL, which the slow decoder uses as its marker),
# preceded by an even number of backslashes (so the backslash itself is not escaped).
_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)\\u(0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_PAIR = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_MARKED = re.compile("\x00(\x00|[0-9a-f]{4})")


def has_surrogates(text: str) -> bool:
    """True when ``text`` holds a lone surrogate (it cannot be encoded as UTF-8)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def lenient_text(data: bytes) -> str:
    """TEXT that is not UTF-8, read anyway: each bad byte a lone surrogate (U+DC80 to
    U+DCFF, Python's ``surrogateescape``), so the rest reads exactly and the stored bytes
    can be told back (``text.encode("utf-8", "surrogateescape")``). A driver text
    factory for the reads that meet such a value: it costs a Python call per value."""
    return data.decode("utf-8", "surrogateescape")


def kept_bytes(text: str) -> bool:
    """True when ``text`` (read by :func:`lenient_text`) holds a byte that is not UTF-8.

    The store never writes a lone surrogate as it is (:func:`encode_text` marks it), so
    one in the range :func:`lenient_text` uses came from bytes another tool wrote."""
    return not text.isascii() and _KEPT_BYTE.search(text) is not None


#: The name :func:`not_utf8` is registered under on a SQLite connection that checks
#: stored values (``hermes_not_utf8(CAST(column AS BLOB))``).
NOT_UTF8 = "hermes_not_utf8"


def not_utf8(data: bytes | None) -> int:
    """1 when the bytes of a stored TEXT value are not UTF-8, else 0 (a SQL function)."""
    if data is None:
        return 0
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return 1
    return 0


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

    Lone surrogates become ``\\udXXX`` escapes (see :mod:`hermes_repo.codec`; read it back
    with :func:`loads`). ``strict`` refuses NaN and infinite numbers (ValueError), as
    the store's columns do; without it they are written as Python's JSON writes them.
    A value nested deeper than the interpreter's stack allows raises ValueError
    (``nested too deeply``), never ``RecursionError``.
    """
    try:
        out = json.dumps(
            value,
            ensure_ascii=False,
            separators=(",", ":"),
            allow_nan=not strict,
            sort_keys=sort_keys,
        )
    except RecursionError:
        raise ValueError(
            "nested too deeply for JSON (deeper than Python's recursion limit allows)"
        ) from None
    return escape_surrogates(out)


def loads(text: str | bytes) -> Any:
    """Parse JSON written by :func:`dumps`, every ``\\udXXX`` escape as one code point.

    The standard parser joins a high and a low surrogate escape into one astral
    character; :func:`dumps` never escapes a real astral character, so here that pair
    stays two lone surrogates, exactly as they were written. Raises ValueError for text
    that is not JSON, including JSON nested deeper than the parser can follow (never
    ``RecursionError``).
    """
    try:
        return _loads(text)
    except RecursionError:
        raise ValueError(
            "JSON nested too deeply to read (deeper than Python's recursion limit allows)"
        ) from None


def _loads(text: str | bytes) -> Any:
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
    holds a lone surrogate or starts with :data:`TEXT_MARK` (see :mod:`hermes_repo.codec`)."""
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
