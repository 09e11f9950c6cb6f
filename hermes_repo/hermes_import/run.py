"""The import run: sessions written a few to a unit of work (a long one in parts), tables
of no session kept in state_meta, and the report of what was done."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from ..core import WriteCore
from ..errors import ImportSourceError
from .mapping import Mapper, _break_cycles, _Session, _session_order, store_session_id
from .read import (
    _SKIPPED_TABLES,
    META_PREFIX,
    _count_messages,
    _keep_other_tables,
    _retry_lenient,
    _session_messages,
    _source_uids,
    _table_rows,
)
from .report import HermesImportReport
from .source import _open_source, _quote, _shape, _unreadable
from .write import DELETED_REASON, _Batches, edited_reason, heap_set_aside

__all__ = [
    "DELETED_REASON",
    "META_PREFIX",
    "ImportTarget",
    "edited_reason",
    "import_hermes_db",
]

T = TypeVar("T")
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


#: Deprecated alias of :class:`~hermes_repo.core.WriteCore` (what the import needs of a
#: store), kept for one release.
ImportTarget = WriteCore


#: Rows per unit of work: sessions are written together until they hold this many, and a
#: longer session is read and written in parts of this many. It bounds the memory held
#: (a batch, whatever the file or a session's length) and what an interrupted import
#: leaves to the next run, and spares a commit per session.
BATCH_ROWS = 5000

# -- the import -----------------------------------------------------------------------


def import_hermes_db(
    store: WriteCore,
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
    with _open_source(path) as conn, heap_set_aside():
        try:
            _run(conn, path, store, report, progress)
        except sqlite3.Error as exc:
            raise _unreadable(path, exc) from exc
    return report


def _run(
    conn: sqlite3.Connection,
    path: Path,
    store: WriteCore,
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
    writer = _Batches(store, report, total, progress, BATCH_ROWS)
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
        chunks = _session_messages(conn, raw_id, BATCH_ROWS)
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
