"""The SQL path of a salvage: reads of the private copy through SQLite, around damage.

A read-only connection scans a table by rowid. When a scan fails on a damaged page, the
reader finds where reading can resume (an exponential then binary search over the rowid
space) and reads every rowid of the skipped range one by one, so rows on undamaged pages
are kept. Each gap is recorded in the table's report.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..driver_errors import describe
from ..engine import Driver
from .report import MAX_ROWID, MIN_ROWID, TableReport
from .shapes import quote

__all__ = ["SqlReader"]

# Rowids of a skipped range are read one by one when the range is at most this wide
# (about a second of point lookups); wider ranges are left to the page scanner.
_POINT_LOOKUP_LIMIT = 200_000
# A damaged leaf holds a few hundred rows at most; when this many lookups in a row fail,
# a damaged interior page is in the way of every rowid below it, and only the page
# scanner can read on.
_MAX_FAILED_LOOKUPS = 2_048
_MAX_ERRORS = 10


class SqlReader:
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
        """Close the connection to the copy."""
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
        cols = ", ".join(quote(c) for c in columns)
        base = f"SELECT rowid, {cols} FROM {quote(table)} NOT INDEXED"
        scan = f"{base} WHERE rowid >= ? ORDER BY rowid"
        probe = f"{scan} LIMIT 1"
        point = f"{base} WHERE rowid = ?"
        pos = MIN_ROWID
        while True:
            try:
                for row in self.conn.execute(scan, (pos,)):
                    yield tuple(row)
                    if row[0] >= MAX_ROWID:
                        return
                    pos = row[0] + 1
                break
            except self.module.DatabaseError as exc:
                self._note(report, exc)
                resume = self._resume_point(probe, pos)
                report.sql_gaps.append((pos, MAX_ROWID if resume is None else resume - 1))
                if resume is None:
                    break
                pos = resume
        for lo, hi in report.sql_gaps:
            # Rowids below 1 are never assigned automatically; a gap that starts at the
            # bottom of the rowid space is therefore read from 1.
            lo = max(lo, 0)
            if hi == MAX_ROWID and upper_hint is not None:
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
            x = min(pos + step, MAX_ROWID)
            if self._readable(probe, x):
                break
            failed = x
            if x == MAX_ROWID:
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
                first = self.conn.execute(f"PRAGMA index_info({quote(name)})").fetchone()
                if first is None or first[2] != "session_id":
                    continue
                rows = self.conn.execute(
                    f"SELECT session_id, id FROM messages INDEXED BY {quote(name)}"
                ).fetchall()
            except self.module.DatabaseError:
                continue
            yield from ((str(s), int(i)) for s, i in rows)
            return
