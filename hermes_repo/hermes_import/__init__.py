"""Import a Hermes Agent ``state.db`` into the store, losing nothing and touching nothing.

The source is opened read-only *and* immutable (a percent-encoded ``file:`` URI with
``mode=ro&immutable=1``): Hermes' files carry the WAL flag, and a plain read-only open
creates ``-wal`` and ``-shm`` beside them. When a ``-wal`` is already there (a Hermes that
is running, or one that stopped without a checkpoint) its committed frames matter: the
file and its ``-wal`` are copied byte for byte into a private temporary folder (taken
when the file and the WAL header did not change during the copy; a Hermes that keeps
writing gets a copy through SQLite's backup API instead), and the copy is read. The
source's own files are only ever read, never opened for writing.

Columns are read by name (``PRAGMA table_info``), never by position: real installs were
upgraded in place, so later columns sit at the end in any order, and a column a version
lacks is simply absent. What has a column here lands in it; every other non-NULL value
is kept in the row's JSON ``extra`` (messages and sessions both have one; a message value
that could not be used as is, e.g. a timestamp in milliseconds, is kept there as
``hermes_timestamp`` and the row keeps its place with the time before it). Rows of other
tables that name a session (``session_id``) go into that session's ``extra`` under
``"hermes_tables"``; the rest (``state_meta``, ``system_prompts``, topic modes...) are
kept in this store's ``state_meta`` as ``hermes_import.<table>``. Full-text tables and
their shadows are derived data and are not copied: this store indexes the rows itself.

Each session is one unit of work. Message uids are ``hermes:<session id>:<message id>``,
so importing the same file again adds nothing, a later copy of the same install adds only
the new sessions and messages, and an interrupted import is finished by running it again.
An existing session takes the source's title, end, token counters and ``extra`` (a later
copy knows more). Counters are recomputed from the rows. Rows are imported as they are:
malformed sequences stay (repair is a separate act), inactive rows stay inactive.
"""

from __future__ import annotations

import base64
import json
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..codec import check_timestamp, dumps, message_to_row
from ..engine import sqlite_uri
from ..errors import HermesRepoError, ImportSourceError, IntegrityViolation
from ..ids import validate_session_id
from ..models import ROLES
from ..uow import UnitOfWork

__all__ = [
    "SQLITE_HEADER",
    "HermesImportReport",
    "ImportTarget",
    "TableCounts",
    "import_hermes_db",
    "is_sqlite_file",
]

T = TypeVar("T")

SQLITE_HEADER = b"SQLite format 3\x00"
#: Prefix Hermes puts before JSON content it could not bind as text (multimodal lists).
JSON_CONTENT_PREFIX = "\x00json:"
META_PREFIX = "hermes_import."
#: Start of the archive reason of rows Hermes itself made inactive.
ARCHIVE_PREFIX = "hermes: "

# Source columns that have a column of ours; everything else goes to `extra`.
# message_count and tool_call_count are recomputed here, so the source's values are
# kept in `extra` too.
_SESSION_MAPPED = frozenset(
    {
        "id",
        "source",
        "user_id",
        "model",
        "title",
        "parent_session_id",
        "started_at",
        "ended_at",
        "end_reason",
        "input_tokens",
        "output_tokens",
    }
)
_MESSAGE_MAPPED = frozenset(
    {
        "id",
        "session_id",
        "role",
        "content",
        "tool_call_id",
        "tool_calls",
        "tool_name",
        "timestamp",
        "token_count",
        "finish_reason",
        "reasoning",
        "reasoning_details",
        "api_content",
        "active",
    }
)
_MESSAGE_TEXT = ("tool_call_id", "tool_name", "finish_reason", "reasoning", "api_content")
_MESSAGE_JSON = ("tool_calls", "reasoning_details")
_LOADED_KEYS = frozenset(
    {"timestamp", "uid", "id", "active", "archived_at", "archive_reason", "display_only"}
)
# Hermes' own bookkeeping, rebuilt by any writer: not data.
_SKIPPED_TABLES = frozenset({"schema_version", "sqlite_sequence"})


class ImportTarget(Protocol):
    """What the import needs of a store: units of work, and writes retried on locks."""

    def unit_of_work(self) -> UnitOfWork: ...

    def write(self, work: Callable[[UnitOfWork], T]) -> T: ...


