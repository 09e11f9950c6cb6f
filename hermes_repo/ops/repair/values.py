"""Rewrite the stored values the store cannot read as it writes them, keeping each as it was.

Another tool, an old version or a hand edit can leave values a read keeps aside under
``$invalid`` (:mod:`hermes_repo.ops.doctor.values` finds them). A read never fails on
them, but the session they are in replays without them: a tool call whose JSON is
malformed is not replayed, a text timestamp sorts nowhere. The repair rewrites each by a
fixed rule, in one write unit:

* ``timestamp`` (and a session's ``started_at``): a number in text (``"1700000000.5"``)
  becomes that number, an ISO 8601 date its epoch seconds (UTC when it names no zone),
  milliseconds (a plausible time times 1000) seconds; anything else (text that is no
  time, a blob, NaN, an infinity, a negative) takes the time of the row before it in its
  session, else the session's start, else the row after it, else 0. A session's
  ``ended_at`` no rule reads becomes NULL (the session is shown as not ended);
* ``token_count``: an integral number, or its text, becomes the integer; else NULL;
* a text column: bytes that are UTF-8 become that text, a number its text, text that is
  not UTF-8 gets U+FFFD for each bad byte; a blob that is not UTF-8 becomes NULL;
* a JSON column: text that is not UTF-8 gets U+FFFD for each bad byte, and is kept when
  it then reads; otherwise NULL, except malformed content parts of a message without
  text content, whose raw text becomes the content (readable and searchable as text).

Before a message row is rewritten, the row as it was is copied into an archived row of
the same session (``repair_original of #id``, as a transcript repair keeps a survivor):
every stored byte stays in the audit trail. Archived rows themselves are that trail and
are never rewritten. A session row has no archive: its old values are listed in the
report, and the SQLite repair's backup, taken first, holds them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, select, text

from ...backend import backend_of
from ...codec import MAX_TIMESTAMP, invalid_reason, raw_value
from ...codec.content import calls_text, content_columns
from ...codec.text import NOT_UTF8, encode_text, kept_bytes, lenient_text, loads, not_utf8
from ...core import WriteCore
from ...models import messages_table, sessions_table
from ...transcript.reconcile import keep_original
from ...uow import UnitOfWork
from ..doctor.values import OddValue, odd_values

__all__ = ["ValueFix", "ValueRepairSummary", "repair_values"]

_m = messages_table
_s = sessions_table
_INT64 = (-(2**63), 2**63 - 1)
_TIMES = ("timestamp", "started_at", "ended_at")
_JSON = ("content_parts", "tool_calls", "reasoning_details", "extra")


@dataclass(frozen=True)
class ValueFix:
    """One value rewritten: where, why, what it was and what it is now."""

    session_id: str
    message_id: int | None
    """None for a session's own field."""
    column: str
    reason: str
    was: Any
    """The stored value (as JSON can hold it: bytes and NaN as their ``repr``)."""
    now: Any
    """The value written (None: NULL)."""
    original_id: int | None
    """The archived copy of the message row as it was (None for a session field)."""

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (long values cut to 200 characters)."""
        return {
            "session_id": self.session_id,
            "message_id": self.message_id,
            "column": self.column,
            "reason": self.reason,
            "was": _cut(self.was),
            "now": _cut(self.now),
            "original_id": self.original_id,
        }


@dataclass(frozen=True)
class ValueRepairSummary:
    """What :func:`repair_values` rewrote."""

    fixes: tuple[ValueFix, ...]
    archived_kept: int
    """Odd values in archived rows: the audit trail, left as stored."""

    @property
    def rows_rewritten(self) -> int:
        """Rows (sessions and messages) that had at least one value rewritten."""
        return len({(f.session_id, f.message_id) for f in self.fixes})

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (what ``sessions repair --json`` prints under ``values``)."""
        return {
            "values_rewritten": len(self.fixes),
            "rows_rewritten": self.rows_rewritten,
            "archived_kept": self.archived_kept,
            "fixes": [f.as_dict() for f in self.fixes],
        }


