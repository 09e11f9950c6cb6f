"""Stored values the store cannot read as it writes them: each named by its row.

Rows written by another tool, an old version, a Hermes import or a hand edit may hold
what the store never writes: a timestamp stored as text, malformed JSON in a JSON
column, a blob in a text column, text that is not UTF-8, a count that is not an
integer. Reads never fail on them (:func:`hermes_repo.codec.row_to_message` keeps each
under ``$invalid``, exactly as stored); this check finds them so an operator knows
which rows hold them, and ``sessions repair`` rewrites them
(:mod:`hermes_repo.ops.repair.values`). It also names implausible times (milliseconds,
negative, infinite, NaN), which reads return as stored.

On SQLite one scan of ``messages`` (and one of ``sessions``) tests the column types
with ``typeof()``, the JSON with ``json_valid()`` and the text's encoding with a Python
function (SQLite stores whatever bytes a writer binds as TEXT); only the rows found are
read back, and Python names the reason. On PostgreSQL the column types already rule out
text in a number column, bytes in a text column and bad UTF-8; the ranges are tested in
SQL and the JSON columns (``text`` there) are parsed in pages.

Archived rows are the audit trail: a repair never rewrites them, so their odd values are
counted apart and make no finding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ...codec import MAX_TIMESTAMP, invalid_reason, raw_value
from ...codec.text import NOT_UTF8, kept_bytes
from .context import CheckResult, DoctorContext, Finding, file_size
from .server_context import ServerContext

__all__ = [
    "MAX_LISTED",
    "OddValue",
    "ValueFacts",
    "check_server_values",
    "check_values",
    "odd_values",
    "unreadable_reason",
]

#: Rows listed in the report (all are counted).
MAX_LISTED = 100
# Message columns checked, with the message field each holds.
_JSON = (
    ("content_parts", "content"),
    ("tool_calls", "tool_calls"),
    ("reasoning_details", "reasoning_details"),
    ("extra", "extra"),
)
_TEXT = ("content", "tool_call_id", "tool_name", "finish_reason", "reasoning", "api_content")
_FIELD = {**dict(_JSON), **{c: c for c in _TEXT}, "timestamp": "timestamp"}
_FIELD["token_count"] = "token_count"
_COLUMNS = ("timestamp", "token_count", *_TEXT, *(c for c, _ in _JSON))
_TIME_OK = f"(typeof({{c}}) IN ('real', 'integer') AND {{c}} >= 0 AND {{c}} < {MAX_TIMESTAMP!r})"


def _bad_bytes(column: str) -> str:
    # Called only for TEXT values: the cast hands the function the stored bytes, which
    # the driver would otherwise refuse to decode before the function saw them.
    return f"(typeof({column}) = 'text' AND {NOT_UTF8}(CAST({column} AS BLOB)))"


def _sqlite_bad(column: str) -> str:
    """A SQLite expression true when ``column`` holds what the store never writes."""
    if column == "timestamp":
        return "NOT " + _TIME_OK.format(c=column)
    if column == "token_count":
        return f"({column} IS NOT NULL AND typeof({column}) <> 'integer')"
    if column in _TEXT:
        return f"({column} IS NOT NULL AND (typeof({column}) <> 'text' OR {_bad_bytes(column)}))"
    if column == "extra":
        return (
            f"({column} IS NOT NULL AND (typeof({column}) <> 'text' OR CASE WHEN "
            f"json_valid({column}) THEN json_type({column}) <> 'object' ELSE 1 END "
            f"OR {_bad_bytes(column)}))"
        )
    return (
        f"({column} IS NOT NULL AND (typeof({column}) <> 'text' OR NOT json_valid({column}) "
        f"OR {_bad_bytes(column)}))"
    )


_ANY_BAD = " OR ".join(_sqlite_bad(c) for c in _COLUMNS)
_MESSAGES_SQL = (
    f"SELECT id, session_id, active, {', '.join(_COLUMNS)} FROM messages WHERE {_ANY_BAD} "
    "ORDER BY id"
)
_SESSIONS_SQL = (
    "SELECT id, started_at, ended_at, extra FROM sessions WHERE "
    f"NOT {_TIME_OK.format(c='started_at')} "
    f"OR (ended_at IS NOT NULL AND NOT {_TIME_OK.format(c='ended_at')}) "
    f"OR {_sqlite_bad('extra')} ORDER BY id"
)

# PostgreSQL: numbers out of range in SQL (NaN sorts above every number there), JSON
# columns parsed here, a page of rows at a time.
_PG_PAGE = 2000
_PG_TIMES_SQL = (
    "SELECT id, session_id, active, timestamp FROM messages "
    f"WHERE NOT (timestamp >= 0 AND timestamp < {MAX_TIMESTAMP!r}) ORDER BY id"
)
_PG_SESSIONS_SQL = (
    "SELECT id, started_at, ended_at, extra FROM sessions "
    f"WHERE NOT (started_at >= 0 AND started_at < {MAX_TIMESTAMP!r}) "
    f"OR NOT (coalesce(ended_at, 0) >= 0 AND coalesce(ended_at, 0) < {MAX_TIMESTAMP!r}) "
    "OR extra IS NOT NULL ORDER BY id"
)
_PG_JSON_SQL = (
    f"SELECT id, session_id, active, {', '.join(c for c, _ in _JSON)} FROM messages "
    f"WHERE id > %(after)s AND ({' OR '.join(f'{c} IS NOT NULL' for c, _ in _JSON)}) "
    f"ORDER BY id LIMIT {_PG_PAGE}"
)

#: Runs a read: ``rows(sql, params)`` (the doctor's connection, or a repair's).
Rows = Callable[[str, Any], list[tuple[Any, ...]]]


class OddValue(NamedTuple):
    """One stored value the store cannot read as it writes it."""

    session_id: Any
    message_id: Any
    """None for a session's own field."""
    column: str
    value: Any
    """As stored (TEXT that is not UTF-8 read with each bad byte a lone surrogate)."""
    reason: str
    active: bool
    """False for an archived row (the audit trail: never rewritten)."""


