"""Durable transcript repair: the repaired replay is written back, so repair converges.

Repairing a transcript only in memory does not converge: every later load reads the same
malformed rows, repairs them again and replays a prefix that differs from what the
provider saw last time (the prompt cache misses on every resume). Reconciliation makes
the stored active rows equal to the repaired replay, in the transaction that decided it:

* a surviving row keeps its id and gets the merged ``content`` (stored by the codec's
  rule: a string in ``content``, parts as JSON plus their searchable text),
  ``tool_calls``, ``reasoning``, ``reasoning_details``, and ``api_content = NULL`` where
  the plan clears the stale sidecar; the FTS update trigger re-indexes it;
* a removed row is archived, never deleted: ``active = 0``, ``archived_at`` and an
  ``archive_reason`` naming the rule and the survivor (``"merge_user into #41"``,
  ``"unmergeable_assistant after #41"``, ``"orphan_tool_result"``); flipping ``active``
  does not touch the full-text index, and no other column of the row changes;
* before a survivor is rewritten, its row as it was is kept: a copy of every column
  (content, parts, tool calls, reasoning, sidecar, ``extra``, timestamp...) is inserted
  as an archived row of the same session, with a fresh uid and the reason
  ``"repair_original of #41"`` (:func:`original_reason`). So every value a repair
  overwrites stays in the audit trail byte for byte: the active rows and the archived
  rows together hold every row as it was before any repair;
* the session's ``message_count`` / ``tool_call_count`` are set to what the active rows
  hold.

Only rows that change are written. The transactions:

1. The active rows are read and checked in a plain read transaction (``BEGIN``). A clean
   session ends there: no lock taken, nothing written.
2. With violations, the repair is written *in that same transaction*. SQLite upgrades
   it to a write transaction only if no other connection committed since it read: in
   WAL mode a stale snapshot cannot write (``SQLITE_BUSY_SNAPSHOT``), and in rollback
   mode the read's shared lock keeps others from committing. So when the write succeeds,
   what was read is what the write lock now guards, and read, plan and write are atomic
   without reading the 20k rows twice.
3. If that write fails for any reason (another writer committed in between or holds the
   lock, a damaged index to detach...), it is rolled back and the repair runs again as a
   unit of work through the write core (:meth:`Database.write
   <hermes_repo.database.Database.write>`): ``BEGIN IMMEDIATE``, re-read, re-plan
   (another process may have repaired or extended the session), write; transient lock
   errors replay that unit whole, and FTS damage is handled as for any write.

On PostgreSQL writers interleave instead of taking turns, so the same guarantees are
made explicitly: the read of step 1 runs ``REPEATABLE READ`` (one snapshot, as SQLite's
read has), and before writing in it the repair locks the session row (``SELECT ... FOR
NO KEY UPDATE``), which every append updates first: an append or a repair committed
since the snapshot makes that lock fail with a serialization failure (the stale-snapshot
refusal of step 2), and once it is held the session's writers queue behind the repair.
The write unit of step 3 takes the same lock before it re-reads.

Planning is done per turn group (see :func:`plan_repair`, in :mod:`.repair_plan`): on a
long session with a few violations only the groups that hold them are copied and
repaired, which keeps a repairing load close to the cost of a plain one. The audit
trail (archived rows, copies of rows as they were) is written by :mod:`.archive`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..backend import backend_of
from ..codec import (
    MESSAGE_COLUMNS,
    calls_text,
    content_columns,
    dumps,
    encode_text,
    row_to_message,
)
from ..driver_errors import describe
from ..errors import ReconcileConflict
from ..models import messages_table, sessions_table
from .archive import (
    ORIGINAL_REASON,
    ArchivedRow,
    archive_reason,
    expect_rows,
    keep_copy,
    keep_original,
    original_reason,
)
from .repair import RepairPlan, violations
from .repair_plan import plan_repair

if TYPE_CHECKING:
    from ..database import WriteCore
    from ..uow import UnitOfWork

__all__ = [
    "ORIGINAL_REASON",
    "PATH_CLEAN",
    "PATH_SAME_TRANSACTION",
    "PATH_WRITE_UNIT",
    "ArchivedRow",
    "ReconcileConflict",
    "ReconcileResult",
    "archive_reason",
    "keep_copy",
    "keep_original",
    "original_reason",
    "plan_repair",
    "reconcile_session",
]

log = logging.getLogger("hermes_repo.reconcile")

PATH_CLEAN: Final = "clean"
"""Nothing to repair: one read transaction, nothing written."""
PATH_SAME_TRANSACTION: Final = "same_transaction"
"""The repair was written in the transaction that read the rows."""
PATH_WRITE_UNIT: Final = "write_unit"
"""The state had moved (or the write failed): re-read and re-planned under BEGIN IMMEDIATE."""

_messages = messages_table
_sessions = sessions_table
_columns = [_messages.c[name] for name in MESSAGE_COLUMNS]
_ID: Final = MESSAGE_COLUMNS.index("id")


@dataclass(frozen=True)
class ReconcileResult:
    """What a repairing load found and wrote for one session."""

    session_id: str
    messages: list[dict[str, Any]]
    """The active replay after the repair, in id order (with row ids if asked for)."""
    repairs: int
    """Repair actions written by this call (0 when another process had already done them)."""
    updated_ids: tuple[int, ...]
    """Survivor rows whose content, tool calls, reasoning or sidecar were rewritten."""
    archived: tuple[ArchivedRow, ...]
    """Rows archived by this call."""
    rows_written: int
    """Rows the write changed (SQLite's change count: survivors, archived rows and the
    session row when its counters moved); 0 when nothing was written."""
    counters_before: tuple[int, int] | None = None
    """The session's (message_count, tool_call_count) before, when the write changed them."""
    counters_after: tuple[int, int] | None = None
    """The same counters after the write, when it changed them."""
    path: str = PATH_CLEAN
    """How the call ended: :data:`PATH_CLEAN`, :data:`PATH_SAME_TRANSACTION` or
    :data:`PATH_WRITE_UNIT`."""
    originals: tuple[tuple[int, int], ...] = ()
    """(survivor id, id of the archived copy of its row as it was) for every survivor
    this call rewrote."""

    @property
    def changed(self) -> bool:
        """Whether this call changed any stored row."""
        return self.rows_written > 0


