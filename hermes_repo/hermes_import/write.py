"""The writing side of an import: parts of sessions gathered into units of work of a few
thousand rows, each session brought to follow its source (new rows inserted, rows changed
in place rewritten with their previous version kept, rows gone archived, counters
recomputed)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update

from ..backend import backend_of
from ..codec.checks import check_server_text
from ..models import messages_table
from ..transcript.reconcile import ORIGINAL_REASON, keep_copy
from ..uow import UnitOfWork
from .mapping import ARCHIVE_PREFIX, _Session
from .report import HermesImportReport

if TYPE_CHECKING:
    from ..core import WriteCore

__all__ = ["DELETED_REASON", "edited_reason"]


@dataclass
class _Counts:
    created: bool
    new: int = 0
    present: int = 0
    flipped: int = 0
    edited: int = 0
    archived: int = 0


# Columns a re-import compares and rewrites: the row's values, not its identity or
# archive state (content_text and calls_text are derived from content_parts and
# tool_calls, and content_text differs on a server).
_DERIVED = ("content_text", "calls_text")
_VALUE_SKIP = frozenset({"session_id", "uid", "active", "archived_at", "archive_reason", *_DERIVED})
#: Archive reason of an imported row the source no longer holds.
DELETED_REASON = ARCHIVE_PREFIX + "deleted or rewritten in the source"


def edited_reason(row_id: int) -> str:
    """Archive reason of the copy of an imported row kept before an edit in the source."""
    return f"{ARCHIVE_PREFIX}previous version of #{row_id} (edited in the source)"


def _lock_session(uow: UnitOfWork, sid: str) -> None:
    """On a server, one import of a session at a time: two imports of one file would
    both find it missing and both insert it (a unique violation). The lock is held
    until the unit commits; SQLite writers take turns already (BEGIN IMMEDIATE)."""
    conn = uow.connection
    backend_of(conn).take_turns(conn, "hermes-import:" + sid)


def _stored_rows(
    uow: UnitOfWork, sid: str, columns: list[str], uids: list[str]
) -> dict[str, tuple[Any, ...]]:
    """The session's rows of ``uids`` already stored: uid -> (id, active,
    archive_reason, *columns)."""
    m = messages_table.c
    found: dict[str, tuple[Any, ...]] = {}
    for start in range(0, len(uids), 500):  # within any backend's limit on parameters
        part = uids[start : start + 500]
        stmt = select(m.uid, m.id, m.active, m.archive_reason, *(m[c] for c in columns)).where(
            m.session_id == sid, m.uid.in_(part)
        )
        found.update((r[0], tuple(r[1:])) for r in uow.connection.execute(stmt))
    return found


def _gone(uow: UnitOfWork, sid: str, source_uids: set[str]) -> list[str]:
    """Active rows imported earlier for the session that the source no longer holds."""
    m = messages_table.c
    stmt = select(m.uid).where(m.session_id == sid, m.active == 1, m.uid.like(f"hermes:{sid}:%"))
    return [uid for uid in uow.connection.execute(stmt).scalars() if uid not in source_uids]


def _write_session(
    uow: UnitOfWork, item: _Session, dry_run: bool
) -> tuple[_Counts, list[dict[str, Any]], Callable[[], None]]:
    """Create or update one session so its rows follow the source: (the counts, the new
    rows to insert, what to do once they are inserted: rows the source changed in place
    rewritten with the previous version kept as an archived row, rows it no longer
    holds archived, active states followed, counters recomputed). Dry, only counts."""
    _lock_session(uow, item.sid)
    counts = _Counts(created=item.first and not uow.sessions.exists(item.sid))
    columns = [k for k in (item.messages[0] if item.messages else {}) if k not in _VALUE_SKIP]
    uids = [m["uid"] for m in item.messages]
    stored = {} if counts.created else _stored_rows(uow, item.sid, columns, uids)
    repaired = set() if counts.created else _repaired_here(uow, item.sid)
    fresh, flips, edits = [], [], []
    for m in item.messages:
        state = stored.pop(m["uid"], None)
        if state is None:
            fresh.append(m)
            continue
        row_id, active, reason = state[0], state[1], state[2]
        changed = [c for c, was in zip(columns, state[3:], strict=True) if was != m[c]]
        if changed and row_id not in repaired:
            # Only extra changed (Hermes' flags, e.g. compacted): metadata, no audit copy.
            edits.append((row_id, bool(active) and changed != ["extra"], m))
        if active == m["active"]:
            if changed == ["extra"]:
                counts.flipped += 1
            continue
        # A row this store archived itself (a repair) is never brought back.
        if m["active"] and not (reason or "").startswith(ARCHIVE_PREFIX):
            continue
        flips.append(m)
    # Rows imported before that the source no longer holds (known once it is all read).
    gone: list[str] = []
    if item.last and not counts.created:
        gone = _gone(uow, item.sid, item.source_uids or set(uids))
    counts.new, counts.archived = len(fresh), len(gone)
    counts.flipped += len(flips)
    counts.edited = sum(1 for _, keep, _ in edits if keep)
    counts.present = len(item.messages) - len(fresh)
    if dry_run:
        return counts, [], lambda: None
    v = item.values
    if not item.first:
        return counts, fresh, partial(_finish, uow, item, columns, edits, flips, gone)
    if counts.created:
        uow.sessions.create(
            v["source"],
            id=item.sid,
            user_id=v["user_id"],
            model=v["model"],
            title=v["title"],
            parent_session_id=v["parent_session_id"],
            started_at=v["started_at"] if v["started_at"] is not None else _first_ts(item),
            extra=item.extra,
        )
    uow.sessions.update(
        item.sid,
        title=v["title"],
        ended_at=v["ended_at"],
        end_reason=v["end_reason"],
        input_tokens=v["input_tokens"],
        output_tokens=v["output_tokens"],
        extra=item.extra,
    )

    return counts, fresh, partial(_finish, uow, item, columns, edits, flips, gone)


def _finish(
    uow: UnitOfWork,
    item: _Session,
    columns: list[str],
    edits: list[tuple[int, bool, dict[str, Any]]],
    flips: list[dict[str, Any]],
    gone: list[str],
) -> None:
    """After the new rows are in: rows the source changed in place rewritten (the
    version replayed until now kept as an archived row), active states followed, rows
    gone from the source archived, the counters recomputed."""
    now = time.time()
    server = not backend_of(uow.connection).is_file
    for row_id, keep, m in edits:
        if keep:  # the version replayed until now stays in the audit trail
            keep_copy(uow.connection, item.sid, row_id, edited_reason(row_id), now)
        values = {c: m[c] for c in columns}
        values.update((c, m[c]) for c in _DERIVED if c in m)
        if server:
            check_server_text(values)  # U+0000 was mapped already; the derived text too
        uow.connection.execute(
            update(messages_table).where(messages_table.c.id == row_id).values(**values)
        )
    for m in flips:
        reason = m["archive_reason"]
        uow.messages.set_active(item.sid, m["uid"], bool(m["active"]), reason=reason)
    for uid in gone:
        uow.messages.archive_active(item.sid, reason=DELETED_REASON, uid=uid)
    uow.messages.recount(item.sid)


def _repaired_here(uow: UnitOfWork, sid: str) -> set[int]:
    """Ids of the session's rows this store's own repair rewrote (their previous version
    is an archived "repair_original of #id" row): a re-import leaves them as repaired."""
    m = messages_table.c
    stmt = select(m.archive_reason).where(
        m.session_id == sid, m.active == 0, m.archive_reason.like(ORIGINAL_REASON + " of #%")
    )
    found = set()
    for (reason,) in uow.connection.execute(stmt):
        try:
            found.add(int(str(reason).rsplit("#", 1)[1]))
        except ValueError:
            continue
    return found


def _first_ts(item: _Session) -> float:
    return float(item.messages[0]["timestamp"]) if item.messages else 0.0


class _Batches:
    """Parts of sessions gathered into units of work of about ``rows`` rows."""

    def __init__(
        self,
        store: WriteCore,
        report: HermesImportReport,
        total: int,
        progress: Callable[[int, int], None] | None,
        rows: int,
    ) -> None:
        self.store, self.report, self.total, self.progress = store, report, total, progress
        self.rows = rows
        self.items: list[_Session] = []
        self.size = 0
        self.done = 0

    def make_room(self, rows: int) -> None:
        """Write the gathered parts if ``rows`` more would take the batch past its size."""
        if self.items and self.size + rows > self.rows:
            self.flush()

    def add(self, item: _Session) -> None:
        self.items.append(item)
        self.size += len(item.messages) + 1
        if self.size >= self.rows:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        self.done += _write_batch(self.store, self.report, self.items)
        self.items, self.size = [], 0
        # A unit's rows stay reachable from reference cycles of the driver's execution
        # context until a full collection, which Python runs ever more rarely as the
        # heap grows: memory would grow with the file. One collection per unit keeps it
        # at one unit's worth (under heap_set_aside it walks only the import's objects).
        gc.collect()
        if self.progress is not None:
            self.progress(self.done, self.total)


@contextmanager
def heap_set_aside() -> Iterator[None]:
    """For the import's length, the objects alive before it are left out of garbage
    collection (``gc.freeze``): the collection after each unit then walks only what the
    import made, not the whole program's heap (a tenth of the import's time on a file of
    short messages). Given back on the way out; left alone when the program has frozen
    objects itself (a server that forks), whose choice this must not undo."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _write_batch(store: WriteCore, report: HermesImportReport, batch: list[_Session]) -> int:
    """Write (or, dry, check) the sessions of ``batch`` in one unit of work; the
    report counts what was done. Returns the messages in the batch."""

    def write(uow: UnitOfWork, dry_run: bool) -> list[_Counts]:
        planned = [_write_session(uow, item, dry_run) for item in batch]
        # One insert for the whole batch (after every session exists): see insert_rows.
        uow.messages.insert_rows([row for _, fresh, _ in planned for row in fresh])
        for _, _, finish in planned:
            finish()
        return [counts for counts, _, _ in planned]

    if report.dry_run:
        with store.unit_of_work() as uow:  # read only: never committed
            found = write(uow, True)
    else:
        found = store.write(partial(write, dry_run=False))
    for item, counts in zip(batch, found, strict=True):
        if counts.created:
            report.sessions.imported += 1
        elif item.first:
            report.sessions.already_present += 1
        report.messages.imported += counts.new
        report.messages.already_present += counts.present
        report.messages.updated += counts.flipped
        report.messages.edited += counts.edited
        report.messages.archived += counts.archived
    return sum(len(item.messages) for item in batch)
