"""Salvage of a damaged store: what is readable (``inspect``), and a fresh copy (``recover``).

The source is never opened for writing, not even by SQLite: both functions first make
byte copies of ``state.db`` and its ``-wal`` (and a hot ``-journal``) in a private folder
(0700) and read only the copy. Byte copies are right here, unlike for backups of a live
store: the file is damaged, and SQLite's backup API would have to read it through the very
b-trees that are broken. No ``-shm`` or ``-journal`` is ever created beside the source.

Two ways of reading the copy, combined per canonical table (``sessions``, ``messages``,
``state_meta``):

1. **SQL path.** A read-only connection scans the table by rowid. When a scan fails on a
   damaged page, the reader finds where reading can resume (an exponential then binary
   search over the rowid space) and reads every rowid of the skipped range one by one,
   so rows on undamaged pages are kept. Each gap is recorded.
2. **Page scanner** (:mod:`.pagescan`), when SQL cannot open the file (a broken header),
   could not read part of a table, or read fewer rows than the source's own count claims.
   It decodes table-leaf pages directly (the WAL's newest committed frame of a page
   wins), attributes rows to their table by the b-tree they were found in, and rows from
   leaves that no readable b-tree reaches by their shape (column count and types).

Rows found by both paths are de-duplicated on the primary key (SQL wins, then the
b-tree, then orphan pages). Rows that fit no canonical table are counted and reported,
never dropped in silence. ``recover`` writes the salvage into a store built by the
migrations: messages keep their ids (the FTS rowid) and uids; messages whose session row
was lost get a placeholder session (``source='recovered'``); session counters are
recomputed from the salvaged active messages; both FTS indexes are rebuilt.

SQLite's own ``.recover`` is not used: it needs ``sqlite_dbpage``, which the Debian
build lacks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Integer, Table, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..engine import WRITE_OPTION, Driver, DriverName, create_store_engine, select_driver
from ..errors import HermesRepoError, describe
from ..holders import holders_path
from ..models import ROLES, messages_table, sessions_table, state_meta_table
from ..schema import fts, migrate
from .pagescan import LeafRef, PageSource, ScannedRow, Scanner, ScanStats, WalInfo

__all__ = [
    "CANONICAL_TABLES",
    "PARTIAL_SUFFIX",
    "RECOVERED_SOURCE",
    "SCRATCH_PREFIX",
    "ProgressCallback",
    "ProgressEvent",
    "RecoveryError",
    "RecoveryInspection",
    "RecoveryResult",
    "TableReport",
    "inspect",
    "recover",
    "remove_stale",
]

CANONICAL_TABLES = ("sessions", "messages", "state_meta")
RECOVERED_SOURCE = "recovered"
"""``sessions.source`` of a placeholder made for messages whose session row was lost."""

ScanMode = Literal["auto", "always", "never"]

_MIN_ROWID, _MAX_ROWID = -(1 << 63), (1 << 63) - 1
# Rowids of a skipped range are read one by one when the range is at most this wide
# (about a second of point lookups); wider ranges are left to the page scanner.
_POINT_LOOKUP_LIMIT = 200_000
# A damaged leaf holds a few hundred rows at most; when this many lookups in a row fail,
# a damaged interior page is in the way of every rowid below it, and only the page
# scanner can read on.
_MAX_FAILED_LOOKUPS = 2_048
_CHUNK = 2_000
_SAMPLE = 20
_MAX_ERRORS = 10
_PROGRESS_EVERY = 2_000
_CACHE_KIB = -65_536  # 64 MiB page cache for the new store while it is filled
_FTS_IN_INTEGRITY_CHECK = (3, 44, 0)  # from this version integrity_check covers FTS5
_MODEL_TABLES: dict[str, Table] = {
    "sessions": sessions_table,
    "messages": messages_table,
    "state_meta": state_meta_table,
}
# Values a CHECK constraint allows; used to tell rows from garbage when assigning by shape.
_ALLOWED: dict[str, dict[str, tuple[Any, ...]]] = {
    "messages": {"role": ROLES, "active": (0, 1), "display_only": (0, 1)},
}


class RecoveryError(HermesRepoError):
    """The salvage could not run as asked (bad paths, no room, output exists...)."""


@dataclass(frozen=True)
class ProgressEvent:
    """Where a salvage is: ``phase`` is copy, read, scan, write, index or verify."""

    phase: str
    done: int
    total: int | None = None


ProgressCallback = Callable[[ProgressEvent], None]


# -- reports ---------------------------------------------------------------------------


@dataclass
class TableReport:
    """What one canonical table of the source holds, and how much of it was readable."""

    name: str
    claimed: int | None = None
    """The source's own ``count(*)`` (usually answered from an index); None if it failed."""
    sql_rows: int = 0
    """Rows read through SQL."""
    sql_gaps: list[tuple[int, int]] = field(default_factory=list)
    """Rowid ranges a SQL scan could not read (then read row by row where narrow)."""
    sql_errors: list[str] = field(default_factory=list)
    scan_rows: int | None = None
    """Rows the page scanner decoded for this table (None: the scanner did not run)."""
    scan_only: int = 0
    """Rows found by the page scanner and not by SQL."""
    invalid: int = 0
    """Rows on this table's pages that do not fit its columns (damage that decoded)."""
    recoverable: int = 0
    """Distinct rows found by either path."""
    known_missing: int | None = None
    """Rows that an index of the source lists but no path could read (messages only)."""
    missing_sample: list[Any] = field(default_factory=list)
    missing_by_session: dict[str, int] = field(default_factory=dict)

    @property
    def gaps(self) -> list[tuple[int | None, int | None]]:
        """``sql_gaps`` with an open end (the bottom or top of the rowid space) as None."""
        return [
            (None if lo == _MIN_ROWID else lo, None if hi == _MAX_ROWID else hi)
            for lo, hi in self.sql_gaps
        ]

    @property
    def complete(self) -> bool:
        """No sign of a lost row: nothing known missing, and the source's count reached."""
        if self.known_missing:
            return False
        return self.claimed is None or self.recoverable >= self.claimed

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "claimed": self.claimed,
            "sql_rows": self.sql_rows,
            "sql_gaps": [list(g) for g in self.gaps],
            "sql_errors": self.sql_errors,
            "scan_rows": self.scan_rows,
            "scan_only": self.scan_only,
            "invalid": self.invalid,
            "recoverable": self.recoverable,
            "known_missing": self.known_missing,
            "missing_sample": self.missing_sample,
            "missing_by_session": self.missing_by_session,
            "complete": self.complete,
        }