@dataclass
class TableCounts:
    """Rows of one source table: read, imported, already present, values kept in extra,
    and present rows updated."""

    read: int = 0
    imported: int = 0
    already_present: int = 0
    kept_in_extra: int = 0
    #: Rows already present whose active state followed the source (a later /undo).
    updated: int = 0

    def as_dict(self) -> dict[str, int]:
        return {
            "read": self.read,
            "imported": self.imported,
            "already_present": self.already_present,
            "kept_in_extra": self.kept_in_extra,
            "updated": self.updated,
        }


@dataclass
class HermesImportReport:
    """What an import of a Hermes ``state.db`` found and did (or, dry, would do)."""

    source: str
    schema_version: int | None = None
    dry_run: bool = False
    tables: dict[str, TableCounts] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def table(self, name: str) -> TableCounts:
        return self.tables.setdefault(name, TableCounts())

    @property
    def sessions(self) -> TableCounts:
        return self.table("sessions")

    @property
    def messages(self) -> TableCounts:
        return self.table("messages")

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": "hermes-db",
            "schema_version": self.schema_version,
            "dry_run": self.dry_run,
            "tables": {name: counts.as_dict() for name, counts in self.tables.items()},
            "warnings": list(self.warnings),
        }


# -- the source file ------------------------------------------------------------------


def is_sqlite_file(path: Path) -> bool:
    """True when ``path`` starts with SQLite's 16-byte header."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _check_file(path: Path) -> None:
    """Refuse what is not a whole SQLite file, before SQLite is asked anything."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            header = fh.read(100)
    except FileNotFoundError as exc:
        raise ImportSourceError(
            f"{path} does not exist; pass the state.db of a Hermes home (e.g. ~/.hermes/state.db)"
        ) from exc
    except OSError as exc:
        raise ImportSourceError(
            f"cannot read {path}: {exc.strerror}; check that it is a readable file"
        ) from exc
    if header[:16] != SQLITE_HEADER:
        found = "an empty file" if size == 0 else f"a file starting with {header[:16]!r}"
        raise ImportSourceError(
            f"{path} is not an SQLite database (found {found}); pass a Hermes Agent "
            "state.db, or use --format jsonl for a JSON Lines file"
        )
    if len(header) < 100:
        raise ImportSourceError(
            f"{path} is truncated: {size} bytes, shorter than SQLite's 100-byte header; "
            "copy the state.db again (with Hermes stopped) or restore it from a backup"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The in-header size is valid only when the change counter matches "version-valid-for".
    if header[24:28] == header[92:96] and pages and size < pages * page_size:
        raise ImportSourceError(
            f"{path} is truncated: its header declares {pages} pages of {page_size} bytes "
            f"({pages * page_size} bytes) but the file has {size}; copy the state.db again "
            "(with Hermes stopped) or restore it from a backup"
        )


def _stamp(path: Path, wal: Path) -> tuple[int, int, bytes]:
    """What changes when Hermes writes: the file's mtime and size, the WAL's header
    (its salts change when the WAL restarts after a checkpoint)."""
    st = path.stat()
    with open(wal, "rb") as fh:
        return st.st_mtime_ns, st.st_size, fh.read(32)


def _copy_with_wal(path: Path, wal: Path, folder: Path) -> Path | None:
    """``path`` and its ``-wal`` copied byte for byte into ``folder``, taken when the
    source did not change during the copy; None when the -wal went away (the source is
    then whole) or it kept changing (a busy Hermes: the backup API takes over).

    Only reading the source's files: opening it through SQLite, even read-only, would
    rewrite the ``-shm`` of a Hermes that stopped without a checkpoint. A frame Hermes
    was appending while the -wal was copied fails its checksum and is dropped by the
    copy's WAL recovery, so the copy holds the last whole commit.
    """
    copy = folder / "state.db"
    for _ in range(5):
        try:
            before = _stamp(path, wal)
            shutil.copyfile(path, copy)
            shutil.copyfile(wal, folder / "state.db-wal")
            if _stamp(path, wal) == before:
                return copy
        except FileNotFoundError:
            if not wal.exists():
                return None
    return _backup_copy(path, copy)


def _backup_copy(path: Path, copy: Path) -> Path:
    """A consistent copy through SQLite's backup API (one read transaction)."""
    copy.unlink(missing_ok=True)
    (copy.parent / "state.db-wal").unlink(missing_ok=True)
    try:
        src = sqlite3.connect(sqlite_uri(path, "ro"), uri=True)
        try:
            dst = sqlite3.connect(copy)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise _unreadable(path, exc) from exc
    return copy


@contextmanager
def _open_source(path: Path) -> Iterator[sqlite3.Connection]:
    _check_file(path)
    wal = path.with_name(path.name + "-wal")
    with tempfile.TemporaryDirectory(prefix="hermes-import-") as tmp:
        # immutable=1 would ignore the WAL's committed frames: read a private copy.
        copy = _copy_with_wal(path, wal, Path(tmp)) if wal.exists() else None
        # The copy is ours: opened normally, SQLite merges its WAL into what it reads.
        uri = sqlite_uri(path, "ro") + "&immutable=1" if copy is None else sqlite_uri(copy, "rw")
        try:
            conn = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as exc:
            raise _unreadable(path, exc) from exc
        try:
            yield conn
        finally:
            conn.close()


def _unreadable(path: Path, exc: sqlite3.Error) -> ImportSourceError:
    return ImportSourceError(
        f"cannot read {path}: SQLite says {exc}; the file is damaged or truncated: copy "
        "the state.db again (with Hermes stopped) or restore it from a backup"
    )


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f'PRAGMA table_info("{_quote(table)}")')]