def _cut(value: Any) -> Any:
    value = raw_value(value) if value is not None else None
    if isinstance(value, str) and len(value) > 200:
        return value[:200] + f"... ({len(value)} characters)"
    return value


def repair_values(
    store: WriteCore, *, clock: Callable[[], float] = time.time
) -> ValueRepairSummary:
    """Rewrite every unreadable value of the active rows (see the module docstring).

    One write unit: it scans again on each attempt, so a retried or replayed unit finds
    only what is still to rewrite. A store with nothing to rewrite gets no write.
    """
    found = store.read(lambda conn: _scan(conn))
    if not any(o.active for o in found):
        return ValueRepairSummary((), len(found))
    return store.write(lambda uow: _rewrite(uow, clock()))


@contextlib.contextmanager
def _lenient(conn: Connection) -> Iterator[None]:
    """On SQLite: TEXT read with each bad byte kept, and the encoding check registered."""
    if not backend_of(conn).is_file:
        yield
        return
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    dbapi.create_function(NOT_UTF8, 1, not_utf8, deterministic=True)
    before = dbapi.text_factory
    dbapi.text_factory = lenient_text
    try:
        yield
    finally:
        dbapi.text_factory = before


def _scan(conn: Connection) -> list[OddValue]:
    def rows(sql: str, params: Any) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.exec_driver_sql(sql, params)]

    with _lenient(conn):
        return list(odd_values(rows, backend_of(conn).name))


def _rewrite(uow: UnitOfWork, now: float) -> ValueRepairSummary:
    conn = uow.connection
    found = _scan(conn)
    fixes: list[ValueFix] = []
    by_row: dict[tuple[Any, Any], list[OddValue]] = {}
    for odd in found:
        if odd.active:
            by_row.setdefault((odd.session_id, odd.message_id), []).append(odd)
    # Sessions first: a message's fallback time may be its session's start.
    for (sid, mid), odds in sorted(by_row.items(), key=lambda kv: kv[0][1] is not None):
        if mid is None:
            fixes += _fix_session(conn, sid, odds)
    for (sid, mid), odds in sorted(
        ((k, v) for k, v in by_row.items() if k[1] is not None), key=lambda kv: kv[0][1]
    ):
        fixes += _fix_message(conn, sid, mid, odds, now)
    return ValueRepairSummary(tuple(fixes), sum(1 for o in found if not o.active))


def _fix_session(conn: Connection, sid: str, odds: list[OddValue]) -> list[ValueFix]:
    values: dict[str, Any] = {}
    for odd in odds:
        if odd.column == "extra":
            values["extra"] = _json_value("extra", odd.value)
        elif odd.column == "ended_at":
            values["ended_at"] = _seconds(odd.value)
        else:
            values["started_at"] = _seconds(odd.value)
            if values["started_at"] is None:
                values["started_at"] = _neighbour_time(conn, sid, None)
    conn.execute(_s.update().where(_s.c.id == sid).values(**values))
    return [
        ValueFix(sid, None, o.column, o.reason, raw_value(o.value), values[o.column], None)
        for o in odds
    ]


