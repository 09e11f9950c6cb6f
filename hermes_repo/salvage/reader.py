"""Reading a damaged store's private copy by both paths, table by table.

1. **SQL path** (:mod:`.sqlreader`): a read-only connection scans each canonical table
   by rowid, resuming past damaged pages.
2. **Page scanner** (:mod:`.pagescan`), when SQL cannot open the file (a broken header),
   could not read part of a table, or read fewer rows than the source's own count claims.
   It decodes table-leaf pages directly (the WAL's newest committed frame of a page
   wins), attributes rows to their table by the b-tree they were found in, and rows from
   leaves that no readable b-tree reaches by their shape (:mod:`.shapes`).

Rows that fit no canonical table are counted and reported, never dropped in silence.
"""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..driver_errors import describe
from ..engine import Driver
from ..schema.tables import CANONICAL_TABLES
from .copy import make_copy
from .pagescan import LeafRef, PageSource, ScannedRow, Scanner
from .report import (
    SAMPLE,
    ProgressCallback,
    ProgressEvent,
    SalvageError,
    SalvageInspection,
    TableReport,
)
from .shapes import (
    CHECKPOINT_TABLES,
    MODEL_TABLES,
    Shape,
    key_column,
    key_columns,
    match_canonical,
    model_shape,
    quote,
    resembles,
    schema_shape,
)
from .sqlreader import SqlReader
from .writer import RowWriter

__all__ = ["SalvageReader"]

_PROGRESS_EVERY = 2_000


class SalvageReader:
    """One run over a private copy: SQL path, page scanner, and a sink for the rows.

    Rows found by both paths are de-duplicated on the primary key (SQL wins, then the
    b-tree, then orphan pages); each distinct row goes to ``writer`` when one is set.
    """

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
        self.report = SalvageInspection(source=str(source), header="empty")
        self.copy = make_copy(source, workdir, progress, self.report.notes, reserve=reserve)
        self.report.hot_journal = self.copy.hot_journal
        self.sql: SqlReader | None = None
        self._src: PageSource | None = None
        self._scanner: Scanner | None = None
        #: The tables read: the canonical ones, and LangGraph's checkpoint tables when
        #: the source has them (set by open()).
        self.tables: list[str] = list(CANONICAL_TABLES)
        self.keys: dict[str, set[Any]] = {t: set() for t in CANONICAL_TABLES}
        self._key_index: dict[str, list[int]] = {}
        self.writer: RowWriter | None = None
        self.columns: dict[str, list[str]] = {}
        self._source_index: dict[str, list[int]] = {}
        self.shapes: dict[str, Shape] = {}
        self.other_shapes: list[Shape] = []
        self._emitted = 0

    # lifecycle

    def close(self) -> None:
        """Close both views of the copy and remove the private folder."""
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
            self.sql = SqlReader(self.copy.db, self.driver, hot_journal=self.copy.hot_journal)
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
        # A source from before revision 0006 has no checkpoint tables; a source whose
        # schema is unreadable may have them, and their rows are looked for by shape.
        self.tables = [
            *CANONICAL_TABLES,
            *(t for t in CHECKPOINT_TABLES if t in schema or not schema),
        ]
        self.keys = {t: set() for t in self.tables}
        for name in self.tables:
            parsed = schema_shape(self.driver, name, schema[name]) if name in schema else None
            if parsed is None:
                self.report.notes.append(
                    f"the source's definition of {name} is unreadable; its rows are matched "
                    "against this version's columns"
                )
            self.shapes[name] = parsed or model_shape(name)
            self.report.tables[name] = TableReport(name)
        for name, sql in schema.items():
            # A virtual table stores nothing in a b-tree of its own (its shadow tables do).
            virtual = sql.lstrip().upper().startswith("CREATE VIRTUAL")
            if name not in self.tables and not virtual:
                shape = schema_shape(self.driver, name, sql)
                if shape is not None:
                    self.other_shapes.append(shape)
        for name in self.tables:
            source_cols = [c.name for c in self.shapes[name].columns]
            wanted = [c.name for c in MODEL_TABLES[name].columns]
            common = [c for c in wanted if c in source_cols]
            for key in key_columns(name):
                if key not in common:
                    raise SalvageError(
                        f"the source's {name} table has no {key!r} column; "
                        "it is not a hermes_repo store"
                    )
            self.columns[name] = common
            self._key_index[name] = [common.index(k) for k in key_columns(name)]
            self._source_index[name] = [source_cols.index(c) for c in common]
        self.report.messages_sequence = self._sequence()

    @property
    def scanner(self) -> Scanner:
        """The page scanner over the copy, made on first use (it reads the schema)."""
        if self._scanner is None:
            if self._src is None:
                raise RuntimeError("the page view is opened by SalvageReader.open()")
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
        index = self._key_index[table]
        key = row[index[0]] if len(index) == 1 else tuple(row[i] for i in index)
        seen = self.keys[table]
        if key in seen:
            return False
        seen.add(key)
        if self.writer is not None:
            self.writer.add(table, row)
        return True

    def keys_index(self, table: str) -> int:
        """Where the primary key sits in the rows handed on for ``table``."""
        return self.columns[table].index(key_column(table))

    def read_sql(self) -> None:
        """Every row SQL can read, table by table."""
        if self.sql is None:
            for t in self.report.tables.values():
                t.sql_errors.append(f"SQL cannot open the file: {self.report.sql_error}")
            return
        total = 0
        for name in self.tables:
            claimed = self.sql.scalar(f"SELECT count(*) FROM {quote(name)}")
            self.report.tables[name].claimed = claimed if isinstance(claimed, int) else None
            total += claimed if isinstance(claimed, int) else 0
        for name in self.tables:
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
        """Whether SQL may have missed rows, so the page scanner must look too."""
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
            (name, None if everything else self._want(name)) for name in self.tables
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
        match = match_canonical(self.shapes, row.rowid, row.values)
        if match is not None:
            name, shape_row = match
            report = self.report.tables[name]
            report.scan_rows = (report.scan_rows or 0) + 1
            self._take_scanned(name, shape_row)
            return True
        like = resembles(self.other_shapes, row.rowid, row.values)
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
                if len(sample) < SAMPLE:
                    sample.append(mid)
        if listed:
            messages.known_missing = sum(missing.values())
            messages.missing_sample = sorted(sample)
            messages.missing_by_session = dict(missing.most_common())