def _quote(name: str) -> str:
    return name.replace('"', '""')


def _shape(conn: sqlite3.Connection, path: Path) -> dict[str, list[str]]:
    """Every plain table's columns; refuses a file that is not a Hermes store."""
    rows = conn.execute("SELECT name, type, sql FROM sqlite_master").fetchall()
    virtual = [str(n) for n, t, sql in rows if t == "table" and "VIRTUAL" in str(sql).upper()]
    tables = {}
    for name, kind, _sql in rows:
        name = str(name)
        if kind != "table" or name in virtual or name.startswith("sqlite_stat"):
            continue
        if any(name.startswith(v + "_") for v in virtual):  # an FTS shadow table
            continue
        tables[name] = _columns(conn, name)
    need = {"sessions": {"id", "started_at"}, "messages": {"id", "session_id", "role"}}
    for table, cols in need.items():
        if not cols <= set(tables.get(table, ())):
            found = ", ".join(sorted(tables)) or "no tables"
            missing = ", ".join(sorted(cols - set(tables.get(table, ()))))
            raise ImportSourceError(
                f"{path} is an SQLite database but not a Hermes Agent store: table "
                f"{table} {'lacks ' + missing if table in tables else 'is missing'} "
                f"(found: {found}); pass the state.db of a Hermes home"
            )
    return tables


# -- values ---------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """A source value as JSON can hold it (a BLOB as base64 in a tagged object)."""
    if isinstance(value, bytes):
        return {"$base64": base64.b64encode(value).decode("ascii")}
    return value


def _content(raw: Any, where: str, warnings: list[str]) -> tuple[Any, Any]:
    """(content for our columns, value to keep in extra or None)."""
    if isinstance(raw, str) and raw.startswith(JSON_CONTENT_PREFIX):
        try:
            return json.loads(raw[len(JSON_CONTENT_PREFIX) :]), None
        except ValueError:
            warnings.append(
                f"{where}: content starts with the JSON marker but is not JSON; kept as text"
            )
            return raw, None
    if raw is None or isinstance(raw, str):
        return raw, None
    if isinstance(raw, bytes):
        try:
            return raw.decode("utf-8"), None
        except UnicodeDecodeError:
            return None, _plain(raw)
    return str(raw), None  # a number in a TEXT column: the text it stands for