@dataclass
class RecoveryInspection:
    """What ``inspect`` (and the first half of ``recover``) found in the source."""

    source: str
    header: str
    """``valid``, ``notadb`` (the 16-byte magic string is damaged), ``empty`` or ``short``."""
    page_size: int = 0
    pages: int = 0
    wal: WalInfo = field(default_factory=WalInfo)
    hot_journal: bool = False
    sql_error: str | None = None
    """Why SQL could not open the copy at all (None: it could)."""
    schema_error: str | None = None
    """Why the page scanner could not read the whole schema b-tree, if it could not."""
    tables: dict[str, TableReport] = field(default_factory=dict)
    scanner_used: bool = False
    scan: ScanStats | None = None
    unassigned: dict[str, int] = field(default_factory=dict)
    """Decoded rows that fit no canonical table, by the table they resemble (or shape)."""
    messages_sequence: int | None = None
    """The highest message id the source ever assigned (``sqlite_sequence``)."""
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether every row the source is known to hold was readable."""
        return all(t.complete for t in self.tables.values())

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "source": self.source,
            "header": self.header,
            "page_size": self.page_size,
            "pages": self.pages,
            "wal": self.wal.as_dict(),
            "hot_journal": self.hot_journal,
            "sql_error": self.sql_error,
            "schema_error": self.schema_error,
            "tables": {name: t.as_dict() for name, t in self.tables.items()},
            "scanner_used": self.scanner_used,
            "scan": self.scan.as_dict() if self.scan is not None else None,
            "unassigned": self.unassigned,
            "messages_sequence": self.messages_sequence,
            "complete": self.complete,
            "notes": self.notes,
        }


@dataclass
class RecoveryResult:
    """What ``recover`` wrote: the source's counts (``before``) and the output's (``after``)."""

    output: str
    before: RecoveryInspection
    after: dict[str, int] = field(default_factory=dict)
    placeholders: list[str] = field(default_factory=list)
    """Sessions created for salvaged messages (or child sessions) whose row was lost."""
    rejected: int = 0
    """Salvaged rows the new store refused (a constraint), listed in ``rejected_sample``."""
    rejected_sample: list[dict[str, Any]] = field(default_factory=list)
    skipped_meta: list[str] = field(default_factory=list)
    """``state_meta`` keys not carried over (derived-state markers such as ``fts_stale``)."""
    counters_fixed: int = 0
    """Sessions whose message/tool-call counters were corrected to the salvaged rows."""
    integrity: str = ""
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "output": self.output,
            "before": self.before.as_dict(),
            "after": self.after,
            "placeholders": self.placeholders,
            "rejected": self.rejected,
            "rejected_sample": self.rejected_sample,
            "skipped_meta": self.skipped_meta,
            "counters_fixed": self.counters_fixed,
            "integrity": self.integrity,
            "seconds": round(self.seconds, 3),
        }


# -- table shapes ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Column:
    name: str
    affinity: str  # INTEGER, REAL, TEXT, BLOB or NUMERIC (SQLite's affinity rules)
    notnull: bool
    rowid_alias: bool


@dataclass(frozen=True)
class _Shape:
    """A table's columns as stored in its records, to check and normalise decoded rows."""

    name: str
    columns: tuple[_Column, ...]
    allowed: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def normalise(self, rowid: int, values: Sequence[Any]) -> tuple[Any, ...] | None:
        """The row's column values, or None when it does not fit this table.

        The rowid-alias column is stored as NULL (its value is the rowid), and SQLite
        stores integral REAL values as integers on disk: both are undone here, so a row
        from the scanner equals the same row read through SQL.
        """
        if len(values) != len(self.columns):
            return None
        out = list(values)
        for i, col in enumerate(self.columns):
            v = out[i]
            if col.rowid_alias:
                if v is not None:
                    return None
                out[i] = rowid
                continue
            if v is None:
                if col.notnull:
                    return None
                continue
            if col.affinity in ("INTEGER", "REAL"):
                if isinstance(v, int) and col.affinity == "REAL":
                    out[i] = float(v)
                elif not isinstance(v, int | float):
                    return None
            elif col.affinity == "TEXT" and not isinstance(v, str):
                return None
            allowed = self.allowed.get(col.name)
            if allowed is not None and out[i] not in allowed:
                return None
        return tuple(out)


