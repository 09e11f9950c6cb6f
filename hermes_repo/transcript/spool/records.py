"""Spool records: one JSON object a line, and how a file's bytes parse into them.

``<home>/sessions/<sid>.pending.jsonl`` is a retry queue, one JSON object a line::

    {"_fallback_timestamp": 1718000000.5, "session_id": "chat-1", "message": {...}}

Records carry their session id, and replay checks it against the file's: a record of
another session is kept (rejected with the reason), never replayed into this one.
They also name the store they belong to: ``store_id`` (the store's id, see
:mod:`hermes_repo.store_id`) when the writer knew it, and ``target`` (the fingerprint
of the store's file or server, never a password) always; a replay writes a record only
into that store. Records without them (older versions) and plain message dicts
(``{"role": ...}``, written by older tools) are read too.

A line that cannot be parsed, whatever the reason (bad JSON, nested deeper than the
parser goes, too big for memory), is a rejected line with the reason: it never blocks
the lines after it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...codec import dumps

FALLBACK_KEY = "_fallback_timestamp"
SESSION_KEY = "session_id"
#: The source of the session the record was written for (a replay that creates the
#: session gives it that source, so a framework door finds its own session again).
SOURCE_KEY = "source"
#: The id of the store the record belongs to (``state_meta`` key ``store_id``).
STORE_KEY = "store_id"
#: The fingerprint of the store's target (file path or server URL without password).
TARGET_KEY = "target"


@dataclass(frozen=True)
class SpoolOwner:
    """The store a spool record belongs to: its id when the writer knew it, and the
    target the writer wrote to (or tried to open)."""

    store_id: str | None = None
    target: str | None = None

    @property
    def known(self) -> bool:
        """The record names a store (False: written by an older version)."""
        return bool(self.store_id or self.target)

    def fields(self) -> dict[str, str]:
        """The record keys that say it (none for an unknown owner)."""
        out = {}
        if self.store_id:
            out[STORE_KEY] = self.store_id
        if self.target:
            out[TARGET_KEY] = self.target
        return out


@dataclass(frozen=True)
class SpoolRecord:
    """One usable line of a spool file."""

    line_no: int  # 1-based
    message: dict[str, Any]
    fallback_timestamp: float | None  # None for a plain (unwrapped) record
    raw: bytes
    session_id: str | None = None  # the session the record says it belongs to (None: older)
    source: str | None = None  # the session's source when the writer knew it (None: older)
    owner: SpoolOwner = SpoolOwner()  # the store it belongs to (unknown: older)


@dataclass(frozen=True)
class RejectedLine:
    """A line that cannot be replayed, kept byte for byte with the reason."""

    line_no: int
    raw: bytes
    reason: str


@dataclass(frozen=True)
class SpoolContents:
    """A spool file parsed: usable records and rejected lines, both in file order."""

    records: list[SpoolRecord]
    rejected: list[RejectedLine]
    size: int
    mtime: float

    @property
    def oldest_at(self) -> float | None:
        """When the oldest record was spooled: its fallback time, or for a plain record
        (which has none) the message's own timestamp."""
        times = []
        for r in self.records:
            t = r.fallback_timestamp
            if t is None:
                t = _number(r.message.get("timestamp"))
            if t is not None:
                times.append(t)
        return min(times) if times else None


def wrap(
    message: Mapping[str, Any],
    at: float | None = None,
    session_id: str | None = None,
    source: str | None = None,
    owner: SpoolOwner | None = None,
) -> dict[str, Any]:
    """The spool record of ``message``: ``{"_fallback_timestamp": t, "session_id":
    sid, "source": s, "store_id": id, "target": t, "message": m}`` (no key for what is
    None)."""
    record: dict[str, Any] = {FALLBACK_KEY: time.time() if at is None else at}
    if session_id is not None:
        record[SESSION_KEY] = session_id
    if source is not None:
        record[SOURCE_KEY] = source
    if owner is not None:
        record.update(owner.fields())
    record["message"] = dict(message)
    return record


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def parse_line(line_no: int, raw: bytes) -> SpoolRecord | RejectedLine:
    """One line of a spool file (without its newline) as a record, or why not."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return RejectedLine(line_no, raw, f"not valid JSON ({exc})")
    except RecursionError:
        return RejectedLine(
            line_no, raw, "nested deeper than the JSON parser goes; no message is that deep"
        )
    except MemoryError:
        return RejectedLine(line_no, raw, f"a line of {len(raw)} bytes does not fit in memory")
    if not isinstance(obj, dict):
        return RejectedLine(line_no, raw, f"a JSON {type(obj).__name__}, not an object")
    if FALLBACK_KEY in obj or "message" in obj:
        message = obj.get("message")
        if not isinstance(message, dict):
            return RejectedLine(line_no, raw, "wrapped record without a message object")
        sid = obj.get(SESSION_KEY)
        if sid is not None and not isinstance(sid, str):
            return RejectedLine(line_no, raw, f"record session id is a {type(sid).__name__}")
        source = obj.get(SOURCE_KEY)
        store_id, target = obj.get(STORE_KEY), obj.get(TARGET_KEY)
        for key, value in ((STORE_KEY, store_id), (TARGET_KEY, target)):
            if value is not None and not isinstance(value, str):
                # Which store it belongs to cannot be told: replaying it anywhere
                # could put it into another store.
                return RejectedLine(line_no, raw, f"record {key} is a {type(value).__name__}")
        return SpoolRecord(
            line_no,
            message,
            _number(obj.get(FALLBACK_KEY)),
            raw,
            sid,
            source if isinstance(source, str) else None,
            SpoolOwner(store_id or None, target or None),
        )
    if "role" in obj:
        return SpoolRecord(line_no, obj, None, raw)
    return RejectedLine(line_no, raw, "neither a wrapped record nor a message (no role)")


def parse_spool(
    data: bytes,
    *,
    size: int | None = None,
    mtime: float = 0.0,
    session_id: str | None = None,
) -> SpoolContents:
    """Parse a whole spool file's bytes.

    Lines are split on ``\\n`` bytes only: ``str.splitlines`` would also split inside
    text holding U+2028 or other Unicode line breaks, which JSON leaves unescaped.
    Blank lines are skipped. A last line without its newline is a torn append unless it
    parses; either way it is never fatal.

    With ``session_id`` (the session the file belongs to), a record that names another
    session becomes a rejected line: replaying it would put one session's message
    into another's transcript.
    """
    records: list[SpoolRecord] = []
    rejected: list[RejectedLine] = []
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        parsed = parse_line(i, raw)
        if (
            session_id is not None
            and isinstance(parsed, SpoolRecord)
            and parsed.session_id is not None
            and parsed.session_id != session_id
        ):
            parsed = RejectedLine(
                i,
                raw,
                f"record of session {parsed.session_id!r} in the spool file of session "
                f"{session_id!r}; not replayed into either",
            )
        if isinstance(parsed, SpoolRecord):
            records.append(parsed)
        else:
            rejected.append(parsed)
    return SpoolContents(records, rejected, len(data) if size is None else size, mtime)


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One spool line (without newline): compact JSON, non-ASCII kept as UTF-8."""
    return dumps(record).encode("utf-8")
