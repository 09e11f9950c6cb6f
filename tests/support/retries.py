"""What the retry loop did, read from its own log records and SQLite's busy handler.

Tests assert attempts, order and outcomes, never elapsed time: a loaded machine makes
every wall-clock upper bound flaky, and the benchmarks are where speed is measured.

* :func:`retries` lists the attempt numbers the retry loop (``hermes_repo.retry``)
  logged as "transient write failure (attempt N), retrying": one record per replay.
* :func:`count_busy_handler_calls` installs a counting busy handler on a DB-API
  connection (ctypes, on the proved C handle): it shows whether SQLite waited on a
  lock at all, where a timing would only suggest it.
* :func:`extended_code` reads ``sqlite3_extended_errcode`` of a DB-API connection
  (pysqlite3 reports BUSY_SNAPSHOT, 517, as plain BUSY, 5).
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hermes_repo import sqlite_capi

__all__ = [
    "RETRY_LOGGER",
    "count_busy_handler_calls",
    "extended_code",
    "retries",
    "watching_retries",
]

RETRY_LOGGER = "hermes_repo.retry"
_RETRY_MESSAGE = "transient write failure (attempt %d), retrying: %s"


def retries(caplog: pytest.LogCaptureFixture) -> list[int]:
    """Attempt numbers of the replays logged so far (caplog must capture DEBUG)."""
    return [
        int(r.args[0])  # type: ignore[index]
        for r in caplog.records
        if r.name == RETRY_LOGGER and r.msg == _RETRY_MESSAGE and r.args
    ]


@contextmanager
def watching_retries(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Capture the retry loop's DEBUG records for the block."""
    with caplog.at_level(logging.DEBUG, logger=RETRY_LOGGER):
        yield


_BUSY_HANDLER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)
_keep: list[Any] = []  # the C callbacks must outlive the connections they are set on


def _c_handle(module: ModuleType, dbapi_conn: Any, db: Path) -> tuple[Any, int]:
    """The driver's SQLite library and the connection's proved C handle."""
    lib = sqlite_capi._library(module)
    assert lib is not None, "the driver's SQLite library is not reachable through ctypes"
    handle = sqlite_capi._handle(lib, dbapi_conn, db)
    assert handle is not None, "the connection's C handle could not be proved"
    return lib, handle


def extended_code(module: ModuleType, dbapi_conn: Any, db: Path) -> int:
    """``sqlite3_extended_errcode`` of a DB-API connection (pysqlite3 reports 517 as 5)."""
    lib, handle = _c_handle(module, dbapi_conn, db)
    lib.sqlite3_extended_errcode.restype = ctypes.c_int
    lib.sqlite3_extended_errcode.argtypes = [ctypes.c_void_p]
    return int(lib.sqlite3_extended_errcode(handle))


def count_busy_handler_calls(module: ModuleType, dbapi_conn: Any, db: Path) -> list[int]:
    """Replace the connection's busy timeout by a handler that gives up at once and
    records each call; returns the list it appends to (empty: SQLite never waited)."""
    lib, handle = _c_handle(module, dbapi_conn, db)
    calls: list[int] = []

    def handler(_arg: Any, count: int) -> int:
        calls.append(count)
        return 0  # do not wait: report SQLITE_BUSY now

    callback = _BUSY_HANDLER(handler)
    _keep.append(callback)
    lib.sqlite3_busy_handler.restype = ctypes.c_int
    lib.sqlite3_busy_handler.argtypes = [ctypes.c_void_p, _BUSY_HANDLER, ctypes.c_void_p]
    assert lib.sqlite3_busy_handler(ctypes.c_void_p(handle), callback, None) == 0
    return calls
