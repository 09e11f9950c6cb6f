"""The import run: one unit of work per session, tables of no session kept in state_meta,
and the report of what was done."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Protocol, TypeVar

from ..codec import dumps
from ..errors import HermesRepoError, ImportSourceError
from ..ids import validate_session_id
from ..uow import UnitOfWork
from .mapping import (
    ARCHIVE_PREFIX,
    _message_row,
    _plain,
    _Session,
    _session_order,
    _session_values,
)
from .report import HermesImportReport
from .source import _open_source, _quote, _shape, _unreadable

__all__ = ["META_PREFIX", "ImportTarget", "import_hermes_db"]

T = TypeVar("T")
META_PREFIX = "hermes_import."
# Hermes' own bookkeeping, rebuilt by any writer: not data.
_SKIPPED_TABLES = frozenset({"schema_version", "sqlite_sequence"})


class ImportTarget(Protocol):
    """What the import needs of a store: units of work, and writes retried on locks."""

    def unit_of_work(self) -> UnitOfWork: ...

    def write(self, work: Callable[[UnitOfWork], T]) -> T: ...


def _write_session(uow: UnitOfWork, item: _Session, dry_run: bool) -> tuple[bool, int, int, int]:
    """Create or update one session and add its new messages;
    (created, new, present, present rows whose active state changed)."""
    created = not uow.sessions.exists(item.sid)
    stored = {} if created else uow.messages.states(item.sid)
    fresh = [m for m in item.messages if m["uid"] not in stored]
    # A row already imported follows the source's active state (a later /undo, or its
    # restore); a row this store archived itself (a repair) is never brought back.
    flips = []
    for m in item.messages:
        state = stored.get(m["uid"])
        if state is None or state[0] == m["active"]:
            continue
        if m["active"] and not (state[1] or "").startswith(ARCHIVE_PREFIX):
            continue
        flips.append(m)
    counts = (created, len(fresh), len(item.messages) - len(fresh), len(flips))
    if dry_run:
        return counts
    v = item.values
    if created:
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
    uow.messages.insert_rows(fresh)
    for m in flips:
        uow.messages.set_active(item.sid, m["uid"], bool(m["active"]), reason=m["archive_reason"])
    uow.messages.recount(item.sid)
    return counts


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
    problems = [str(r[0]) for r in conn.execute("PRAGMA quick_check(20)")]
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

    sessions = {
        str(r["id"]): dict(r)
        for r in conn.execute("SELECT * FROM sessions ORDER BY started_at, id")
    }
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

    usable: set[str] = set()
    for sid in list(sessions):
        try:
            validate_session_id(sid)
            usable.add(sid)
        except HermesRepoError as exc:
            report.warnings.append(f"session {sid!r} not imported: {exc}")

    done = 0
    for sid in _session_order(sessions):
        if sid not in usable:
            continue
        values, extra = _session_values(sessions[sid], lambda p: p in usable, report)
        for table in per_session:
            rows = [
                {k: _plain(v) for k, v in dict(r).items()}
                for r in conn.execute(
                    f'SELECT * FROM "{_quote(table)}" WHERE session_id = ? ORDER BY rowid', (sid,)
                )
            ]
            if rows:
                extra.setdefault("hermes_tables", {})[table] = rows
                report.table(table).read += len(rows)
                report.table(table).kept_in_extra += len(rows)
        report.sessions.kept_in_extra += len(extra)
        rows_out = []
        last_ts: float | None = values["started_at"]
        for r in conn.execute("SELECT * FROM messages WHERE session_id = ? ORDER BY id", (sid,)):
            out = _message_row(sid, dict(r), last_ts, report)
            last_ts = out["timestamp"]
            rows_out.append(out)
        item = _Session(sid, values, extra, rows_out)
        if report.dry_run:
            with store.unit_of_work() as uow:  # read only: never committed
                created, new, present, flipped = _write_session(uow, item, True)
        else:
            created, new, present, flipped = store.write(
                partial(_write_session, item=item, dry_run=False)
            )
        if created:
            report.sessions.imported += 1
        else:
            report.sessions.already_present += 1
        report.messages.imported += new
        report.messages.already_present += present
        report.messages.updated += flipped
        done += len(rows_out)
        if progress is not None:
            progress(done, total)

    _keep_other_tables(conn, store, report, linked, per_session, usable)


def _keep_other_tables(
    conn: sqlite3.Connection,
    store: ImportTarget,
    report: HermesImportReport,
    linked: Mapping[str, list[str]],
    per_session: list[str],
    usable: set[str],
) -> None:
    """Rows of tables that belong to no imported session, in our state_meta."""
    kept: dict[str, str] = {}
    for table in sorted(linked):
        if table in _SKIPPED_TABLES:
            continue
        rows = [
            {k: _plain(v) for k, v in dict(r).items()}
            for r in conn.execute(f'SELECT * FROM "{_quote(table)}" ORDER BY rowid')
        ]
        if table in per_session:  # rows of imported sessions are in their extra already
            rows = [r for r in rows if r.get("session_id") not in usable]
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
