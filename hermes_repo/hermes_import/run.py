"""The import run: sessions written a few to a unit of work (a long one in parts), tables
of no session kept in state_meta, and the report of what was done."""

from __future__ import annotations

import gc
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import select, update

from ..backend import Backend, backend_of
from ..codec import dumps
from ..codec.checks import check_server_text
from ..errors import ImportSourceError
from ..models import messages_table
from ..transcript.reconcile import ORIGINAL_REASON, keep_copy
from ..uow import UnitOfWork
from .mapping import (
    ARCHIVE_PREFIX,
    Mapper,
    _break_cycles,
    _plain,
    _Session,
    _session_order,
    store_session_id,
)
from .report import HermesImportReport
from .source import _open_source, _quote, _shape, _unreadable

__all__ = ["META_PREFIX", "ImportTarget", "import_hermes_db"]

T = TypeVar("T")
META_PREFIX = "hermes_import."
# Hermes' own bookkeeping, rebuilt by any writer: not data.
_SKIPPED_TABLES = frozenset({"schema_version", "sqlite_sequence"})
# The tables Hermes Agent's store code writes (up to its schema 30); any other table of a
# source is kept too, with a warning naming it.
_HERMES_TABLES = frozenset(
    {
        *_SKIPPED_TABLES,
        "state_meta",
        "system_prompts",
        "session_model_usage",
        "gateway_routing",
        "conversation_generations",
        "gateway_heartbeats",
        "compression_locks",
        "session_turn_leases",
        "async_delegations",
        "delivery_obligations",
        "telegram_dm_topic_mode",
        "telegram_dm_topic_bindings",
    }
)


class ImportTarget(Protocol):
    """What the import needs of a store: units of work, and writes retried on locks."""

    @property
    def backend(self) -> Backend: ...

    def unit_of_work(self) -> UnitOfWork: ...

    def write(self, work: Callable[[UnitOfWork], T]) -> T: ...


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


# -- the import -----------------------------------------------------------------------