def _affinity(declared: str) -> str:
    t = declared.upper()
    if "INT" in t:
        return "INTEGER"
    if "CHAR" in t or "CLOB" in t or "TEXT" in t:
        return "TEXT"
    if not t or "BLOB" in t:
        return "BLOB"
    if "REAL" in t or "FLOA" in t or "DOUB" in t:
        return "REAL"
    return "NUMERIC"


def _model_shape(name: str) -> _Shape:
    table = _MODEL_TABLES[name]
    pk = list(table.primary_key.columns)
    cols = []
    for c in table.columns:
        declared = "INTEGER" if isinstance(c.type, Integer) else str(c.type.compile())
        alias = len(pk) == 1 and pk[0] is c and isinstance(c.type, Integer)
        cols.append(_Column(c.name, _affinity(declared), not c.nullable, alias))
    return _Shape(name, tuple(cols), _ALLOWED.get(name, {}))


def _schema_shape(driver: Driver, name: str, sql: str) -> _Shape | None:
    """The shape declared by a ``CREATE TABLE`` statement, parsed by SQLite itself."""
    con = driver.module.connect(":memory:")
    try:
        con.execute(sql)
        info = con.execute(f"PRAGMA table_info({_quote(name)})").fetchall()
    except driver.module.Error:
        return None
    finally:
        con.close()
    if not info:
        return None
    pks = [r for r in info if r[5]]
    without_rowid = "WITHOUT ROWID" in " ".join(sql.upper().split())
    cols = tuple(
        _Column(
            r[1],
            _affinity(r[2] or ""),
            bool(r[3]),
            len(pks) == 1 and r[5] == 1 and (r[2] or "").upper() == "INTEGER" and not without_rowid,
        )
        for r in info
    )
    return _Shape(name, cols, _ALLOWED.get(name, {}))


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _key_column(name: str) -> str:
    pk = list(_MODEL_TABLES[name].primary_key.columns)
    return pk[0].name


# -- the private copy ------------------------------------------------------------------


@dataclass
class _Copy:
    folder: Path
    db: Path
    wal: Path | None
    hot_journal: bool


def _source_paths(source: Path) -> Path:
    source = Path(source)
    # Operators sometimes point at the WAL they were told about; the store is beside it.
    if source.name.endswith("-wal"):
        source = source.with_name(source.name[: -len("-wal")])
    if not source.exists():
        raise RecoveryError(f"{source} does not exist; pass the path of the damaged state.db")
    if not source.is_file():
        raise RecoveryError(f"{source} is not a regular file; pass the path of state.db")
    return source