def odd_values(rows: Rows, dialect: str) -> Iterator[OddValue]:
    """Every value of the store the store cannot read as it writes it, sessions first.

    On SQLite the connection behind ``rows`` must read TEXT leniently
    (:func:`~hermes_repo.codec.text.lenient_text`) and have
    :func:`~hermes_repo.codec.text.not_utf8` registered as :data:`NOT_UTF8`.
    """
    if dialect == "sqlite":
        yield from _sqlite_odd(rows)
    else:
        yield from _server_odd(rows)


def _one(sid: Any, mid: Any, column: str, value: Any, active: bool) -> Iterator[OddValue]:
    reason = unreadable_reason(column, value)
    if reason is not None:
        yield OddValue(sid, mid, column, value, reason, active)


def _sqlite_odd(rows: Rows) -> Iterator[OddValue]:
    for row in rows(_SESSIONS_SQL, ()):
        for column, value in zip(("started_at", "ended_at", "extra"), row[1:], strict=True):
            if column != "ended_at" or value is not None:
                yield from _one(row[0], None, column, value, True)
    for row in rows(_MESSAGES_SQL, ()):
        for column, value in zip(_COLUMNS, row[3:], strict=True):
            yield from _one(row[1], row[0], column, value, bool(row[2]))


def _server_odd(rows: Rows) -> Iterator[OddValue]:
    for sid, started, ended, extra in rows(_PG_SESSIONS_SQL, {}):
        yield from _one(sid, None, "started_at", started, True)
        if ended is not None:
            yield from _one(sid, None, "ended_at", ended, True)
        yield from _one(sid, None, "extra", extra, True)
    for mid, sid, active, stamp in rows(_PG_TIMES_SQL, {}):
        yield from _one(sid, mid, "timestamp", stamp, bool(active))
    after = 0
    while True:
        page = rows(_PG_JSON_SQL, {"after": after})
        for row in page:
            for (column, _), value in zip(_JSON, row[3:], strict=True):
                yield from _one(row[1], row[0], column, value, bool(row[2]))
        if len(page) < _PG_PAGE:
            break
        after = page[-1][0]


def unreadable_reason(column: str, value: Any) -> str | None:
    """Why the stored ``value`` of ``column`` (of ``messages``, or ``started_at``,
    ``ended_at``, ``extra`` of ``sessions``) is not what the store writes, or None."""
    if value.__class__ is str and kept_bytes(value):
        return "text that is not UTF-8 (another encoding, or cut bytes)"
    if column in ("timestamp", "started_at", "ended_at"):
        if value.__class__ in (float, int) and not 0.0 <= value < MAX_TIMESTAMP:
            return f"not plausible epoch seconds ({raw_value(value)})"  # NaN included
        return invalid_reason("timestamp", value)
    if column in _TEXT:
        if value is None or value.__class__ is str:
            return None
        return f"not text (stored as {type(value).__name__})"
    return invalid_reason(column, value)


