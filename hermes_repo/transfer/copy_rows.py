"""The batches of a store copy: each reads a bounded slice of the source and writes it to
the target in one transaction of its own.

Every pass walks a table in key order from a cursor, so memory holds one batch whatever
the store's size, and a run killed between two batches leaves the target holding a
prefix of each table, which the next run compares and skips.

Session counters follow the messages: a session is created in the target with zero
counters, each message batch adds what its rows bring (an active row 1 message and its
tool calls) in its own transaction, and a last pass (:func:`copy_counters`) sets them to
the source's own figures. So at every batch boundary, a kill included, a session's
counters count exactly the active rows the target holds, never rows it lacks. Rows are
compared whole:
a row missing from the target is inserted, a row the source changed since (a repair
archived it, a session ended) is updated, an equal row is left alone, and a row that is
another store's (a different message under the same id) is refused before anything is
written (:func:`refuse_foreign_rows`). Only SQLAlchemy Core on the model tables is used,
so both ends may be SQLite or PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import (
    BigInteger,
    Column,
    Integer,
    MetaData,
    Table,
    bindparam,
    insert,
    select,
    update,
)
from sqlalchemy.engine import Connection

from ..backend import Backend, backend_of
from ..codec import loads
from ..core import WriteCore
from ..errors import CopyConflictError, CopyError
from ..models import messages_table, sessions_table, state_meta_table
from ..schema.copy_mark import COPIED_FROM_KEY, COPY_MARK_KEY, STORE_ID_KEY
from ..schema.fts import STALE_KEY
from ..uow import UnitOfWork

__all__ = [
    "DERIVED_META_KEYS",
    "CopyConflictError",
    "CopyEndpoint",
    "CopyError",
    "TableTally",
    "copy_counters",
    "copy_links",
    "copy_messages",
    "copy_meta",
    "copy_sessions",
    "refuse_foreign_rows",
]

T = TypeVar("T")
A = TypeVar("A")
Row = dict[str, Any]

#: ``state_meta`` keys that describe the store they sit in, not the data: a copy neither
#: carries them over, nor counts them, nor refuses a target for holding them (the
#: target's index state, its id, its copy history and its unfinished-copy mark are its
#: own).
DERIVED_META_KEYS = frozenset({STALE_KEY, STORE_ID_KEY, COPIED_FROM_KEY, COPY_MARK_KEY})
_COUNTERS = ("message_count", "tool_call_count")


def _wide(table: Table) -> Table:
    """``table`` for reads and writes with its integers 64-bit, as SQLite stores them.

    PostgreSQL binds a value with a cast to the column's type: through an Integer
    column a token count of 2**40, which SQLite holds, would fail as int4.
    """
    copy = table.to_metadata(_WIDE)
    for column in copy.columns:
        if isinstance(column.type, Integer):
            column.type = BigInteger()
    return copy


_WIDE = MetaData()
_sessions, _messages, _meta = (_wide(t) for t in (sessions_table, messages_table, state_meta_table))
# Bound parameters of one INSERT stay far below SQLite's limit (32766) and PostgreSQL's
# (65535): 21 columns x 500 rows.
_ROWS_PER_INSERT = 500
# PostgreSQL text cannot hold U+0000, which SQLite text can.
_NUL = "\x00"
_CLEAN = (
    "copy into an empty store (a new folder, or a new PostgreSQL database), or remove "
    "the target's rows if they are not wanted"
)


#: Deprecated alias of :class:`~hermes_repo.core.WriteCore` (what a copy needs of
#: each end), kept for one release.
CopyEndpoint = WriteCore


@dataclass
class TableTally:
    """What a copy did to one table of the target."""

    inserted: int = 0
    updated: int = 0
    unchanged: int = 0

    def add(self, other: TableTally) -> None:
        self.inserted += other.inserted
        self.updated += other.updated
        self.unchanged += other.unchanged

    def as_dict(self) -> dict[str, int]:
        return {"inserted": self.inserted, "updated": self.updated, "unchanged": self.unchanged}


def _rows(conn: Connection, stmt: Any) -> list[Row]:
    return [dict(r._mapping) for r in conn.execute(stmt)]


def _in_unit(write: Callable[[Connection, A], T], arg: A, uow: UnitOfWork) -> T:
    return write(uow.connection, arg)


def _slice(table: Table, key: Column[Any], after: Any, limit: int) -> Any:
    stmt = select(table).order_by(key).limit(limit)
    return stmt if after is None else stmt.where(key > after)


def _batches(
    end: WriteCore, table: Table, key: Column[Any], size: int, where: Any = None
) -> Iterable[list[Row]]:
    """The rows of ``table`` in ``key`` order, one read transaction per batch."""
    after: Any = None
    while True:
        stmt = _slice(table, key, after, size)
        if where is not None:
            stmt = stmt.where(where)
        rows = end.read(partial(_rows, stmt=stmt))
        if not rows:
            return
        yield rows
        after = rows[-1][key.name]


def _changes(want: Row, have: Row, skip: frozenset[str] = frozenset()) -> Row:
    return {k: v for k, v in want.items() if k not in skip and have.get(k) != v}


def _check_text(rows: Sequence[Row], backend: Backend, table: str) -> None:
    if not backend.refuses_nul_text:
        return
    for row in rows:
        for column, value in row.items():
            if isinstance(value, str) and _NUL in value:
                key = row.get("id", row.get("key"))
                raise CopyError(
                    f"{table} row {key!r}: column {column} holds a NUL character "
                    "(U+0000), which PostgreSQL text cannot store; nothing of this "
                    "batch was written. Archive or edit that row in the source (or copy "
                    "into an SQLite store instead), then run the copy again: it resumes"
                )


# -- the passes ------------------------------------------------------------------------


def copy_sessions(source: WriteCore, target: WriteCore, size: int) -> TableTally:
    """Every session row; a parent link waits for :func:`copy_links` when its parent is
    not in the target yet (sessions are walked by id, not by compression chain)."""
    tally = TableTally()
    for rows in _batches(source, _sessions, _sessions.c.id, size):
        tally.add(target.write(partial(_in_unit, _write_sessions, rows)))
    return tally


def _write_sessions(conn: Connection, rows: list[Row]) -> TableTally:
    ids = [r["id"] for r in rows]
    have = {r["id"]: r for r in _rows(conn, select(_sessions).where(_sessions.c.id.in_(ids)))}
    parents = {r["parent_session_id"] for r in rows} - {None}
    present = set(conn.execute(select(_sessions.c.id).where(_sessions.c.id.in_(parents))).scalars())
    wanted = [
        # A parent not in the target yet is linked later, by copy_links; the counters
        # start at zero and grow with the messages (see the module's documentation).
        {
            **r,
            "parent_session_id": p if (p := r["parent_session_id"]) in present else None,
            "message_count": 0,
            "tool_call_count": 0,
        }
        for r in rows
    ]
    # A link the target already has stays: copy_links owns parent_session_id, and the
    # message batches and copy_counters own the counters.
    return _merge(conn, _sessions, wanted, have, skip=frozenset({"parent_session_id", *_COUNTERS}))


def _merge(
    conn: Connection,
    table: Table,
    rows: list[Row],
    have: dict[Any, Row],
    *,
    skip: frozenset[str] = frozenset(),
    check: Callable[[Row, Row], None] | None = None,
) -> TableTally:
    """Insert the rows ``have`` (the target's, by key) lacks, update those that differ
    (except in ``skip``), leave equal ones; ``check`` vets a pair before comparing.
    Each row found is taken out of ``have``, so what is left there the source lacks."""
    key = table.primary_key.columns[0]
    tally, fresh = TableTally(), []
    for row in rows:
        old = have.pop(row[key.name], None)
        if old is None:
            fresh.append(row)
            continue
        if check is not None:
            check(row, old)
        changed = _changes(row, old, skip)
        if changed:
            conn.execute(update(table).where(key == row[key.name]).values(changed))
            tally.updated += 1
        else:
            tally.unchanged += 1
    _check_text(fresh, backend_of(conn), table.name)
    _insert_rows(conn, table, fresh)
    tally.inserted = len(fresh)
    return tally


def _insert_rows(conn: Connection, table: Table, rows: list[Row]) -> None:
    """Insert ``rows`` (every column) with one multi-row INSERT per chunk.

    Not executemany: SQLite's FTS5 writes its pending index data out at each
    statement's savepoint, so a statement per row made thousands of tiny index segments
    (measured 8x slower than one statement per chunk). The SQL is written here, not by
    SQLAlchemy: compiling 10,000 bound parameters per chunk cost more than SQLite's work.
    """
    style = conn.dialect.paramstyle
    if style not in ("qmark", "format", "pyformat"):
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            conn.execute(insert(table), rows[start : start + _ROWS_PER_INSERT])
        return
    names = [c.name for c in table.columns]
    quote = conn.dialect.identifier_preparer.quote
    one = "(" + ", ".join(["?" if style == "qmark" else "%s"] * len(names)) + ")"
    head = f"INSERT INTO {quote(table.name)} ({', '.join(map(quote, names))}) VALUES "
    for start in range(0, len(rows), _ROWS_PER_INSERT):
        chunk = rows[start : start + _ROWS_PER_INSERT]
        params = tuple(row[name] for row in chunk for name in names)
        conn.exec_driver_sql(head + ", ".join([one] * len(chunk)), params)


def copy_links(source: WriteCore, target: WriteCore, size: int) -> int:
    """Set each session's parent as in the source, now that every session is present."""
    linked = 0
    has_parent = _sessions.c.parent_session_id.is_not(None)
    for rows in _batches(source, _sessions, _sessions.c.id, size, where=has_parent):
        want = {r["id"]: r["parent_session_id"] for r in rows}
        linked += target.write(partial(_in_unit, _link, want))
    return linked


def _link(conn: Connection, want: Mapping[str, str]) -> int:
    stmt = select(_sessions.c.id, _sessions.c.parent_session_id).where(
        _sessions.c.id.in_(list(want))
    )
    changed = 0
    for sid, parent in conn.execute(stmt):
        if parent != want[sid]:
            conn.execute(
                update(_sessions).where(_sessions.c.id == sid).values(parent_session_id=want[sid])
            )
            changed += 1
    return changed


def copy_messages(
    source: WriteCore,
    target: WriteCore,
    size: int,
    on_batch: Callable[[int], None],
) -> TableTally:
    """Every message with its id (the replay order), one transaction per batch."""
    tally = TableTally()
    for rows in _batches(source, _messages, _messages.c.id, size):
        tally.add(target.write(partial(_in_unit, _write_messages, rows)))
        on_batch(len(rows))
    return tally


def _write_messages(conn: Connection, rows: list[Row]) -> TableTally:
    lo, hi = rows[0]["id"], rows[-1]["id"]
    have = {
        r["id"]: r for r in _rows(conn, select(_messages).where(_messages.c.id.between(lo, hi)))
    }
    deltas = _counter_deltas(rows, have)
    tally = _merge(conn, _messages, rows, have, check=_same_message)
    if have:  # ids the source does not have, between two of its own
        extra = min(have)
        raise CopyConflictError(
            f"the target holds message id {extra} (session {have[extra]['session_id']!r}), "
            f"which the source does not have; it is another store's data; {_CLEAN}"
        )
    if deltas:
        conn.execute(
            update(_sessions)
            .where(_sessions.c.id == bindparam("b_sid"))
            .values(
                message_count=_sessions.c.message_count + bindparam("b_messages"),
                tool_call_count=_sessions.c.tool_call_count + bindparam("b_calls"),
            ),
            [
                {"b_sid": sid, "b_messages": d[0], "b_calls": d[1]}
                for sid, d in sorted(deltas.items())
            ],
        )
    if tally.inserted:
        # Explicit ids: the next append's id must follow the largest.
        backend_of(conn).continue_ids(conn, "messages", "id")
    return tally


def _counts_of(row: Mapping[str, Any] | None) -> tuple[int, int]:
    """What a stored message adds to its session's counters: active rows only."""
    if row is None or not row["active"]:
        return 0, 0
    calls = row["tool_calls"]
    if calls is None:
        return 1, 0
    try:
        value = loads(calls)
    except ValueError:
        return 1, 0  # as the store's recount reads it
    return 1, len(value) if isinstance(value, list) else 0


def _counter_deltas(rows: Sequence[Row], have: Mapping[Any, Row]) -> dict[str, tuple[int, int]]:
    """Per session, how this batch moves (message_count, tool_call_count)."""
    deltas: dict[str, tuple[int, int]] = {}
    for row in rows:
        old = have.get(row["id"])
        new_m, new_c = _counts_of(row)
        old_m, old_c = _counts_of(old)
        if (new_m, new_c) != (old_m, old_c):
            m, c = deltas.get(row["session_id"], (0, 0))
            deltas[row["session_id"]] = (m + new_m - old_m, c + new_c - old_c)
    return {sid: d for sid, d in deltas.items() if d != (0, 0)}


def copy_counters(source: WriteCore, target: WriteCore, size: int) -> int:
    """Set each session's counters to the source's figures; the sessions changed.

    After the message batches they already count the target's active rows; this
    carries over a source whose counters differ from its own rows (so the copy is
    exact), and is a no-op otherwise.
    """
    changed = 0
    for rows in _batches(source, _sessions, _sessions.c.id, size):
        want = {r["id"]: (r["message_count"], r["tool_call_count"]) for r in rows}
        changed += target.write(partial(_in_unit, _set_counters, want))
    return changed


def _set_counters(conn: Connection, want: Mapping[str, tuple[int, int]]) -> int:
    stmt = select(_sessions.c.id, _sessions.c.message_count, _sessions.c.tool_call_count).where(
        _sessions.c.id.in_(list(want))
    )
    changed = 0
    for sid, messages, calls in conn.execute(stmt):
        if (messages, calls) != want[sid]:
            conn.execute(
                update(_sessions)
                .where(_sessions.c.id == sid)
                .values(message_count=want[sid][0], tool_call_count=want[sid][1])
            )
            changed += 1
    return changed


def _same_message(want: Mapping[str, Any], have: Mapping[str, Any]) -> None:
    """A message is the same one when its session and idempotency key (uid) match."""
    if (want["session_id"], want["uid"]) != (have["session_id"], have["uid"]):
        raise CopyConflictError(
            f"message id {want['id']} is uid {have['uid']!r} of session "
            f"{have['session_id']!r} in the target but uid {want['uid']!r} of session "
            f"{want['session_id']!r} in the source; the target holds another store's "
            f"data; {_CLEAN}"
        )


def copy_meta(source: WriteCore, target: WriteCore, size: int) -> TableTally:
    """The canonical ``state_meta`` rows (not :data:`DERIVED_META_KEYS`)."""
    tally = TableTally()
    canonical = _meta.c.key.not_in(sorted(DERIVED_META_KEYS))
    for rows in _batches(source, _meta, _meta.c.key, size, where=canonical):
        tally.add(target.write(partial(_in_unit, _write_meta, rows)))
    return tally


def _write_meta(conn: Connection, rows: list[Row]) -> TableTally:
    keys = [r["key"] for r in rows]
    have = {r["key"]: r for r in _rows(conn, select(_meta).where(_meta.c.key.in_(keys)))}
    return _merge(conn, _meta, rows, have)


# -- refusing another store's data ---------------------------------------------------------


def refuse_foreign_rows(source: WriteCore, target: WriteCore, size: int) -> None:
    """Raise :class:`CopyConflictError` unless every row of the target is a row of the
    source (same session id and start; same message id, session and uid; same meta key).

    Run before anything is written, so another store's data is never merged into. An
    empty target (the common case) costs three one-row reads.
    """
    for rows in _batches(target, _sessions, _sessions.c.id, size):
        ids = [r["id"] for r in rows]
        stmt = select(_sessions.c.id, _sessions.c.started_at).where(_sessions.c.id.in_(ids))
        theirs = {r["id"]: r["started_at"] for r in source.read(partial(_rows, stmt=stmt))}
        for row in rows:
            if row["id"] not in theirs:
                raise CopyConflictError(
                    f"the target holds session {row['id']!r}, which the source does not "
                    f"have; it is another store's data; {_CLEAN}"
                )
            if theirs[row["id"]] != row["started_at"]:
                raise CopyConflictError(
                    f"session {row['id']!r} started at {row['started_at']} in the target "
                    f"but at {theirs[row['id']]} in the source; it is another store's "
                    f"session under the same id; {_CLEAN}"
                )
    narrow = select(_messages.c.id, _messages.c.session_id, _messages.c.uid).order_by(
        _messages.c.id
    )
    after = 0
    while True:
        stmt = narrow.where(_messages.c.id > after).limit(size)
        rows = target.read(partial(_rows, stmt=stmt))
        if not rows:
            break
        span = narrow.where(_messages.c.id.in_([r["id"] for r in rows]))
        theirs = {r["id"]: r for r in source.read(partial(_rows, stmt=span))}
        for row in rows:
            src = theirs.get(row["id"])
            if src is None:
                raise CopyConflictError(
                    f"the target holds message id {row['id']} (session "
                    f"{row['session_id']!r}), which the source does not have; it is "
                    f"another store's data; {_CLEAN}"
                )
            _same_message(src, row)
        after = rows[-1]["id"]
    canonical = _meta.c.key.not_in(sorted(DERIVED_META_KEYS))
    for rows in _batches(target, _meta, _meta.c.key, size, where=canonical):
        keys = [r["key"] for r in rows]
        stmt = select(_meta.c.key).where(_meta.c.key.in_(keys))
        known = {r["key"] for r in source.read(partial(_rows, stmt=stmt))}
        for key in keys:
            if key not in known:
                raise CopyConflictError(
                    f"the target's state_meta holds {key!r}, which the source does not "
                    f"have; it is another store's data; {_CLEAN}"
                )