SCRATCH_PREFIX = "hermes-recover-"
"""Name of a private copy's folder: ``hermes-recover-<pid>-<random>``."""
PARTIAL_SUFFIX = ".partial"
"""An output under construction: ``.<name>.recover-<pid>.partial`` beside the target."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive
    return True


def _owner_pid(name: str, prefix: str) -> int | None:
    digits = name[len(prefix) :].split("-", 1)[0].split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


def remove_stale(folder: Path, pattern: str) -> list[Path]:
    """Remove what a killed salvage left in ``folder``: entries matching ``pattern``
    whose owner pid (in the name) is no longer running and that belong to this user.

    A SIGKILL runs no cleanup; the next run finds the leftovers by their name and
    removes them, never those of a salvage that is still running.
    """
    removed: list[Path] = []
    prefix = pattern.split("*", 1)[0]
    for path in folder.glob(pattern):
        pid = _owner_pid(path.name, prefix)
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if pid is None or pid == os.getpid() or _pid_alive(pid) or st.st_uid != os.getuid():
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        removed.append(path)
    return removed


@contextlib.contextmanager
def _held_against_opens(source: Path) -> Iterator[bool]:
    """Keep library processes from opening the source while it is copied.

    Yields False when another process has the store open: the copy may then catch a
    transaction half-written. The holders file is used only if it already exists, so
    nothing is ever created beside the source.
    """
    path = holders_path(source)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _make_copy(
    source: Path,
    workdir: Path | None,
    progress: ProgressCallback | None,
    notes: list[str],
    *,
    reserve: float = 0.0,
) -> _Copy:
    """Byte copies of the source's files in a new private folder under ``workdir``.

    ``reserve`` (a multiple of the source's size) is room wanted on top of the copy,
    for an output written to the same place.
    """
    wal_src = source.with_name(source.name + "-wal")
    journal_src = source.with_name(source.name + "-journal")
    parts = [(source, "state.db")]
    if wal_src.is_file():
        parts.append((wal_src, "state.db-wal"))
    if journal_src.is_file() and journal_src.stat().st_size > 0:
        # A hot rollback journal: the main file holds a half-written transaction that
        # SQLite rolls back (in the copy) before reading.
        parts.append((journal_src, "state.db-journal"))
    need = sum(p.stat().st_size for p, _ in parts)
    base = workdir if workdir is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(base).free
    if free < need * (1.1 + reserve) + (16 << 20):
        raise RecoveryError(
            f"not enough free space in {base} for a private copy of the source "
            f"({need / 1e6:.1f} MB needed, {free / 1e6:.1f} MB free); "
            "free some space or choose another working folder"
        )
    remove_stale(base, f"{SCRATCH_PREFIX}*")
    folder = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=base))
    done = 0
    try:
        with _held_against_opens(source) as alone:
            if not alone:
                notes.append(
                    "another process has the source store open; the copy may hold a "
                    "half-written transaction: stop it and run the command again"
                )
            for src, name in parts:
                # 0600: the copy holds every conversation of the store.
                fd = os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                with open(src, "rb") as fin, open(fd, "wb") as fout:
                    while chunk := fin.read(1 << 20):
                        fout.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(ProgressEvent("copy", done, need))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    wal = folder / "state.db-wal"
    return _Copy(
        folder,
        folder / "state.db",
        wal if wal.exists() else None,
        hot_journal=(folder / "state.db-journal").exists(),
    )


# -- the SQL path ----------------------------------------------------------------------


class _SqlPath:
    """Reads of the private copy through SQLite, by rowid, around damaged pages."""

    def __init__(self, db: Path, driver: Driver, *, hot_journal: bool) -> None:
        self.module = driver.module
        # Read-only unless a hot journal must be rolled back first (in the copy only).
        mode = "rw" if hot_journal else "ro"
        self.conn = self.module.connect(
            f"{db.absolute().as_uri()}?mode={mode}", uri=True, isolation_level=None
        )
        try:
            self.conn.execute("PRAGMA query_only = 1")
            self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except BaseException:
            self.conn.close()
            raise

    def close(self) -> None:
        self.conn.close()

    def schema(self) -> dict[str, str]:
        """name -> CREATE statement of every table."""
        rows = self.conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND sql IS NOT NULL"
        ).fetchall()
        return {str(n): str(s) for n, s in rows}

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first column of the first row, or None when the query fails or is empty."""
        try:
            row = self.conn.execute(sql, params).fetchone()
        except self.module.Error:
            return None
        return None if row is None else row[0]

    def rows(
        self,
        table: str,
        columns: Sequence[str],
        report: TableReport,
        *,
        upper_hint: int | None = None,
    ) -> Iterator[tuple[Any, ...]]:
        """Every readable row of ``table`` as (rowid, *columns), in rowid order.

        A failing scan is resumed past the damaged pages; the skipped rowid range is
        recorded in ``report.sql_gaps`` and, when narrow enough, read row by row.
        ``upper_hint`` (the highest rowid the source may hold) bounds a gap that runs to
        the end of the table.
        """
        cols = ", ".join(_quote(c) for c in columns)
        base = f"SELECT rowid, {cols} FROM {_quote(table)} NOT INDEXED"
        scan = f"{base} WHERE rowid >= ? ORDER BY rowid"
        probe = f"{scan} LIMIT 1"
        point = f"{base} WHERE rowid = ?"
        pos = _MIN_ROWID
        while True:
            try:
                for row in self.conn.execute(scan, (pos,)):
                    yield tuple(row)
                    if row[0] >= _MAX_ROWID:
                        return
                    pos = row[0] + 1
                break
            except self.module.DatabaseError as exc:
                self._note(report, exc)
                resume = self._resume_point(probe, pos)
                report.sql_gaps.append((pos, _MAX_ROWID if resume is None else resume - 1))
                if resume is None:
                    break
                pos = resume
        for lo, hi in report.sql_gaps:
            # Rowids below 1 are never assigned automatically; a gap that starts at the
            # bottom of the rowid space is therefore read from 1.
            lo = max(lo, 0)
            if hi == _MAX_ROWID and upper_hint is not None:
                hi = upper_hint
            if hi - lo >= _POINT_LOOKUP_LIMIT:
                continue
            failed = 0
            for rowid in range(lo, hi + 1):
                try:
                    row = self.conn.execute(point, (rowid,)).fetchone()
                except self.module.DatabaseError:
                    failed += 1
                    if failed >= _MAX_FAILED_LOOKUPS:
                        break
                    continue
                failed = 0
                if row is not None:
                    yield tuple(row)

    def _note(self, report: TableReport, exc: BaseException) -> None:
        msg = describe(exc)
        if len(report.sql_errors) < _MAX_ERRORS and msg not in report.sql_errors:
            report.sql_errors.append(msg)

    def _readable(self, probe: str, rowid: int) -> bool:
        try:
            self.conn.execute(probe, (rowid,)).fetchall()
        except self.module.DatabaseError:
            return False
        return True

    def _resume_point(self, probe: str, pos: int) -> int | None:
        """The smallest rowid after ``pos`` from which a scan can read again (or None).

        Reading fails for rowids that live on (or below) a damaged page and works past
        it, so an exponential search finds a readable rowid and a binary search the
        edge. A readable range between two damaged ones may be jumped over: the
        row-by-row pass over the gap picks those rows up.
        """
        failed, step = pos, 1
        while True:
            x = min(pos + step, _MAX_ROWID)
            if self._readable(probe, x):
                break
            failed = x
            if x == _MAX_ROWID:
                return None
            step *= 2
        lo, hi = failed, x
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._readable(probe, mid):
                hi = mid
            else:
                lo = mid
        return hi

    def indexed_message_ids(self) -> Iterator[tuple[str, int]]:
        """(session_id, id) of every message an index of ``messages`` lists.

        An index is a second, independent record of which rows exist: it tells which
        message ids were lost with a damaged table page. Yields nothing if no index
        on ``session_id`` is readable.
        """
        names = [
            str(r[0])
            for r in self.conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages'"
            ).fetchall()
        ]
        for name in names:
            try:
                first = self.conn.execute(f"PRAGMA index_info({_quote(name)})").fetchone()
                if first is None or first[2] != "session_id":
                    continue
                rows = self.conn.execute(
                    f"SELECT session_id, id FROM messages INDEXED BY {_quote(name)}"
                ).fetchall()
            except self.module.DatabaseError:
                continue
            yield from ((str(s), int(i)) for s, i in rows)
            return


