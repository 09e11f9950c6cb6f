"""Counts from a fault run, for the record in docs/reliability.md.

With ``HERMES_FAULT_SUMMARY=<file>`` set, :func:`record` writes one JSON object per test
into that file (a run of several tests keeps every entry); unset, it does nothing.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from hermes_repo.engine import select_driver
from tests.support.spooling import raw

__all__ = ["ENV", "record", "stored_counts"]

ENV = "HERMES_FAULT_SUMMARY"


def record(test: str, **counts: Any) -> None:
    """Store ``counts`` under ``test`` in the summary file, with the date and the SQLite."""
    target = os.environ.get(ENV)
    if not target:
        return
    path = Path(target)
    # Tests run in several worker processes: one read-modify-write at a time.
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _merge(path, test, counts)


def _merge(path: Path, test: str, counts: dict[str, Any]) -> None:
    try:
        summary = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        summary = {}
    driver = select_driver()
    summary[test] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "driver": driver.name,
        "sqlite": driver.sqlite_version,
        **counts,
    }
    path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")


def stored_counts(home: Path) -> tuple[int, int]:
    """(rows, distinct uids) of the store's ``messages`` table, read raw."""
    con = raw(home, timeout=5.0)
    try:
        sql = "SELECT count(*), count(DISTINCT uid) FROM messages"
        rows, distinct = con.execute(sql).fetchone()
    finally:
        con.close()
    return int(rows), int(distinct)