def _session_order(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Session ids with every parent before its children (then by start time)."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: being visited, 2: done

    def visit(sid: str) -> None:
        path = []
        cur: str | None = sid
        while cur is not None and cur in rows and state.get(cur) is None:
            state[cur] = 1
            path.append(cur)
            parent = rows[cur].get("parent_session_id")
            cur = parent if isinstance(parent, str) else None
        for s in reversed(path):
            state[s] = 2
            order.append(s)

    for sid in sorted(rows, key=lambda s: (_sort_key(rows[s].get("started_at")), s)):
        visit(sid)
    return order


def _sort_key(value: Any) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


# -- one session ----------------------------------------------------------------------


@dataclass
class _Session:
    sid: str
    values: dict[str, Any]  # our columns
    extra: dict[str, Any]
    messages: list[dict[str, Any]]  # rows for insert_rows


def _session_values(
    row: Mapping[str, Any], parent_ok: Callable[[str], bool], report: HermesImportReport
) -> tuple[dict[str, Any], dict[str, Any]]:
    sid = str(row["id"])
    extra = {k: _plain(v) for k, v in row.items() if k not in _SESSION_MAPPED and v is not None}
    values: dict[str, Any] = {}
    for key in ("source", "user_id", "model", "title", "end_reason"):
        value = row.get(key)
        if value is not None and not isinstance(value, str):
            extra[key] = _plain(value)
            value = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        values[key] = value
    values["source"] = values["source"] or "cli"
    for key in ("started_at", "ended_at"):
        value = row.get(key)
        if value is None:
            values[key] = None
            continue
        try:
            values[key] = check_timestamp(value, f"session {sid} {key}")
        except IntegrityViolation as exc:
            extra[key] = _plain(value)
            values[key] = None
            report.warnings.append(f"{exc}; kept in the session's extra")
    for key in ("input_tokens", "output_tokens"):
        value = row.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            values[key] = value
        else:
            values[key] = 0
            if value is not None:
                extra[key] = _plain(value)
    parent = row.get("parent_session_id")
    values["parent_session_id"] = None
    if parent is not None:
        if isinstance(parent, str) and parent_ok(parent):
            values["parent_session_id"] = parent
        else:
            extra["parent_session_id"] = _plain(parent)
            report.warnings.append(
                f"session {sid}: its parent {parent!r} is not in the source (the source "
                "lost it); the link is kept in the session's extra"
            )
    return values, extra


def _message_row(
    sid: str, row: Mapping[str, Any], last_ts: float | None, report: HermesImportReport
) -> dict[str, Any]:
    where = f"message {row['id']} of session {sid}"
    extra = {k: _plain(v) for k, v in row.items() if k not in _MESSAGE_MAPPED and v is not None}
    message: dict[str, Any] = {"uid": f"hermes:{sid}:{row['id']}"}
    content, kept = _content(row.get("content"), where, report.warnings)
    message["content"] = content
    if kept is not None:
        extra["content"] = kept
    role = row.get("role")
    if role not in ROLES:
        # No column can hold it: shown, never replayed; the export gives the role back.
        extra["role"] = _plain(role)
        message["role"] = "system"
        message["display_only"] = True
        report.warnings.append(f"{where}: unknown role {role!r}, kept as a display-only row")
    else:
        message["role"] = role
    for key in _MESSAGE_TEXT:
        value = row.get(key)
        if value is None or isinstance(value, str):
            message[key] = value
        else:
            extra[key] = _plain(value)
    for key in _MESSAGE_JSON:
        value = row.get(key)
        if value is None:
            continue
        try:
            message[key] = json.loads(value) if isinstance(value, str) else None
        except ValueError:
            message[key] = None
        if message[key] is None:
            extra[key] = _plain(value)
            message.pop(key)
            report.warnings.append(f"{where}: {key} is not JSON; kept in extra as it is")
    token_count = row.get("token_count")
    if isinstance(token_count, int) and not isinstance(token_count, bool):
        message["token_count"] = token_count
    elif token_count is not None:
        extra["token_count"] = _plain(token_count)
    ts = row.get("timestamp")
    try:
        message["timestamp"] = check_timestamp(ts, f"{where} timestamp")
    except IntegrityViolation as exc:
        # The row is kept at its place; its time falls back to the one before it.
        extra["timestamp"] = _plain(ts)
        message["timestamp"] = last_ts if last_ts is not None else 0.0
        report.warnings.append(f"{exc}; kept in extra, the row keeps its place")
    out = message_to_row(sid, message)
    # A loaded message sets these keys itself after merging extra: a source value kept
    # under the same name would be hidden, so it is kept as hermes_<name>.
    extra = {(f"hermes_{k}" if k in _LOADED_KEYS else k): v for k, v in extra.items()}
    out["extra"] = dumps(extra) if extra else None
    active = row.get("active")
    inactive = active is not None and not active
    out["active"] = 0 if inactive else 1
    out["archived_at"] = None
    out["archive_reason"] = None
    if inactive:
        compacted = row.get("compacted")
        out["archive_reason"] = ARCHIVE_PREFIX + ("compacted" if compacted else "undone (rewound)")
    report.messages.kept_in_extra += len(extra)
    return out


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
    """Import the Hermes Agent ``state.db`` at ``path`` into ``store`` (see the module doc).

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