# -- the salvage -----------------------------------------------------------------------


class _Writer:
    """Buffered inserts into the new store, with a row-by-row fallback on a refusal."""

    def __init__(self, conn: Connection, columns: dict[str, list[str]], result: RecoveryResult):
        self.conn = conn
        self.result = result
        self.sql = {
            t: f"INSERT INTO {_quote(t)} ({', '.join(_quote(c) for c in cols)}) "
            f"VALUES ({', '.join('?' for _ in cols)})"
            for t, cols in columns.items()
        }
        self.keys = {t: cols.index(_key_column(t)) for t, cols in columns.items()}
        self.buffers: dict[str, list[tuple[Any, ...]]] = {t: [] for t in columns}

    def add(self, table: str, row: tuple[Any, ...]) -> None:
        buf = self.buffers[table]
        buf.append(row)
        if len(buf) >= _CHUNK:
            self.flush(table)

    def flush(self, table: str | None = None) -> None:
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
            if len(self.result.rejected_sample) < _SAMPLE:
                self.result.rejected_sample.append(
                    {"table": table, "key": row[self.keys[table]], "error": describe(exc)}
                )


class _Salvage:
    """One run over a private copy: SQL path, page scanner, and a sink for the rows."""

    def __init__(
        self,
        source: Path,
        driver: Driver,
        progress: ProgressCallback | None,
        workdir: Path | None,
        *,
        reserve: float = 0.0,
    ) -> None:
        self.driver = driver
        self.progress = progress
        self.report = RecoveryInspection(source=str(source), header="empty")
        self.copy = _make_copy(source, workdir, progress, self.report.notes, reserve=reserve)
        self.report.hot_journal = self.copy.hot_journal
        self.sql: _SqlPath | None = None
        self._src: PageSource | None = None
        self._scanner: Scanner | None = None
        self.keys: dict[str, set[Any]] = {t: set() for t in CANONICAL_TABLES}
        self.writer: _Writer | None = None
        self.columns: dict[str, list[str]] = {}
        self._source_index: dict[str, list[int]] = {}
        self.shapes: dict[str, _Shape] = {}
        self.other_shapes: list[_Shape] = []
        self._emitted = 0

    # lifecycle

    def close(self) -> None:
        if self.sql is not None:
            self.sql.close()
            self.sql = None
        if self._src is not None:
            self._src.close()
            self._src = None
        shutil.rmtree(self.copy.folder, ignore_errors=True)

    def _tick(self, phase: str, total: int | None) -> None:
        self._emitted += 1
        if self.progress is not None and self._emitted % _PROGRESS_EVERY == 0:
            self.progress(ProgressEvent(phase, self._emitted, total))

    # opening

    def open(self) -> None:
        """Open the SQL path (if SQLite can) and work out each table's shape."""
        try:
            self.sql = _SqlPath(self.copy.db, self.driver, hot_journal=self.copy.hot_journal)
        except self.driver.module.Error as exc:
            self.report.sql_error = describe(exc)
        # The page view is opened after SQLite, which may have rolled back a hot journal.
        src = self._src = PageSource(self.copy.db, self.copy.wal)
        self.report.header = src.header_state
        self.report.page_size = src.page_size
        self.report.pages = src.page_count
        self.report.wal = src.wal
        if src.wal.ignored:
            self.report.notes.append(f"the -wal file was not used: {src.wal.ignored}")
        if src.wal.header_damaged and src.wal.committed_frames:
            # SQLite reads such a log as empty: only the page scanner sees these frames.
            self.report.notes.append(
                f"the -wal header is damaged ({src.wal.header_damaged}); "
                f"{src.wal.committed_frames} committed frames were read without it by the "
                "page scanner (SQLite would have discarded them)"
            )
        schema: dict[str, str] = {}
        if self.sql is not None:
            with contextlib.suppress(self.driver.module.Error):
                schema = self.sql.schema()
        if not schema:
            schema = {
                e.name: e.sql
                for e in self.scanner.schema
                if e.type == "table" and e.sql is not None
            }
        for name in CANONICAL_TABLES:
            parsed = _schema_shape(self.driver, name, schema[name]) if name in schema else None
            if parsed is None:
                self.report.notes.append(
                    f"the source's definition of {name} is unreadable; its rows are matched "
                    "against this version's columns"
                )
            self.shapes[name] = parsed or _model_shape(name)
            self.report.tables[name] = TableReport(name)
        for name, sql in schema.items():
            # A virtual table stores nothing in a b-tree of its own (its shadow tables do).
            virtual = sql.lstrip().upper().startswith("CREATE VIRTUAL")
            if name not in CANONICAL_TABLES and not virtual:
                shape = _schema_shape(self.driver, name, sql)
                if shape is not None:
                    self.other_shapes.append(shape)
        for name in CANONICAL_TABLES:
            source_cols = [c.name for c in self.shapes[name].columns]
            wanted = [c.name for c in _MODEL_TABLES[name].columns]
            common = [c for c in wanted if c in source_cols]
            if _key_column(name) not in common:
                raise RecoveryError(
                    f"the source's {name} table has no {_key_column(name)!r} column; "
                    "it is not a hermes_repo store"
                )
            self.columns[name] = common
            self._source_index[name] = [source_cols.index(c) for c in common]
        self.report.messages_sequence = self._sequence()

    @property
    def scanner(self) -> Scanner:
        if self._scanner is None:
            if self._src is None:
                raise RuntimeError("the page view is opened by _Salvage.open()")
            self._scanner = Scanner(self._src)
            self.report.schema_error = self._scanner.schema_error
            self.report.scan = self._scanner.stats
        return self._scanner

    def _sequence(self) -> int | None:
        if self.sql is not None:
            seq = self.sql.scalar("SELECT seq FROM sqlite_sequence WHERE name = 'messages'")
            if isinstance(seq, int):
                return seq
        if self.report.sql_error is None:
            return None
        for row in self.scanner.rows("sqlite_sequence"):
            if len(row.values) == 2 and row.values[0] == "messages":
                value = row.values[1]
                return value if isinstance(value, int) else None
        return None

    # rows

    def _accept(self, table: str, row: tuple[Any, ...]) -> bool:
        key = row[self.keys_index(table)]
        seen = self.keys[table]
        if key in seen:
            return False
        seen.add(key)
        if self.writer is not None:
            self.writer.add(table, row)
        return True

    def keys_index(self, table: str) -> int:
        return self.columns[table].index(_key_column(table))

    def read_sql(self) -> None:
        """Every row SQL can read, table by table."""
        if self.sql is None:
            for t in self.report.tables.values():
                t.sql_errors.append(f"SQL cannot open the file: {self.report.sql_error}")
            return
        total = 0
        for name in CANONICAL_TABLES:
            claimed = self.sql.scalar(f"SELECT count(*) FROM {_quote(name)}")
            self.report.tables[name].claimed = claimed if isinstance(claimed, int) else None
            total += claimed if isinstance(claimed, int) else 0
        for name in CANONICAL_TABLES:
            report = self.report.tables[name]
            # Rowids are assigned upwards from 1 and messages are never deleted, so the
            # count (and for messages the sequence) bounds where rows can be.
            hints = [report.claimed, self.report.messages_sequence if name == "messages" else None]
            known = [h for h in hints if h is not None]
            hint = max(known) if known else None
            for row in self.sql.rows(name, self.columns[name], report, upper_hint=hint):
                if self._accept(name, tuple(row[1:])):
                    report.sql_rows += 1
                self._tick("read", total or None)
        if self.progress is not None:
            self.progress(ProgressEvent("read", self._emitted, total or None))

    @property
    def wal_only_frames(self) -> bool:
        """Committed frames that SQL cannot see: a -wal whose header is damaged."""
        return bool(self.report.wal.header_damaged and self.report.wal.committed_frames)

    def needs_scan(self) -> bool:
        if self.sql is None or self.wal_only_frames:
            return True
        for t in self.report.tables.values():
            if t.sql_gaps or t.sql_errors:
                return True
            if t.claimed is not None and t.sql_rows < t.claimed:
                return True
        return False

    def _want(self, name: str) -> Callable[[LeafRef], bool] | None:
        report = self.report.tables[name]
        if self.sql is None or report.sql_rows == 0:
            return None  # SQL read nothing: every leaf
        if report.claimed is not None and report.sql_rows < report.claimed and not report.sql_gaps:
            return None  # rows are missing, and SQL cannot say where
        gaps = list(report.sql_gaps)
        return lambda leaf: any(leaf.overlaps(lo, hi) for lo, hi in gaps)

    def read_scan(self, *, everything: bool) -> None:
        """Rows the page scanner finds that SQL did not: by b-tree, then orphan pages."""
        scanner = self.scanner
        self.report.scanner_used = True
        plans: list[tuple[str, Callable[[LeafRef], bool] | None]] = [
            (name, None if everything else self._want(name)) for name in CANONICAL_TABLES
        ]
        orphans = scanner.orphan_leaves()
        total = len(orphans)
        for name, want in plans:
            walk = scanner.walk(name)
            if walk is not None:
                total += sum(1 for leaf in walk.leaves if want is None or want(leaf))
        self._emitted = 0
        counted: set[int] = set()
        for name, want in plans:
            report = self.report.tables[name]
            report.scan_rows = 0
            for row in scanner.rows(name, want=want):
                self._scan_tick(row.pgno, counted, total)
                shape_row = self.shapes[name].normalise(row.rowid, row.values)
                if shape_row is None:
                    # On this table's page but not its shape: maybe a stray page of
                    # another table (a damaged parent can point anywhere).
                    if not self._assign_by_shape(row):
                        report.invalid += 1
                    continue
                report.scan_rows += 1
                self._take_scanned(name, shape_row)
        for row in scanner.orphan_rows(orphans):
            self._scan_tick(row.pgno, counted, total)
            self._assign_by_shape(row)
        if self.progress is not None:
            self.progress(ProgressEvent("scan", len(counted), total))

    def _scan_tick(self, pgno: int, counted: set[int], total: int) -> None:
        if pgno not in counted:
            counted.add(pgno)
            if self.progress is not None and len(counted) % 50 == 0:
                self.progress(ProgressEvent("scan", len(counted), total))

    def _take_scanned(self, name: str, shape_row: tuple[Any, ...]) -> None:
        row = tuple(shape_row[i] for i in self._source_index[name])
        if self._accept(name, row):
            self.report.tables[name].scan_only += 1

    def _assign_by_shape(self, row: ScannedRow) -> bool:
        for name in CANONICAL_TABLES:
            shape_row = self.shapes[name].normalise(row.rowid, row.values)
            if shape_row is not None:
                report = self.report.tables[name]
                report.scan_rows = (report.scan_rows or 0) + 1
                self._take_scanned(name, shape_row)
                return True
        # Several tables can share a shape (two FTS shadow tables do): name them all.
        like = " or ".join(
            s.name for s in self.other_shapes if s.normalise(row.rowid, row.values) is not None
        )
        like = like or f"{len(row.values)} columns"
        self.report.unassigned[like] = self.report.unassigned.get(like, 0) + 1
        return False

    def finish_report(self) -> None:
        """Recoverable counts, and the message ids an index lists but nobody could read."""
        for name, report in self.report.tables.items():
            report.recoverable = len(self.keys[name])
        messages = self.report.tables["messages"]
        if self.sql is None:
            return
        seen = self.keys["messages"]
        listed = False
        missing: Counter[str] = Counter()
        sample: list[int] = []
        for sid, mid in self.sql.indexed_message_ids():
            listed = True
            if mid not in seen:
                missing[sid] += 1
                if len(sample) < _SAMPLE:
                    sample.append(mid)
        if listed:
            messages.known_missing = sum(missing.values())
            messages.missing_sample = sorted(sample)
            messages.missing_by_session = dict(missing.most_common())