@dataclass
class ValueFacts:
    """Stored values the store cannot read as it writes them (first :data:`MAX_LISTED`)."""

    title = "stored values"
    count: int = 0
    #: Odd values in archived rows (the audit trail, never rewritten): counted only.
    archived: int = 0
    #: ``{"session_id", "message_id" (None for a session's own field), "field",
    #: "column", "reason", "raw" (cut to 200 characters)}`` per value.
    invalid: list[dict[str, Any]] = field(default_factory=list)

    def add(self, odd: OddValue) -> None:
        """Count a value (and list it while the list is short)."""
        if not odd.active:
            self.archived += 1
            return
        self.count += 1
        if len(self.invalid) < MAX_LISTED:
            self.invalid.append(
                {
                    "session_id": odd.session_id,
                    "message_id": odd.message_id,
                    "field": _FIELD.get(odd.column, odd.column)
                    if odd.message_id is not None
                    else odd.column,
                    "column": odd.column,
                    "reason": odd.reason,
                    "raw": _cut(raw_value(odd.value)),
                }
            )

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return {
            "unreadable": self.count,
            "archived_unreadable": self.archived,
            "values": list(self.invalid),
        }

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        out = [("unreadable", f"{self.count} value(s)" if self.count else "none")]
        if self.archived:
            out.append(("in archived rows", f"{self.archived} value(s), kept as the audit trail"))
        out += [(_where(v), f"{v['field']}: {v['reason']}") for v in self.invalid[:10]]
        return out


def _cut(raw: Any) -> Any:
    """A raw value short enough for a report (the export keeps it whole)."""
    if isinstance(raw, str) and len(raw) > 200:
        return raw[:200] + f"... ({len(raw)} characters)"
    return raw


def _where(value: dict[str, Any]) -> str:
    if value["message_id"] is None:
        return f"session {value['session_id']}"
    return f"message {value['message_id']} of session {value['session_id']}"


def _finding(ctx: DoctorContext, facts: ValueFacts) -> Finding:
    listed = "; ".join(f"{_where(v)}: {v['field']} ({v['reason']})" for v in facts.invalid[:5])
    more = f"; and {facts.count - 5} more" if facts.count > 5 else ""
    sid = facts.invalid[0]["session_id"]
    export = ctx.command(f"hermes-repo sessions export {sid}")
    repair = ctx.command("hermes-repo sessions repair")
    return Finding(
        "value-unreadable",
        "warning",
        f"{facts.count} stored value(s) are not what the store writes (another tool, an old "
        f"version or a hand edit): {listed}{more}. Reads never fail on them: a value its "
        "column cannot hold is kept under `$invalid`, exactly as stored, and an implausible "
        "time is returned as stored",
        f"nothing is lost as it is (`{export}` shows each raw value under `$invalid`); stop "
        f"every process using the store, then run `{repair}`: it rewrites each value by a "
        "fixed rule (a number or date in text becomes epoch seconds, bad bytes U+FFFD, what "
        "no rule reads NULL) and keeps each message row as it was as an archived row",
    )


def check_values(ctx: DoctorContext) -> CheckResult:
    """Unreadable stored values on a SQLite store: one scan of each canonical table."""
    if not ctx.exists or file_size(ctx.db_path) == 0 or not ctx.header_ok:
        return CheckResult("values", None)
    if any(f.code == "file-damaged" for f in ctx.findings):
        # Rows read from damaged pages say nothing about what was stored: the salvage
        # (`sessions salvage`) is the next step, and it reads every value again.
        return CheckResult("values", None)
    tables = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"messages", "sessions"} <= tables:
        return CheckResult("values", None)  # no schema yet: check_store reports it
    facts = ValueFacts()
    for odd in odd_values(ctx.rows, "sqlite"):
        facts.add(odd)
    return CheckResult("values", facts, [_finding(ctx, facts)] if facts.count else [])


def _server(ctx: DoctorContext) -> ServerContext:
    assert isinstance(ctx, ServerContext)  # SERVER_CHECKS run on a server's context
    return ctx


def check_server_values(ctx: DoctorContext) -> CheckResult:
    """Unreadable stored values on a PostgreSQL store (see the module docstring)."""
    if any(f.code.startswith(("schema-", "server-")) for f in ctx.findings):
        return CheckResult("values", None)  # no store tables to read
    facts = ValueFacts()
    for odd in odd_values(_server(ctx).rows, "postgresql"):
        facts.add(odd)
    return CheckResult("values", facts, [_finding(ctx, facts)] if facts.count else [])