# -- storage -------------------------------------------------------------------------


def _field_values(key: str, value: Any) -> dict[str, Any]:
    """Column values of one repaired field, stored the way the codec stores a message."""
    if key == "content":
        # The codec's own rule, so the searchable text of parts is derived as on append.
        return content_columns(value)
    if key == "tool_calls":
        # With the searchable text of the calls, derived as on append.
        return {key: None if value is None else dumps(value), "calls_text": calls_text(value)}
    if key == "reasoning_details":
        return {key: None if value is None else dumps(value)}
    # Text columns use the codec's reversible encoding (a lone surrogate survives).
    return {key: encode_text(value) if isinstance(value, str) else value}


def _patched(row: Sequence[Any], fields: Mapping[str, Any]) -> tuple[Any, ...]:
    values = dict(zip(MESSAGE_COLUMNS, row, strict=True))
    for key, value in fields.items():
        values.update(_field_values(key, value))
    return tuple(values[name] for name in MESSAGE_COLUMNS)


@dataclass(frozen=True)
class _Snapshot:
    """Active rows of a session: their ids, the decoded messages, their violations."""

    ids: list[int]
    messages: list[dict[str, Any]]
    found: list[tuple[int, str]]
    with_ids: bool

    @classmethod
    def read(cls, conn: Connection, session_id: str, with_ids: bool) -> _Snapshot:
        stmt = (
            select(*_columns)
            .where(_messages.c.session_id == session_id, _messages.c.active == 1)
            .order_by(_messages.c.id)
        )
        ids: list[int] = []
        messages: list[dict[str, Any]] = []
        # Row by row, keeping only ids and messages: holding 20k result rows as well
        # would make every garbage collection during the load slower, and a clean
        # session (every resume) must cost no more than a plain load.
        for row in conn.execute(stmt):
            ids.append(row[_ID])
            messages.append(row_to_message(row, with_ids=with_ids))
        return cls(ids, messages, violations(messages), with_ids)


def _replay(conn: Connection, snapshot: _Snapshot, plan: RepairPlan) -> list[dict[str, Any]]:
    """The active replay after ``plan``, decoded exactly as a later plain load will."""
    removed = {r.index for r in plan.removals}
    # The stored columns of the survivors, read again in the same transaction (so equal
    # to what was decoded): a few rows by primary key.
    wanted = {snapshot.ids[u.index]: u for u in plan.updates}
    stored = conn.execute(select(*_columns).where(_messages.c.id.in_(list(wanted))))
    patched = {
        wanted[row[_ID]].index: row_to_message(
            _patched(row, wanted[row[_ID]].fields), with_ids=snapshot.with_ids
        )
        for row in stored
    }
    # Re-decoding the patched rows (rather than using the repair's dicts) keeps the key
    # order of a later load, so the replay is byte-identical across reloads.
    return [
        patched.get(index, message)
        for index, message in enumerate(snapshot.messages)
        if index not in removed
    ]


