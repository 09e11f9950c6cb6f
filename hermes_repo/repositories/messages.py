"""Messages: append (the hot path, Core statements) and ordered reads."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from typing import Any, cast

from sqlalchemy import bindparam, func, insert, select, text, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from ..backend import backend_of
from ..codec import (
    MESSAGE_COLUMNS,
    ROW_COLUMNS,
    check_server_text,
    loads,
    message_to_row,
    new_uid,
    row_to_message,
    tool_call_count,
)
from ..errors import NotFoundError
from ..identity import Identities
from ..ids import check_session_id
from ..models import messages_table, sessions_table
from .statements import Cursor, Db, Statement, execute, on_cursor, on_server_cursor, rows

__all__ = [
    "APPEND_ROWS_PER_INSERT",
    "BUMP_COUNTERS_SQL",
    "INSERT_MESSAGE_SQL",
    "MessageRepository",
    "insert_multi",
    "multi_insert_parts",
    "multi_insert_sql",
]

_messages = messages_table
_sessions = sessions_table
#: Most rows per INSERT of :func:`insert_multi` (:meth:`MessageRepository.insert_rows`).
_MULTI_ROWS = 1024
#: Up to this many rows (a transcript flush, a small batch) go in ONE statement of
#: exactly that many rows: one FTS5 segment an index for the whole batch.
_EXACT_ROWS = 64
#: Most rows per INSERT of an append's batch (``append_many``, ``append_rows``). With
#: statements of up to 1,024 rows, FTS5 kept larger young segments (11 / 12 segments an
#: index after the benchmarks' realistic x0.05 fill, against 18 / 19 with a statement a
#: row) and single appends after such a fill were slower in three back-to-back pairs
#: (1.15-1.31 against 1.00-1.10 ms of CPU on average); with 64 rows the fill left 9 / 6
#: and the appends were within the noise of a statement a row (docs/performance.md).
APPEND_ROWS_PER_INSERT = 64
_columns = [_messages.c[name] for name in MESSAGE_COLUMNS]
_insert = insert(_messages)
# The append's two statements, each defined once; built once (constructing a statement
# per append cost more than executing it), run through SQLAlchemy or on the cursor.
_bump = Statement(
    update(_sessions)
    .where(_sessions.c.id == bindparam("sid"))
    .values(
        message_count=_sessions.c.message_count + bindparam("n_messages"),
        tool_call_count=_sessions.c.tool_call_count + bindparam("n_calls"),
    )
)
_append = Statement(_insert, column_keys=ROW_COLUMNS)
# The one-message append on a server's cursor: its new key comes back with the INSERT
# (the statement SQLAlchemy itself sends for ``_append`` on PostgreSQL).
_append_returning = Statement(_insert.returning(_messages.c.id), column_keys=ROW_COLUMNS)
#: The append's statements as the driver runs them (named parameters).
BUMP_COUNTERS_SQL = _bump.sql
INSERT_MESSAGE_SQL = _append.sql
# json_array_length of a valid JSON array, as tool_call_count counts a list.
_recount = text(
    "UPDATE sessions SET "
    "message_count = (SELECT count(*) FROM messages WHERE session_id = :sid AND active = 1), "
    "tool_call_count = (SELECT coalesce(sum(CASE WHEN json_valid(tool_calls) "
    "AND json_type(tool_calls) = 'array' THEN json_array_length(tool_calls) ELSE 0 END), 0) "
    "FROM messages WHERE session_id = :sid AND active = 1) "
    "WHERE id = :sid"
)
# Elsewhere (PostgreSQL 15 has no test for valid JSON: a cast of an imported row's
# malformed text would fail the whole statement) the calls are counted here, by the
# same rule, from the active rows' JSON text.
_active_calls = select(_messages.c.tool_calls).where(
    _messages.c.session_id == bindparam("sid"),
    _messages.c.active == 1,
    _messages.c.tool_calls.is_not(None),
)
_set_counters = (
    update(_sessions)
    .where(_sessions.c.id == bindparam("sid"))
    .values(message_count=bindparam("n_messages"), tool_call_count=bindparam("n_calls"))
)
_count_active = (
    select(func.count())
    .select_from(_messages)
    .where(_messages.c.session_id == bindparam("sid"), _messages.c.active == 1)
)


def _calls_in(text_value: str) -> int:
    """How many calls a stored ``tool_calls`` text holds: a JSON array's length, else 0."""
    try:
        value = loads(text_value)
    except ValueError:
        return 0
    return len(value) if isinstance(value, list) else 0