# -- public API ------------------------------------------------------------------------


def inspect(
    source: Path,
    *,
    progress: ProgressCallback | None = None,
    workdir: Path | None = None,
    driver: DriverName | None = None,
) -> RecoveryInspection:
    """Report what can be recovered from ``source`` without writing anything beside it.

    The source's files are copied byte for byte into a private folder under ``workdir``
    (default: the system's temporary folder), read there by both the SQL path and the
    page scanner, and the copy is removed. The source is never opened by SQLite.
    """
    salvage = _Salvage(_source_paths(source), select_driver(driver), progress, workdir)
    try:
        salvage.open()
        salvage.read_sql()
        salvage.read_scan(everything=True)
        salvage.finish_report()
        return salvage.report
    finally:
        salvage.close()


def recover(
    source: Path,
    output: Path,
    *,
    progress: ProgressCallback | None = None,
    workdir: Path | None = None,
    scan: ScanMode = "auto",
    driver: DriverName | None = None,
) -> RecoveryResult:
    """Salvage every readable session and message of ``source`` into a new store at ``output``.

    ``output`` must not exist. The new store is built beside it under a temporary name
    (``.<name>.recover-<pid>.partial``) by the migrations, filled, its FTS indexes
    rebuilt, and checked with ``PRAGMA integrity_check``; only then does it get its name,
    so an interrupted run never leaves a store at ``output``. On failure (or an
    exception such as ``KeyboardInterrupt``) the partial file and the private copy are
    removed; after a SIGKILL the next run removes them (their names carry the pid).
    The page scanner runs when SQL could not read everything (``scan="auto"``), always,
    or never. The private copy goes under ``workdir`` (default: beside ``output``).
    """
    started = time.monotonic()
    source = _source_paths(source)
    output = Path(output)
    _check_output(source, output)
    drv = select_driver(driver)
    # The new store is at most about the source's size: its FTS indexes are rebuilt
    # compactly and nothing else is added. Room for it is checked with the copy's.
    same_place = workdir is None
    salvage = _Salvage(
        source, drv, progress, workdir or output.parent, reserve=1.0 if same_place else 0.0
    )
    partial = _partial_path(output)
    created = [partial, *(partial.with_name(partial.name + s) for s in _SIDECARS)]
    try:
        salvage.open()
        result = RecoveryResult(output=str(output), before=salvage.report)
        engine = create_store_engine(partial, driver=drv)
        try:
            migrate.upgrade(engine)
            with engine.execution_options(**{WRITE_OPTION: True}).connect() as conn:
                with conn.begin():
                    _salvage_into(conn, salvage, result, scan)
                if progress is not None:
                    progress(ProgressEvent("verify", 0, 1))
                result.integrity = _verify(conn, drv)
                result.after = _counts(conn)
        finally:
            engine.dispose()
        if result.integrity != "ok":
            raise RecoveryError(
                f"the recovered store failed its integrity check ({result.integrity}); "
                "it was removed. Report this with the output of --inspect-only"
            )
        _install(partial, output)
    except BaseException:
        for path in created:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        raise
    finally:
        salvage.close()
    result.seconds = time.monotonic() - started
    return result