def _write(
    conn: Connection, session_id: str, snapshot: _Snapshot, now: float, path: str
) -> ReconcileResult:
    """Plan and write the repair of ``snapshot`` in the caller's transaction."""
    plan = plan_repair(snapshot.messages, snapshot.found)
    if not plan.changed:
        return ReconcileResult(session_id, snapshot.messages, 0, (), (), 0, path=path)
    replay = _replay(conn, snapshot, plan)
    row_ids = snapshot.ids

    def ids(index: int) -> int:
        return int(row_ids[index])

    written = 0
    originals = tuple(
        (ids(u.index), keep_original(conn, session_id, ids(u.index), now)) for u in plan.updates
    )
    written += len(originals)
    # One executemany per set of changed columns: an UPDATE that only sets tool_calls
    # must not name content, or the FTS update triggers would re-index the row for nothing.
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for u in plan.updates:
        values: dict[str, Any] = {}
        for key, value in u.fields.items():
            values.update(_field_values(key, value))
        cols = tuple(sorted(values))
        groups.setdefault(cols, []).append(
            {"b_id": ids(u.index), **{f"b_{c}": values[c] for c in cols}}
        )
    for cols, params in groups.items():
        stmt = (
            update(_messages)
            .where(_messages.c.id == bindparam("b_id"), _messages.c.active == 1)
            .values({c: bindparam(f"b_{c}") for c in cols})
        )
        written += expect_rows(conn.execute(stmt, params).rowcount, len(params), session_id)
    archived = tuple(
        ArchivedRow(
            ids(r.index), r.rule, None if r.survivor_index is None else ids(r.survivor_index)
        )
        for r in plan.removals
    )
    if archived:
        stmt = (
            update(_messages)
            .where(_messages.c.id == bindparam("b_id"), _messages.c.active == 1)
            .values(active=0, archived_at=now, archive_reason=bindparam("b_reason"))
        )
        params = [{"b_id": a.id, "b_reason": a.reason} for a in archived]
        written += expect_rows(conn.execute(stmt, params).rowcount, len(params), session_id)
    found = conn.execute(
        select(_sessions.c.message_count, _sessions.c.tool_call_count).where(
            _sessions.c.id == session_id
        )
    ).first()
    # Inline rather than codec.tool_call_count: a call per row is most of this loop's cost.
    calls = sum(len(c) for m in replay if isinstance(c := m.get("tool_calls"), list))
    counted = (len(replay), calls)
    before: tuple[int, int] | None = None
    after: tuple[int, int] | None = None
    if found is not None and (int(found[0]), int(found[1])) != counted:
        conn.execute(
            update(_sessions)
            .where(_sessions.c.id == session_id)
            .values(message_count=counted[0], tool_call_count=counted[1])
        )
        written += 1
        before, after = (int(found[0]), int(found[1])), counted
    return ReconcileResult(
        session_id,
        replay,
        plan.repairs,
        tuple(ids(u.index) for u in plan.updates),
        archived,
        written,
        before,
        after,
        path=path,
        originals=originals,
    )


def _interleaves(conn: Connection) -> bool:
    """Whether writers of this database interleave (a server) rather than take turns."""
    return not backend_of(conn).refuses_stale_writes


def _lock_session(conn: Connection, session_id: str) -> None:
    """Lock the session row as its appends do (their counters UPDATE), so that they
    wait for the repair; ``FOR NO KEY UPDATE`` leaves foreign-key checks unblocked."""
    conn.execute(
        select(_sessions.c.id).where(_sessions.c.id == session_id).with_for_update(key_share=True)
    )


def reconcile_session(
    store: WriteCore,
    session_id: str,
    *,
    with_ids: bool = False,
    clock: Callable[[], float] = time.time,
) -> ReconcileResult:
    """Repair the session's active transcript and write the repair back (see module doc).

    Returns the repaired replay (messages carry their row id as ``id`` if ``with_ids``).
    A clean session is read once and nothing is written, not even an empty write
    transaction.
    """

    def same_transaction(conn: Connection) -> ReconcileResult | None:
        server = _interleaves(conn)
        if server:
            # A snapshot for the whole transaction, as SQLite's read has: a write from
            # it that meets a row changed since is refused (40001), never applied.
            conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        snapshot = _Snapshot.read(conn, session_id, with_ids)
        if not snapshot.found:
            return ReconcileResult(session_id, snapshot.messages, 0, (), (), 0)
        try:
            if server:
                # Every append updates the session row first: if one (or a repair that
                # moved the counters) committed since the snapshot, this lock fails
                # with 40001 and the write unit below starts over; once held, writers
                # of the session queue behind the repair.
                _lock_session(conn, session_id)
            result = _write(conn, session_id, snapshot, clock(), PATH_SAME_TRANSACTION)
            conn.commit()
            return result
        except DBAPIError as exc:
            # Usually another writer committed since the read (the snapshot is stale and
            # SQLite refuses to write from it) or holds the lock. The unit of work below
            # starts over under the write lock and handles every other kind of failure
            # the way any write does.
            log.debug("repair of %s goes through a write unit: %s", session_id, describe(exc))
            with contextlib.suppress(DBAPIError):
                conn.rollback()
            return None

    done = store.read(same_transaction)
    if done is not None:
        return done

    def work(uow: UnitOfWork) -> ReconcileResult:
        # Re-read and re-plan: the state may have moved (another process repaired or
        # extended the session), and what the lock now guards is what gets written.
        if _interleaves(uow.connection):
            # BEGIN IMMEDIATE serialises SQLite's writers; on a server the session
            # row's lock does it for this session (READ COMMITTED: each statement
            # after it sees every commit that came before the lock was granted).
            _lock_session(uow.connection, session_id)
        current = _Snapshot.read(uow.connection, session_id, with_ids)
        return _write(uow.connection, session_id, current, clock(), PATH_WRITE_UNIT)

    return store.write(work)