def _fix_message(
    conn: Connection, sid: str, mid: int, odds: list[OddValue], now: float
) -> list[ValueFix]:
    columns = {o.column for o in odds}
    values: dict[str, Any] = {}
    for odd in odds:
        column, value = odd.column, odd.value
        if column == "timestamp":
            seconds = _seconds(value)
            values[column] = seconds if seconds is not None else _neighbour_time(conn, sid, mid)
        elif column == "token_count":
            values[column] = _integer(value)
        elif column == "content":
            values.update(content_columns(_text(value)))
        elif column == "content_parts":
            parts = _json_value(column, value)
            if parts is not None:
                values.update(content_columns(loads(parts)))
            elif "content" not in columns and _content_is_empty(conn, mid):
                values.update(content_columns(_text(value)))
            else:
                values.update(content_parts=None, content_text=None)
        elif column in _JSON:
            values[column] = _json_value(column, value)
            if column == "tool_calls":  # its searchable text follows, derived as on append
                fixed = values[column]
                values["calls_text"] = None if fixed is None else calls_text(loads(fixed))
        else:
            fixed = _text(value)
            values[column] = None if fixed is None else encode_text(fixed)
    original = keep_original(conn, sid, mid, now)
    conn.execute(_m.update().where(_m.c.id == mid).values(**values))
    return [
        ValueFix(sid, mid, o.column, o.reason, raw_value(o.value), _now(o.column, values), original)
        for o in odds
    ]


def _now(column: str, values: dict[str, Any]) -> Any:
    if column in ("content", "content_parts"):
        return values.get("content_parts") or values.get("content")
    return values[column]


def _content_is_empty(conn: Connection, mid: int) -> bool:
    return conn.execute(select(_m.c.content).where(_m.c.id == mid)).scalar() is None


def _neighbour_time(conn: Connection, sid: str, mid: int | None) -> float:
    """The time of the row before ``mid`` in the session, else its start, else the row
    after, else 0 (``mid`` None: the first message's time, else 0).

    The range test keeps out what no rule reads: on SQLite text and blobs sort above
    every number, on PostgreSQL NaN does."""
    plausible = text(f"timestamp >= 0 AND timestamp < {MAX_TIMESTAMP!r}")
    base = select(_m.c.timestamp).where(_m.c.session_id == sid, plausible)
    queries = []
    if mid is not None:
        queries.append(base.where(_m.c.id < mid).order_by(_m.c.id.desc()).limit(1))
        queries.append(
            select(_s.c.started_at).where(
                _s.c.id == sid, text(f"started_at >= 0 AND started_at < {MAX_TIMESTAMP!r}")
            )
        )
        queries.append(base.where(_m.c.id > mid).order_by(_m.c.id).limit(1))
    else:
        queries.append(base.order_by(_m.c.id).limit(1))
    for query in queries:
        found = conn.execute(query).scalar()
        if found is not None:
            return float(found)
    return 0.0


def _plausible(seconds: float) -> float | None:
    if 0.0 <= seconds < MAX_TIMESTAMP:
        return seconds
    if seconds >= MAX_TIMESTAMP and seconds / 1000.0 < MAX_TIMESTAMP:
        return seconds / 1000.0  # milliseconds, as some tools store them
    return None


def _seconds(value: Any) -> float | None:
    """Epoch seconds read from a stored time by the rules above, or None."""
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return _plausible(number) if math.isfinite(number) else None
    if not isinstance(value, str):
        return None
    stripped = value.strip()
    try:
        number = float(stripped)
    except ValueError:
        pass
    else:
        return _plausible(number) if math.isfinite(number) else None
    try:
        when = dt.datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return _plausible(when.timestamp())


def _integer(value: Any) -> int | None:
    """An integral count read from a stored value, or None."""
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if isinstance(value, str):
        try:
            value = float(value.strip()) if "." in value or "e" in value.lower() else int(value)
        except ValueError:
            return None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and _INT64[0] <= value <= _INT64[1]:
        return value
    return None


def _text(value: Any) -> str | None:
    """Text read from a stored value by the rules above, or None."""
    if isinstance(value, str):
        if kept_bytes(value):
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float) and math.isfinite(value):
        return repr(value)
    return None


def _json_value(column: str, value: Any) -> str | None:
    """The stored JSON text, made readable when only its bytes were bad; else None."""
    fixed = _text(value) if isinstance(value, str | bytes) else None
    if fixed is None or invalid_reason(column, fixed) is not None:
        return None
    return fixed
