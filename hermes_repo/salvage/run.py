"""The two salvage entry points: ``inspect`` (what is readable) and ``salvage`` (a new store)."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import Connection

from ..engine import WRITE_OPTION, DriverName, create_store_engine, select_driver
from ..schema import migrate
from ..schema.tables import table_counts
from . import writer
from .copy import source_path
from .output import check_output, install, partial_files, partial_path
from .reader import SalvageReader
from .report import (
    ProgressCallback,
    ProgressEvent,
    SalvageError,
    SalvageInspection,
    SalvageResult,
)
from .shapes import SALVAGED_TABLES

__all__ = ["ScanMode", "inspect", "salvage"]

ScanMode = Literal["auto", "always", "never"]


def inspect(
    source: Path,
    *,
    progress: ProgressCallback | None = None,
    workdir: Path | None = None,
    driver: DriverName | None = None,
) -> SalvageInspection:
    """Report what can be salvaged from ``source`` without writing anything beside it.

    The source's files are copied byte for byte into a private folder under ``workdir``
    (default: the system's temporary folder), read there by both the SQL path and the
    page scanner, and the copy is removed. The source is never opened by SQLite.
    """
    reader = SalvageReader(source_path(source), select_driver(driver), progress, workdir)
    try:
        reader.open()
        reader.read_sql()
        reader.read_scan(everything=True)
        reader.finish_report()
        return reader.report
    finally:
        reader.close()


def salvage(
    source: Path,
    output: Path,
    *,
    progress: ProgressCallback | None = None,
    workdir: Path | None = None,
    scan: ScanMode = "auto",
    driver: DriverName | None = None,
) -> SalvageResult:
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
    source = source_path(source)
    output = Path(output)
    check_output(source, output)
    drv = select_driver(driver)
    # The new store is at most about the source's size: its FTS indexes are rebuilt
    # compactly and nothing else is added. Room for it is checked with the copy's.
    same_place = workdir is None
    reader = SalvageReader(
        source, drv, progress, workdir or output.parent, reserve=1.0 if same_place else 0.0
    )
    partial = partial_path(output)
    try:
        reader.open()
        result = SalvageResult(output=str(output), before=reader.report)
        engine = create_store_engine(partial, driver=drv)
        try:
            migrate.upgrade(engine)
            with engine.execution_options(**{WRITE_OPTION: True}).connect() as conn:
                with conn.begin():
                    _salvage_into(conn, reader, result, scan)
                if progress is not None:
                    progress(ProgressEvent("verify", 0, 1))
                result.integrity = writer.verify(conn, drv)
                result.after = table_counts(conn, SALVAGED_TABLES)
        finally:
            engine.dispose()
        if result.integrity != "ok":
            raise SalvageError(
                f"the recovered store failed its integrity check ({result.integrity}); "
                "it was removed. Report this with the output of --inspect-only"
            )
        install(partial, output)
    except BaseException:
        for path in partial_files(output):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        raise
    finally:
        reader.close()
    result.seconds = time.monotonic() - started
    return result


def _salvage_into(
    conn: Connection, reader: SalvageReader, result: SalvageResult, scan: ScanMode
) -> None:
    writer.prepare(conn)
    reader.writer = writer.RowWriter(conn, reader.columns, result)
    reader.read_sql()
    if scan == "always" or (scan == "auto" and reader.needs_scan()):
        reader.read_scan(everything=scan == "always" or reader.wal_only_frames)
    reader.writer.flush()
    reader.finish_report()
    result.skipped_meta = writer.drop_derived_meta(conn)
    if reader.progress is not None:
        reader.progress(ProgressEvent("write", 1, 1))
    result.placeholders = writer.add_placeholders(conn)
    result.counters_fixed = writer.fix_counters(conn)
    writer.keep_sequence(conn, reader.report.messages_sequence)
    if reader.progress is not None:
        reader.progress(ProgressEvent("index", 0, 1))
    writer.rebuild_indexes(conn)
    if reader.progress is not None:
        reader.progress(ProgressEvent("index", 1, 1))