def import_hermes_db(
    store: ImportTarget,
    path: str | Path,
    *,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> HermesImportReport:
    """Import the Hermes Agent ``state.db`` at ``path`` into ``store`` (see
    :mod:`hermes_repo.hermes_import`).

    ``dry_run`` reads and checks everything and writes nothing. ``progress`` is called
    with (messages done, messages in the source) after each session. Raises
    :class:`ImportSourceError` before writing anything for a file that is not a whole
    SQLite Hermes store; a write error stops the import with the sessions before it kept
    (run it again to finish).
    """
    path = Path(path)
    report = HermesImportReport(source=str(path), dry_run=dry_run)
    with _open_source(path) as conn:
        try:
            _run(conn, path, store, report, progress)
        except sqlite3.Error as exc:
            raise _unreadable(path, exc) from exc
    return report


def _run(
    conn: sqlite3.Connection,
    path: Path,
    store: ImportTarget,
    report: HermesImportReport,
    progress: Callable[[int, int], None] | None,
) -> None:
    conn.row_factory = sqlite3.Row
    conn.execute("BEGIN")  # one read transaction: one consistent state of the source
    tables = _shape(conn, path)
    # A damaged page met halfway would stop the import with part of it written: check
    # the whole file first (a fraction of a second for a 100 MB store).
    problems = _quick_check(conn)
    if problems != ["ok"]:
        raise ImportSourceError(
            f"{path} is damaged: SQLite's quick_check reports {problems[0]!r}"
            f"{f' and {len(problems) - 1} more problem(s)' if len(problems) > 1 else ''}; "
            "nothing was imported: copy the state.db again (with Hermes stopped) or restore "
            "it from a backup"
        )
    if "schema_version" in tables:
        found = conn.execute("SELECT max(version) FROM schema_version").fetchone()
        report.schema_version = None if found is None else found[0]
    if report.schema_version is None:
        report.warnings.append("the source has no schema_version; read by column names alone")

    sessions = _retry_lenient(
        conn,
        lambda: {
            str(r["id"]): dict(r)
            for r in conn.execute("SELECT * FROM sessions ORDER BY started_at, id")
        },
    )
    report.sessions.read = len(sessions)
    total = int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
    report.messages.read = total
    orphans = conn.execute(
        "SELECT count(*) FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)"
    ).fetchone()[0]
    if orphans:
        report.warnings.append(
            f"{orphans} message(s) name a session the source does not hold; they are not "
            "imported (the source lost their session)"
        )
    linked = {t: cols for t, cols in tables.items() if t not in ("sessions", "messages")}
    per_session = [t for t, cols in linked.items() if "session_id" in cols]
    for table in sorted(set(linked) - _HERMES_TABLES):
        where = (
            "each session's extra (hermes_tables)"
            if table in per_session
            else f"state_meta as {META_PREFIX}{table}"
        )
        report.warnings.append(
            f"table {table!r} is not one Hermes Agent writes (another tool or a plugin made "
            f"it); its rows are kept in {where}"
        )

    ids = _map_ids(path, sessions, report)
    mapper = Mapper(report, ids, _break_cycles(sessions), server=not store.backend.is_file)
    writer = _Batches(store, report, total, progress)
    for hermes_sid in _session_order(sessions, mapper.cut):
        values, extra = mapper.session_values(sessions[hermes_sid])
        raw_id = sessions[hermes_sid]["id"]  # as stored: the key of its rows elsewhere
        for table in per_session:
            rows = _table_rows(conn, table, report, raw_id)
            if rows:
                extra.setdefault("hermes_tables", {})[table] = rows
                report.table(table).read += len(rows)
                report.table(table).kept_in_extra += len(rows)
        report.sessions.kept_in_extra += len(extra)
        sid = ids[hermes_sid]
        last_ts: float | None = values["started_at"]
        # The read transaction holds one state of the source: the count stays true.
        left = _count_messages(conn, raw_id)
        first = True
        chunks = _session_messages(conn, raw_id)
        while True:
            # Write what is gathered before reading a part it could not take: at most
            # about BATCH_ROWS rows are held, whatever the file.
            writer.make_room(min(left, BATCH_ROWS))
            chunk = next(chunks, None)
            if chunk is None:
                break
            rows_out = []
            for r in chunk:
                out = mapper.message_row(hermes_sid, r, last_ts)
                last_ts = out["timestamp"]
                rows_out.append(out)
            left -= len(chunk)
            part = _Session(sid, values, extra, rows_out, first=first, last=left <= 0)
            if part.last and not first:  # a long session, written in parts
                part.source_uids = _source_uids(conn, raw_id, sid)
            writer.add(part)
            first = False
            if part.last:
                break
        if first:  # no messages
            writer.add(_Session(sid, values, extra, []))
        elif left > 0:  # fewer rows than counted (never in one read transaction)
            uids = _source_uids(conn, raw_id, sid)
            writer.add(_Session(sid, values, extra, [], first=False, source_uids=uids))
    writer.flush()

    _keep_other_tables(conn, store, report, linked, per_session, set(sessions))


#: Rows per unit of work: sessions are written together until they hold this many, and a
#: longer session is read and written in parts of this many. It bounds the memory held
#: (a batch, whatever the file or a session's length) and what an interrupted import
#: leaves to the next run, and spares a commit per session.
BATCH_ROWS = 5000


class _Batches:
    """Parts of sessions gathered into units of work of about :data:`BATCH_ROWS` rows."""

    def __init__(
        self,
        store: ImportTarget,
        report: HermesImportReport,
        total: int,
        progress: Callable[[int, int], None] | None,
    ) -> None:
        self.store, self.report, self.total, self.progress = store, report, total, progress
        self.items: list[_Session] = []
        self.size = 0
        self.done = 0

    def make_room(self, rows: int) -> None:
        """Write the gathered parts if ``rows`` more would take the batch past its size."""
        if self.items and self.size + rows > BATCH_ROWS:
            self.flush()

    def add(self, item: _Session) -> None:
        self.items.append(item)
        self.size += len(item.messages) + 1
        if self.size >= BATCH_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self.items:
            return
        self.done += _write_batch(self.store, self.report, self.items)
        self.items, self.size = [], 0
        # A unit's rows stay reachable from reference cycles of the driver's execution
        # context until a full collection, which Python runs ever more rarely as the
        # heap grows: memory would grow with the file. One collection per unit (a few
        # milliseconds) keeps it at one unit's worth.
        gc.collect()
        if self.progress is not None:
            self.progress(self.done, self.total)


def _write_batch(store: ImportTarget, report: HermesImportReport, batch: list[_Session]) -> int:
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


def _quick_check(conn: sqlite3.Connection) -> list[str]:
    """SQLite's quick_check of the whole file (["ok"] when sound).

    A table SQLite cannot read here (a generated column calling a plugin's own SQL
    function) makes the whole-file check fail with that error: then each table is
    checked on its own, and the unreadable ones are left to the import (which skips
    them with a warning)."""
    try:
        return [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]
    except sqlite3.OperationalError:
        pass
    problems: list[str] = []
    names = [str(r[0]) for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    for name in names:
        try:
            found = [str(r[0]) for r in conn.execute(f'PRAGMA quick_check("{_quote(name)}")')]
        except sqlite3.OperationalError:
            continue  # this table alone cannot be read: skipped with a warning later
        problems.extend(p for p in found if p != "ok")
    return problems or ["ok"]


def _map_ids(
    path: Path, sessions: Mapping[str, object], report: HermesImportReport
) -> dict[str, str]:
    """Every source session's id here (see :func:`store_session_id`); refuses, before
    anything is written, a file where two sessions would land on one id."""
    ids = {sid: store_session_id(sid) for sid in sessions}
    taken: dict[str, str] = {}
    for hermes_sid, sid in ids.items():
        other = taken.setdefault(sid, hermes_sid)
        if other != hermes_sid:
            raise ImportSourceError(
                f"{path}: sessions {other!r} and {hermes_sid!r} would both be stored as "
                f"{sid!r}; nothing was imported: rename one of them in Hermes and import again"
            )
        if sid != hermes_sid:
            report.mapped_sessions[hermes_sid] = sid
            report.warnings.append(
                f"session {hermes_sid!r}: its id is not one this store takes (letters, digits "
                f"and . _ : -, at most 128 characters); stored as {sid!r}, the original kept "
                "in the session's extra as hermes_session_id"
            )
    return ids


def _lenient_text(data: bytes) -> str | bytes:
    """A TEXT value as str, or its bytes when it is not UTF-8 (another tool wrote it):
    the mapping then keeps the bytes and warns instead of the whole read failing."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _retry_lenient(conn: sqlite3.Connection, read: Callable[[], T]) -> T:
    """``read()``; once more with :func:`_lenient_text` when a TEXT value is not UTF-8."""
    try:
        return read()
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc) or conn.text_factory is _lenient_text:
            raise
    conn.text_factory = _lenient_text
    try:
        return read()
    finally:
        conn.text_factory = str


def _key_match(hermes_sid: object) -> str:
    """The condition on ``session_id`` for a session id as read: an id that is not UTF-8
    text comes as bytes, which SQLite compares to TEXT only once both are BLOBs."""
    return "CAST(session_id AS BLOB) = ?" if isinstance(hermes_sid, bytes) else "session_id = ?"


def _session_messages(
    conn: sqlite3.Connection, hermes_sid: object
) -> Iterator[list[dict[str, object]]]:
    """The session's rows in order, :data:`BATCH_ROWS` at a time (a long session is
    never held whole)."""
    after: object = None
    while True:
        where = _key_match(hermes_sid) + ("" if after is None else " AND id > ?")
        args = (hermes_sid,) if after is None else (hermes_sid, after)
        sql = f"SELECT * FROM messages WHERE {where} ORDER BY id LIMIT {BATCH_ROWS}"

        def read(sql: str = sql, args: tuple[object, ...] = args) -> list[dict[str, object]]:
            return [dict(r) for r in conn.execute(sql, args)]

        chunk = _retry_lenient(conn, read)
        if not chunk:
            return
        yield chunk
        if len(chunk) < BATCH_ROWS:
            return
        after = chunk[-1]["id"]


def _count_messages(conn: sqlite3.Connection, hermes_sid: object) -> int:
    sql = f"SELECT count(*) FROM messages WHERE {_key_match(hermes_sid)}"
    return int(conn.execute(sql, (hermes_sid,)).fetchone()[0])


def _source_uids(conn: sqlite3.Connection, hermes_sid: object, sid: str) -> set[str]:
    """Every uid the source holds for a session (its row ids alone)."""
    sql = f"SELECT id FROM messages WHERE {_key_match(hermes_sid)}"
    return {f"hermes:{sid}:{r[0]}" for r in conn.execute(sql, (hermes_sid,))}


def _table_rows(
    conn: sqlite3.Connection,
    table: str,
    report: HermesImportReport,
    hermes_sid: object = None,
) -> list[dict[str, object]]:
    """The rows of another table (of one session when given), as JSON can hold them.

    Read in rowid order, or in primary-key order for a ``WITHOUT ROWID`` table; a table
    SQLite cannot read here (e.g. it needs an extension) is skipped with a warning, the
    rest of the import goes on."""
    where = "" if hermes_sid is None else f" WHERE {_key_match(hermes_sid)}"
    args: tuple[object, ...] = () if hermes_sid is None else (hermes_sid,)

    def read(order: str) -> list[dict[str, object]]:
        sql = f'SELECT * FROM "{_quote(table)}"{where}{order}'
        return [{k: _plain(v) for k, v in dict(r).items()} for r in conn.execute(sql, args)]

    try:
        try:
            return _retry_lenient(conn, partial(read, " ORDER BY rowid"))
        except sqlite3.OperationalError as exc:
            if "rowid" not in str(exc):
                raise
            return _retry_lenient(conn, partial(read, ""))  # WITHOUT ROWID: key order
    except sqlite3.Error as exc:
        if table not in report.skipped_tables:
            report.skipped_tables.append(table)
            report.warnings.append(
                f"table {table!r} could not be read (SQLite says {exc}); skipped, "
                "everything else is imported"
            )
        return []


def _keep_other_tables(
    conn: sqlite3.Connection,
    store: ImportTarget,
    report: HermesImportReport,
    linked: Mapping[str, list[str]],
    per_session: list[str],
    imported: set[str],
) -> None:
    """Rows of tables that belong to no imported session, in our state_meta."""
    kept: dict[str, str] = {}
    for table in sorted(linked):
        if table in _SKIPPED_TABLES:
            continue
        rows = _table_rows(conn, table, report)
        if table in per_session:  # rows of imported sessions are in their extra already
            rows = [r for r in rows if not _of_imported(r.get("session_id"), imported)]
        if not rows:
            continue
        counts = report.table(table)
        counts.read += len(rows)
        if table == "state_meta" and {"key", "value"} <= set(rows[0]):
            kept[META_PREFIX + table] = dumps({str(r["key"]): r["value"] for r in rows})
        else:
            kept[META_PREFIX + table] = dumps(rows)
        counts.kept_in_extra += len(rows)
    if not kept or report.dry_run:
        return

    def save(uow: UnitOfWork) -> None:
        for key, value in kept.items():
            uow.meta.set(key, value)

    store.write(save)


def _of_imported(session_id: object, imported: set[str]) -> bool:
    """Whether a row's ``session_id`` (as JSON holds it) names an imported session."""
    return isinstance(session_id, str) and session_id in imported
