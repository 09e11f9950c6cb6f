"""The file of a session's messages that can never be stored:
``sessions/<sid>.rejected.jsonl``.

Both the transcript writer (a message a flush refuses) and the spool replay (a line or
record it cannot use) keep what they leave out here, with the reason, for an operator.
"""

from __future__ import annotations

import json
import math
import os
import reprlib
from typing import Any

from ..codec import dumps, escape_surrogates
from . import spool

__all__ = ["keep_rejected", "rejected_line"]


def keep_rejected(home: os.PathLike[str] | str, session_id: str, lines: list[bytes]) -> None:
    """Append encoded lines to ``sessions/<sid>.rejected.jsonl`` (under its lock, 0600,
    fsynced), each at most once: a line already in the file is not written again."""
    name = spool.pending_name(session_id, spool.REJECTED_SUFFIX)
    with spool.spool_lock(home, name):
        existing = spool.read_spool(home, name)
        # A crash between this append and the delete of the spool file makes the next
        # replay keep the same lines again: write each one once.
        have: set[bytes] = set()
        if existing is not None:
            have = {r.raw for r in existing.records} | {r.raw for r in existing.rejected}
        fresh = [line for line in dict.fromkeys(lines) if line not in have]
        if fresh:
            spool.append_lines(home, name, fresh)


def _repr_value(value: Any) -> dict[str, str]:
    return {"__repr__": repr(value)}


def rejected_line(reason: str, message: Any, where: dict[str, str] | None = None) -> bytes:
    """A refused message with its reason (and the store it was refused by: ``where``)
    as one line: JSON where JSON can say it (lone surrogates escaped, big integers as
    Python's JSON writes them), NaN, infinities and other values JSON cannot say as
    ``{"__repr__": ...}``; the whole message's repr when even that fails."""
    record: dict[str, Any] = {"_rejected": reason, **(where or {})}
    try:
        try:
            text = _json_line({**record, "message": message})
        except ValueError:  # NaN or an infinity: not JSON, so written as its repr
            text = _json_line({**record, "message": _finite(message)})
    except (TypeError, ValueError, RecursionError):
        try:
            shown = repr(message)
        except RecursionError:  # nested deeper than repr can follow: its first levels
            shown = _OUTLINE.repr(message)
        text = dumps({**record, "message_repr": shown}, strict=True)
    return text.encode("utf-8")


# The repr of a message too deep for repr(): 50 levels, nothing else cut.
_OUTLINE = reprlib.Repr()
_OUTLINE.maxlevel = 50
_OUTLINE.maxdict = _OUTLINE.maxlist = _OUTLINE.maxtuple = _OUTLINE.maxset = 10**9
_OUTLINE.maxstring = _OUTLINE.maxother = _OUTLINE.maxlong = 10**9


def _json_line(record: dict[str, Any]) -> str:
    text = json.dumps(
        record,
        ensure_ascii=False,
        separators=(",", ":"),
        default=_repr_value,
        allow_nan=False,
    )
    return escape_surrogates(text)


def _finite(value: Any, depth: int = 0) -> Any:
    """``value`` with each NaN or infinite float as ``{"__repr__": ...}`` (error path only)."""
    if depth > 200:
        raise RecursionError("too deeply nested")
    if isinstance(value, float) and not math.isfinite(value):
        return _repr_value(value)
    if isinstance(value, dict):
        return {k: _finite(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, depth + 1) for v in value]
    return value