_SIDECARS = ("-wal", "-shm", "-journal")


def _partial_path(output: Path) -> Path:
    return output.with_name(f".{output.name}.recover-{os.getpid()}{PARTIAL_SUFFIX}")


def _check_output(source: Path, output: Path) -> None:
    sidecars = [output.with_name(output.name + s) for s in _SIDECARS]
    if output.exists() or output.is_symlink() or any(p.exists() for p in sidecars):
        what = "is the source" if output.resolve() == source.resolve() else "already exists"
        raise RecoveryError(
            f"{output} {what}; recover writes only to a new file. "
            "Choose another --output path (the source is never overwritten)"
        )
    # A name SQLite would take for one of the source's own files (its -wal, say) would
    # be read as part of the source by the next open of it.
    own = [source, *(source.with_name(source.name + s) for s in _SIDECARS)]
    if output.absolute() in [p.absolute() for p in own]:
        raise RecoveryError(
            f"{output} is a name of the source's own files; choose another --output path"
        )
    if not output.parent.exists():
        output.parent.mkdir(mode=0o700, parents=True)
    # Leftovers of a run that was killed (SIGKILL runs no cleanup) are removed now.
    remove_stale(output.parent, f".{output.name}.recover-*{PARTIAL_SUFFIX}*")


def _install(partial: Path, output: Path) -> None:
    """Give the finished, verified store its name; never over a file that appeared since.

    The engine is closed: SQLite checkpointed and removed the ``-wal``. A link is
    refused if ``output`` exists (a rename would replace it), so a database written
    there meanwhile is never clobbered.
    """
    for suffix in ("-wal", "-journal"):
        side = partial.with_name(partial.name + suffix)
        if side.exists() and side.stat().st_size > 0:
            raise RecoveryError(
                f"the recovered store still has a non-empty {suffix} after closing; it was "
                "removed. Run the command again"
            )
    with open(partial, "rb") as f:
        os.fsync(f.fileno())
    appeared = RecoveryError(
        f"{output} appeared while the salvage ran; it was left as it is. "
        "Choose another --output path"
    )
    try:
        os.link(partial, output)
    except FileExistsError as exc:
        raise appeared from exc
    except OSError:
        # A file system without hard links: a rename, right after one more check.
        if output.exists() or output.is_symlink():
            raise appeared from None
        os.rename(partial, output)
    else:
        partial.unlink()
    fd = os.open(output.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _salvage_into(
    conn: Connection, salvage: _Salvage, result: RecoveryResult, scan: ScanMode
) -> None:
    # The sync triggers would index row by row; one 'rebuild' at the end is far cheaper
    # (fts.recreate creates the triggers again). Foreign keys are checked at COMMIT, so
    # placeholders for lost sessions can be added after the messages that need them.
    for name in fts.TRIGGER_NAMES:
        conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
    conn.exec_driver_sql("PRAGMA defer_foreign_keys = ON")
    # The (session_id, uid) index takes uids in random order: a page cache that holds
    # it saves re-reading its pages (measured: ~15% of the insert CPU at 200k rows).
    conn.exec_driver_sql(f"PRAGMA cache_size = {_CACHE_KIB}")
    salvage.writer = _Writer(conn, salvage.columns, result)
    salvage.read_sql()
    if scan == "always" or (scan == "auto" and salvage.needs_scan()):
        salvage.read_scan(everything=scan == "always" or salvage.wal_only_frames)
    salvage.writer.flush()
    salvage.finish_report()
    result.skipped_meta = _drop_derived_meta(conn)
    if salvage.progress is not None:
        salvage.progress(ProgressEvent("write", 1, 1))
    result.placeholders = _add_placeholders(conn)
    result.counters_fixed = _fix_counters(conn)
    _keep_sequence(conn, salvage.report.messages_sequence)
    if salvage.progress is not None:
        salvage.progress(ProgressEvent("index", 0, 1))
    # The migrations created both indexes empty: fill them from the canonical rows, then
    # put the sync triggers back (the runtime's DDL, which equals the migrations').
    for ix in fts.INDEXES:
        conn.exec_driver_sql(f"INSERT INTO {ix.name}({ix.name}) VALUES ('rebuild')")
    for statement in fts.trigger_statements():
        conn.exec_driver_sql(statement)
    if salvage.progress is not None:
        salvage.progress(ProgressEvent("index", 1, 1))


def _drop_derived_meta(conn: Connection) -> list[str]:
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


def _add_placeholders(conn: Connection) -> list[str]:
    """Sessions for salvaged messages (and child sessions) whose session row was lost."""
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
    started: dict[str, float] = {}
    for sid, ts in [*orphans, *parents]:
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


def _fix_counters(conn: Connection) -> int:
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


def _keep_sequence(conn: Connection, source_seq: int | None) -> None:
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


def _verify(conn: Connection, driver: Driver) -> str:
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


def _counts(conn: Connection) -> dict[str, int]:
    return {
        name: int(conn.exec_driver_sql(f"SELECT count(*) FROM {_quote(name)}").scalar_one())
        for name in CANONICAL_TABLES
    }
