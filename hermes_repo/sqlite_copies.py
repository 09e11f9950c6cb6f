"""Detect a second copy of SQLite in this process working on the store's file.

With the bundled ``pysqlite3`` as the driver, a connection that the standard ``sqlite3``
module opens on the same file *in the same process* (the host application's own code,
a script, a test) runs on another copy of the SQLite library. POSIX advisory locks are
per process, and each copy keeps its own table of them: a lock held by one copy is
invisible to the other, and a close by one drops the locks of the other. That is one of
SQLite's documented ways to corrupt a database ("How To Corrupt An SQLite Database
File", §2.2.1 multiple copies of SQLite linked into the same application).

How it is found: every live ``sqlite3.Connection`` object (through :mod:`gc`) is asked
for its main file (``PRAGMA database_list``). The limits: a connection made in another
thread without ``check_same_thread=False`` refuses the question, so its file is read
from the C handle instead (``sqlite3_db_filename``, see :mod:`hermes_repo.sqlite_capi`),
and where that is unavailable the connection is counted as unchecked; closed
connections hold no lock and are skipped; a C extension that links its own SQLite
(or ``ctypes``) leaves no Python object and is not seen. Comparing this process's open
file descriptors on ``state.db`` with the store's own connections was rejected: SQLite
keeps descriptors of closed connections open while other connections hold locks on the
same inode, so a count would raise false alarms.
"""

from __future__ import annotations

import gc
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .engine import Driver
from .sqlite_capi import db_filename

__all__ = [
    "ForeignConnections",
    "foreign_connections",
    "two_copies_notes",
    "two_copies_problems",
]


@dataclass(frozen=True)
class ForeignConnections:
    """Open standard-library connections in this process: on the store's file, or unknown."""

    on_store: int = 0
    unchecked: int = 0


def _main_file(conn: Any, module: Any) -> str | None:
    try:
        rows = conn.execute("PRAGMA database_list").fetchall()
    except module.ProgrammingError as exc:
        if "closed" in str(exc):
            return ""  # closed: holds no lock
        return db_filename(conn, module)  # another thread's: ask the C handle
    except module.Error:
        return None
    return next((str(r[2]) for r in rows if r[1] == "main"), "")


def foreign_connections(driver: Driver, db_path: Path) -> ForeignConnections:
    """Count the standard ``sqlite3`` connections in this process open on ``db_path``
    while the store's driver is another copy of SQLite (none when it is the same)."""
    std = sys.modules.get("sqlite3")
    if std is None or driver.module is std:
        return ForeignConnections()  # never imported, or the store uses that copy itself
    target = os.path.realpath(db_path)
    on_store = unchecked = 0
    for obj in gc.get_objects():
        if not isinstance(obj, std.Connection):
            continue
        name = _main_file(obj, std)
        if name is None:
            unchecked += 1
        elif name and os.path.realpath(name) == target:
            on_store += 1
    return ForeignConnections(on_store, unchecked)


def two_copies_problems(driver: Driver, db_path: Path) -> list[tuple[str, str]]:
    """(cause, fix) pairs when a second SQLite copy in this process has the file open."""
    found = foreign_connections(driver, db_path)
    problems = []
    if found.on_store:
        problems.append(
            (
                f"{found.on_store} connection(s) of the standard `sqlite3` module in this "
                f"process are open on {db_path} while the store runs on {driver.name}, "
                "another copy of SQLite: the two copies do not see each other's locks, a "
                "known way to corrupt the database",
                "close them; open the file through the store, through its driver module "
                "(`hermes_repo.engine.select_driver().module`) or from another process",
            )
        )
    if found.unchecked:
        problems.append(
            (
                f"{found.unchecked} connection(s) of the standard `sqlite3` module in this "
                "process could not be checked for the store's file",
                f"make sure none of them opens it while the store runs on {driver.name}",
            )
        )
    return problems


def two_copies_notes(driver: Driver, db_path: Path) -> list[str]:
    """The same, as the one-line notes of ``StateStore.health()``."""
    return [f"{cause}; {fix}" for cause, fix in two_copies_problems(driver, db_path)]