_SQLALCHEMY = (Connection, Session)


# The session's messages in replay order, one statement per shape of the read (archived
# rows or not, after an id or not, a limit or not, the first or the newest rows), compiled
# once on first use.
_LISTS: dict[tuple[bool, bool, bool, bool], Statement] = {}


def _list_statement(include_inactive: bool, after: bool, limit: bool, newest: bool) -> Statement:
    key = (include_inactive, after, limit, newest)
    stmt = _LISTS.get(key)
    if stmt is None:
        query = select(*_columns).where(_messages.c.session_id == bindparam("sid"))
        if not include_inactive:
            query = query.where(_messages.c.active == bindparam("active"))
        if after:
            query = query.where(_messages.c.id > bindparam("after_id"))
        # The newest rows are read backwards on the (session_id, id) index and turned
        # round by the caller: a tail of a long session never reads its head.
        query = query.order_by(_messages.c.id.desc() if newest else _messages.c.id)
        if limit:
            # An explicit offset: SQLite's LIMIT renders one, which a cursor must be given.
            query = query.limit(bindparam("limit")).offset(bindparam("offset"))
        stmt = _LISTS[key] = Statement(query)
    return stmt


def multi_insert_parts(
    count: int, width: int, sqlite_version: tuple[int, ...], most_rows: int = _MULTI_ROWS
) -> list[int]:
    """How many rows each INSERT of :func:`insert_multi` carries, in order, for ``count``
    rows of ``width`` columns: all of them in one statement up to 64 rows, else powers
    of two (a handful of distinct statement texts, which the driver's statement cache
    keeps: one text per row count would fill it with large texts) until 64 or fewer are
    left, never more than ``most_rows``. Bounded by SQLite's limit on bound variables,
    32766 (999 before 3.32)."""
    limit = 32766 if sqlite_version >= (3, 32, 0) else 999
    most = max(1, min(most_rows, limit // width))
    exact = min(_EXACT_ROWS, most)
    parts: list[int] = []
    left = count
    while left > 0:
        per = left if left <= exact else 1 << (min(most, left).bit_length() - 1)
        parts.append(per)
        left -= per
    return parts


@lru_cache(maxsize=256)
def multi_insert_sql(keys: tuple[str, ...], rows: int) -> str:
    """The INSERT of ``rows`` rows of the columns ``keys`` (qmark placeholders)."""
    one = "(" + ",".join("?" * len(keys)) + ")"
    return f"INSERT INTO messages ({', '.join(keys)}) VALUES " + ",".join([one] * rows)


def insert_multi(db: Db, batch: list[Mapping[str, Any]], most_rows: int = _MULTI_ROWS) -> None:
    """SQLite: insert ``batch`` (rows with the same keys) in list order, many rows per
    INSERT statement, on a driver cursor or through SQLAlchemy. The rows of one VALUES
    list are inserted in their order, so the ids follow the list.

    Not executemany: each statement that fires the full-text triggers opens a savepoint,
    and FTS5 writes its pending terms out as a new segment at every savepoint. One row
    per statement wrote one segment per row per index (10 for a flush of 10, 1,000 for
    a batch of 1,000), each merged later and each probed by every MATCH until then; a
    flush of 10 onto a 20,000-message session took 1.28 ms of CPU that way against
    0.70 ms as one statement."""
    keys = tuple(batch[0])
    width = len(keys)
    run: Callable[[str, tuple[Any, ...]], Any]
    if on_cursor(db):
        run = cast(Cursor, db).execute
        module = sys.modules.get(type(db).__module__)
        version = getattr(module, "sqlite_version_info", (3, 0, 0))
    else:
        conn = db.connection() if isinstance(db, Session) else cast(Connection, db)
        run = conn.exec_driver_sql
        version = getattr(conn.dialect.loaded_dbapi, "sqlite_version_info", (3, 0, 0))
    # One row's values in column order, taken in C (a generator over every value cost
    # as much as the mapping of an imported row).
    values = itemgetter(*keys) if width > 1 else lambda row: (row[keys[0]],)
    start = 0
    for per in multi_insert_parts(len(batch), width, version, most_rows):
        part = batch[start : start + per]
        run(multi_insert_sql(keys, per), tuple(chain.from_iterable(map(values, part))))
        start += per


_archive_active = (
    update(_messages)
    .where(_messages.c.session_id == bindparam("sid"), _messages.c.active == 1)
    .values(active=0, archived_at=bindparam("at"), archive_reason=bindparam("reason"))
)
_archive_one = _archive_active.where(_messages.c.uid == bindparam("b_uid"))


class MessageRepository:
    """Reads and writes ``messages`` rows inside the caller's transaction.

    Appends keep the session's counters (active messages, tool calls) in step in the same
    transaction, so a listing never disagrees with the transcript. The appends also run
    on a driver cursor (see :mod:`.statements`: the store's one-message fast path), and
    so does :meth:`list` (the store's load path); the other methods need SQLAlchemy.

    ``ids`` (the unit of work's) gives a message handed over without a uid the same uid
    on every attempt of a write, and records the rows inserted (see
    :mod:`hermes_repo.identity`).
    """

    def __init__(self, db: Db, *, ids: Identities | None = None) -> None:
        self._db = db
        self._ids = ids
        # A server's text refuses U+0000: refused up front, named, never replayed.
        # (A cursor is SQLite's, or psycopg's for the server's one-message append.)
        self._server_cursor = on_server_cursor(db)
        self._on_server = self._server_cursor or (
            isinstance(db, _SQLALCHEMY) and not backend_of(db).is_file
        )

    @property
    def _session(self) -> Connection | Session:
        return self._db  # type: ignore[return-value]

    def _bump_counters(self, session_id: str, messages: int, tool_calls: int) -> None:
        rowcount, _ = execute(
            self._db, _bump, {"sid": session_id, "n_messages": messages, "n_calls": tool_calls}
        )
        if rowcount == 0:
            raise NotFoundError(
                f"session {session_id!r} does not exist; create it first "
                "(uow.sessions.create(..., id=...))"
            )

    def _with_uid(self, message: Mapping[str, Any]) -> Mapping[str, Any]:
        """``message``, given the unit's next uid when it has none (the same on every
        attempt of the write; the caller's dict is left as it is)."""
        ids = self._ids
        if ids is None or message.get("uid"):
            return message
        return {**message, "uid": ids.take("uid", new_uid)}

    def append(self, session_id: str, message: Mapping[str, Any]) -> int:
        """Insert one message at the end of the session; returns its row id."""
        message = self._with_uid(message)
        row = message_to_row(check_session_id(session_id), message)
        return self.append_row(row, tool_call_count(message))

    def append_row(self, row: Mapping[str, Any], tool_calls: int) -> int:
        """Insert a row made by :func:`codec.message_to_row`; returns its row id."""
        if self._on_server:
            row = dict(row)  # the caller's row stays as it was (a retry reuses it)
            check_server_text(row)
        self._bump_counters(row["session_id"], 1, tool_calls)
        _, rowid = execute(self._db, _append_returning if self._server_cursor else _append, row)
        assert rowid is not None  # an INSERT into a rowid table always sets it
        if self._ids is not None:
            self._ids.rows_inserted([row])
        return rowid

    def append_many(self, session_id: str, messages: Iterable[Mapping[str, Any]]) -> int:
        """Insert many messages in order (ids follow the list); returns how many."""
        batch = [self._with_uid(m) for m in messages]
        if not batch:
            return 0
        check_session_id(session_id)
        rows = [message_to_row(session_id, m) for m in batch]
        return self.append_rows(session_id, rows, sum(tool_call_count(m) for m in batch))

    def append_rows(
        self, session_id: str, rows: Iterable[Mapping[str, Any]], tool_calls: int
    ) -> int:
        """Insert rows made by :func:`codec.message_to_row` for ``session_id``, in order
        (ids follow the list; on SQLite a few multi-row INSERTs, see :func:`insert_multi`);
        ``tool_calls`` is their total of calls. Returns how many.
        The rows are not changed (a retry of the unit reuses them)."""
        batch = list(rows)
        if not batch:
            return 0
        if self._on_server:
            copies = [dict(row) for row in batch]
            for copy in copies:
                check_server_text(copy)
            batch = list(copies)
        self._bump_counters(session_id, len(batch), tool_calls)
        if self._on_server:
            execute(self._db, _append, batch)
        else:
            # Multi-row INSERTs, not executemany: one FTS5 segment an index for a flush,
            # not one a row (see insert_multi).
            insert_multi(self._db, batch, APPEND_ROWS_PER_INSERT)
        if self._ids is not None:
            self._ids.rows_inserted(batch)
        return len(batch)

    def insert_rows(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Insert rows made by :func:`codec.message_to_row` (plus ``active``,
        ``archived_at``, ``archive_reason``) as they are, leaving the counters alone:
        call :meth:`recount` after. Every row must have the same keys."""
        batch: list[Mapping[str, Any]] = list(rows)
        if self._on_server:
            copies = [dict(row) for row in batch]
            for copy in copies:
                check_server_text(copy)
            batch = list(copies)
        if not batch:
            return 0
        if self._on_server:
            self._session.execute(_insert, batch)
        else:
            insert_multi(self._db, batch)
        if self._ids is not None:
            self._ids.rows_inserted(batch)
        return len(batch)

    def recount(self, session_id: str) -> None:
        """Set the session's counters from its active rows (after a bulk insert that
        carried rows in any state, e.g. an import of archived rows)."""
        if not self._on_server:
            self._session.execute(_recount, {"sid": session_id})
            return
        db = self._session
        calls = sum(_calls_in(t) for t in db.execute(_active_calls, {"sid": session_id}).scalars())
        count = db.execute(_count_active, {"sid": session_id}).scalar_one()
        db.execute(_set_counters, {"sid": session_id, "n_messages": count, "n_calls": calls})

    def list(
        self,
        session_id: str,
        *,
        include_inactive: bool = False,
        with_ids: bool = False,
        after_id: int | None = None,
        limit: int | None = None,
        last: int | None = None,
    ) -> list[dict[str, Any]]:
        """The session's messages in replay order (by id); active ones unless asked.

        ``limit``: the first ``limit`` of them; ``last``: only the newest ``last``, still
        in replay order. Runs on a driver cursor too (the store's load path).
        """
        if limit is not None and last is not None:
            raise ValueError("pass limit (the first rows) or last (the newest), not both")
        count = limit if last is None else last
        stmt = _list_statement(
            include_inactive, after_id is not None, count is not None, last is not None
        )
        params: dict[str, Any] = {"sid": session_id, "active": 1}
        if after_id is not None:
            params["after_id"] = after_id
        if count is not None:
            params["limit"] = count
            params["offset"] = 0
        convert = row_to_message
        found = [convert(r, with_ids=with_ids) for r in rows(self._db, stmt, params)]
        if last is not None:
            found.reverse()
        return found

    def states(self, session_id: str) -> dict[str, tuple[int, str | None]]:
        """Every stored uid of the session with its ``active`` flag and archive reason."""
        stmt = select(_messages.c.uid, _messages.c.active, _messages.c.archive_reason).where(
            _messages.c.session_id == session_id
        )
        return {uid: (active, reason) for uid, active, reason in self._session.execute(stmt)}

    def set_active(
        self, session_id: str, uid: str, active: bool, *, reason: str | None = None
    ) -> None:
        """Mark one row active, or archived with ``reason`` (call :meth:`recount` after)."""
        self._session.execute(
            update(_messages)
            .where(_messages.c.session_id == session_id, _messages.c.uid == uid)
            .values(active=1 if active else 0, archive_reason=None if active else reason)
        )

    def archive_active(self, session_id: str, *, reason: str, uid: str | None = None) -> int:
        """Archive the session's active rows (only the one of ``uid`` when given) with
        ``reason`` and the time, as a transcript repair does; returns how many.

        The rows stay (an audit, found by ``include_inactive`` reads); call
        :meth:`recount` after, in the same unit of work.
        """
        params = {"sid": session_id, "at": time.time(), "reason": reason}
        if uid is not None:
            params["b_uid"] = uid
        result = self._session.execute(_archive_active if uid is None else _archive_one, params)
        return int(result.rowcount)  # type: ignore[attr-defined]

    def uids(self, session_id: str) -> set[str]:
        """Every uid stored for the session (active or archived)."""
        stmt = select(_messages.c.uid).where(_messages.c.session_id == session_id)
        return set(self._session.execute(stmt).scalars())

    def count(self, session_id: str | None = None, *, include_inactive: bool = True) -> int:
        stmt = select(func.count()).select_from(_messages)
        if session_id is not None:
            stmt = stmt.where(_messages.c.session_id == session_id)
        if not include_inactive:
            stmt = stmt.where(_messages.c.active == 1)
        return int(self._session.execute(stmt).scalar_one())
