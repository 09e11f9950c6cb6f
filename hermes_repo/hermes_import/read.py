"""The reading side of an import: a session's rows in parts, the uids the source holds,
the rows of other tables (kept in ``extra`` or ``state_meta``), each read leniently when a
TEXT value is not UTF-8."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import TYPE_CHECKING, TypeVar

from ..codec import dumps
from ..uow import UnitOfWork
from .mapping import _plain
from .report import HermesImportReport
from .source import _quote

if TYPE_CHECKING:
    from ..core import WriteCore

T = TypeVar("T")
META_PREFIX = "hermes_import."
# Hermes' own bookkeeping, rebuilt by any writer: not data.
_SKIPPED_TABLES = frozenset({"schema_version", "sqlite_sequence"})


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
    conn: sqlite3.Connection, hermes_sid: object, size: int
) -> Iterator[list[dict[str, object]]]:
    """The session's rows in order, ``size`` at a time (a long session is never held
    whole)."""
    after: object = None
    while True:
        where = _key_match(hermes_sid) + ("" if after is None else " AND id > ?")
        args = (hermes_sid,) if after is None else (hermes_sid, after)
        sql = f"SELECT * FROM messages WHERE {where} ORDER BY id LIMIT {size}"

        def read(sql: str = sql, args: tuple[object, ...] = args) -> list[dict[str, object]]:
            # Plain tuples zipped with the names: a Row per value row, then a dict of
            # it, cost twice as much.
            cursor = conn.cursor()
            cursor.row_factory = None
            try:
                cursor.execute(sql, args)
                names = [d[0] for d in cursor.description]
                return [dict(zip(names, r, strict=True)) for r in cursor]
            finally:
                cursor.close()

        chunk = _retry_lenient(conn, read)
        if not chunk:
            return
        yield chunk
        if len(chunk) < size:
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
    store: WriteCore,
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
