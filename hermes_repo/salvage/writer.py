"""Writing the salvage into the new store: buffered inserts, then what makes it whole.

The new store is built by the migrations. Rows go in with the sync triggers dropped and
foreign keys deferred; then placeholders stand in for lost sessions, counters follow the
salvaged messages, the message sequence never goes back, both FTS indexes are rebuilt
from the canonical rows and the triggers are put back.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..codec import calls_text, loads
from ..driver_errors import describe
from ..engine import Driver
from ..schema import fts
from .report import SAMPLE, SalvageResult
from .shapes import CHECKPOINT_TABLES, key_column, quote

__all__ = [
    "RECOVERED_SOURCE",
    "RowWriter",
    "add_placeholders",
    "drop_derived_meta",
    "fill_calls_text",
    "fix_counters",
    "keep_sequence",
    "prepare",
    "rebuild_indexes",
    "verify",
]

RECOVERED_SOURCE = "recovered"
"""``sessions.source`` of a placeholder made for messages whose session row was lost."""

_CHUNK = 2_000
_CACHE_KIB = -65_536  # 64 MiB page cache for the new store while it is filled
_FTS_IN_INTEGRITY_CHECK = (3, 44, 0)  # from this version integrity_check covers FTS5


class RowWriter:
    """Buffered inserts into the new store, with a row-by-row fallback on a refusal."""

    def __init__(self, conn: Connection, columns: dict[str, list[str]], result: SalvageResult):
        self.conn = conn
        self.result = result
        self.sql = {
            t: f"INSERT INTO {quote(t)} ({', '.join(quote(c) for c in cols)}) "
            f"VALUES ({', '.join('?' for _ in cols)})"
            for t, cols in columns.items()
        }
        self.keys = {t: cols.index(key_column(t)) for t, cols in columns.items()}
        self.buffers: dict[str, list[tuple[Any, ...]]] = {t: [] for t in columns}

    def add(self, table: str, row: tuple[Any, ...]) -> None:
        """Queue ``row`` (the columns given at creation) for ``table``."""
        buf = self.buffers[table]
        buf.append(row)
        if len(buf) >= _CHUNK:
            self.flush(table)

    def flush(self, table: str | None = None) -> None:
        """Insert what is queued for ``table`` (default: every table)."""
        for name in [table] if table is not None else list(self.buffers):
            rows, self.buffers[name] = self.buffers[name], []
            if not rows:
                continue
            try:
                with self.conn.begin_nested():
                    self.conn.exec_driver_sql(self.sql[name], rows)
            except DBAPIError:
                for row in rows:
                    self._one(name, row)

    def _one(self, table: str, row: tuple[Any, ...]) -> None:
        try:
            with self.conn.begin_nested():
                self.conn.exec_driver_sql(self.sql[table], row)
        except DBAPIError as exc:
            self.result.rejected += 1
            if len(self.result.rejected_sample) < SAMPLE:
                self.result.rejected_sample.append(
                    {"table": table, "key": row[self.keys[table]], "error": describe(exc)}
                )


def prepare(conn: Connection) -> None:
    """Set the new store up for bulk inserts inside the open transaction."""
    # The sync triggers would index row by row; one 'rebuild' at the end is far cheaper
    # (rebuild_indexes creates the triggers again). Foreign keys are checked at COMMIT,
    # so placeholders for lost sessions can be added after the messages that need them.
    for name in fts.TRIGGER_NAMES:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
    conn.exec_driver_sql("PRAGMA defer_foreign_keys = ON")
    # The (session_id, uid) index takes uids in random order: a page cache that holds
    # it saves re-reading its pages (measured: ~15% of the insert CPU at 200k rows).
    conn.exec_driver_sql(f"PRAGMA cache_size = {_CACHE_KIB}")


def fill_calls_text(conn: Connection) -> int:
    """Derive ``calls_text`` where a salvaged row has tool calls but no such text: a
    source older than revision 0007 has no column to salvage it from, and without it
    the words of the calls would not be found. Returns how many rows got one."""
    select = (
        "SELECT id, tool_calls FROM messages WHERE tool_calls IS NOT NULL"
        " AND calls_text IS NULL AND id > ? ORDER BY id LIMIT ?"
    )
    filled, after = 0, -1
    while True:
        rows = conn.exec_driver_sql(select, (after, _CHUNK)).fetchall()
        if not rows:
            return filled
        after = rows[-1][0]
        changed = []
        for row_id, stored in rows:
            try:
                derived = calls_text(loads(stored))
            except (ValueError, TypeError):
                continue  # not JSON text: nothing to search in it (the doctor names the value)
            if derived is not None:
                changed.append((derived, row_id))
        if changed:
            conn.exec_driver_sql("UPDATE messages SET calls_text = ? WHERE id = ?", changed)
            filled += len(changed)


def rebuild_indexes(conn: Connection) -> None:
    """Fill both FTS indexes from the canonical rows and put the sync triggers back."""
    fill_calls_text(conn)  # the triggers are off: no row is indexed twice
    # The migrations created both indexes empty; the triggers are the runtime's DDL,
    # which equals the migrations'.
    for ix in fts.INDEXES:
        conn.exec_driver_sql(f"INSERT INTO {ix.name}({ix.name}) VALUES ('rebuild')")
    for statement in fts.trigger_statements():
        conn.exec_driver_sql(statement)


def drop_derived_meta(conn: Connection) -> list[str]:
    """Remove the derived-state markers copied from the source; returns their keys."""
    # The indexes are rebuilt here, so a stale marker copied from the source would lie.
    keys = [fts.STALE_KEY]
    present = [
        k
        for k in keys
        if conn.execute(text("SELECT 1 FROM state_meta WHERE key = :k"), {"k": k}).first()
    ]
    for k in present:
        conn.execute(text("DELETE FROM state_meta WHERE key = :k"), {"k": k})
    return present


def add_placeholders(conn: Connection) -> list[str]:
    """Sessions for salvaged messages (child sessions, LangGraph checkpoint rows) whose
    session row was lost."""
    orphans = conn.exec_driver_sql(
        "SELECT m.session_id, min(m.timestamp) FROM messages AS m "
        "WHERE NOT EXISTS (SELECT 1 FROM sessions AS s WHERE s.id = m.session_id) "
        "GROUP BY m.session_id"
    ).all()
    parents = conn.exec_driver_sql(
        "SELECT c.parent_session_id, min(c.started_at) FROM sessions AS c "
        "WHERE c.parent_session_id IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM sessions AS s WHERE s.id = c.parent_session_id) "
        "GROUP BY c.parent_session_id"
    ).all()
    # A LangGraph checkpoint row keeps its thread's session too; it carries no time of
    # its own, so the placeholder starts at the epoch.
    threads = conn.exec_driver_sql(
        " UNION ".join(
            f"SELECT t.session_id, 0 FROM {quote(name)} AS t WHERE NOT EXISTS "
            "(SELECT 1 FROM sessions AS s WHERE s.id = t.session_id)"
            for name in CHECKPOINT_TABLES
        )
    ).all()
    started: dict[str, float] = {}
    for sid, ts in [*orphans, *parents, *threads]:
        value = float(ts) if ts is not None else 0.0
        started[str(sid)] = min(started.get(str(sid), value), value)
    if started:
        conn.exec_driver_sql(
            "INSERT INTO sessions (id, source, title, started_at) VALUES (?, ?, ?, ?)",
            [
                (sid, RECOVERED_SOURCE, "recovered: the session row was unreadable", ts)
                for sid, ts in sorted(started.items())
            ],
        )
    return sorted(started)


def fix_counters(conn: Connection) -> int:
    """Make each session's counters mirror its salvaged active messages, as appends do."""
    count = "(SELECT count(*) FROM messages AS m WHERE m.session_id = sessions.id AND m.active = 1)"
    calls = (
        "(SELECT coalesce(sum(CASE WHEN json_valid(m.tool_calls) "
        "AND json_type(m.tool_calls) = 'array' THEN json_array_length(m.tool_calls) "
        "ELSE 0 END), 0) FROM messages AS m WHERE m.session_id = sessions.id AND m.active = 1)"
    )
    result = conn.exec_driver_sql(
        f"UPDATE sessions SET message_count = {count}, tool_call_count = {calls} "
        f"WHERE message_count IS NOT {count} OR tool_call_count IS NOT {calls}"
    )
    return int(result.rowcount)


def keep_sequence(conn: Connection, source_seq: int | None) -> None:
    """Never hand out a message id the source already used (ids are the FTS rowid)."""
    if source_seq is None:
        return
    updated = conn.exec_driver_sql(
        "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'messages'", (source_seq,)
    )
    if updated.rowcount == 0:
        conn.exec_driver_sql(
            "INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', ?)", (source_seq,)
        )


def verify(conn: Connection, driver: Driver) -> str:
    """``ok``, or what is wrong with the new store."""
    rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA integrity_check").all()]
    problems: list[str] = []
    fk = conn.exec_driver_sql("PRAGMA foreign_key_check").all()
    if fk:
        problems.append(f"{len(fk)} foreign key violations")
    if driver.version_tuple < _FTS_IN_INTEGRITY_CHECK:
        # Older SQLite leaves FTS5 out of integrity_check: ask each index itself.
        problems += [f"{name}: {err}" for name, err in fts.integrity_errors(conn).items()]
    if rows == ["ok"] and not problems:
        return "ok"
    return "; ".join([*(r for r in rows if r != "ok"), *problems][:5])
