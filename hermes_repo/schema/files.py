"""The files SQLite keeps beside a database, read-only opens, fsync and free space."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

__all__ = [
    "SIDE_SUFFIXES",
    "SQLITE_HEADER",
    "free_bytes",
    "fsync_dir",
    "fsync_file",
    "read_only_connect",
    "read_only_uri",
    "recovered_path",
    "side_file",
    "side_files",
    "store_bytes",
]

#: What SQLite may keep beside ``state.db``: the WAL, its shared-memory index and the
#: rollback journal. They belong to the database: copied, moved and removed with it.
SIDE_SUFFIXES = ("-wal", "-shm", "-journal")

#: The first 16 bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"


def side_file(db_path: Path, suffix: str) -> Path:
    """``state.db-wal`` and the like: the side file ``suffix`` of ``db_path``."""
    return db_path.with_name(db_path.name + suffix)


def side_files(db_path: Path) -> list[Path]:
    """Every side file name of ``db_path`` (present or not)."""
    return [side_file(db_path, s) for s in SIDE_SUFFIXES]


def store_bytes(db_path: Path) -> int:
    """The size of the database and its WAL: about what a copy of it needs."""
    return sum(p.stat().st_size for p in (db_path, side_file(db_path, "-wal")) if p.is_file())


def free_bytes(folder: Path) -> int:
    """Free space on the disk holding ``folder``."""
    return shutil.disk_usage(folder).free


def read_only_uri(db_path: Path) -> str:
    """A ``file:`` URI that opens ``db_path`` with ``mode=ro``: the open can never write."""
    return db_path.resolve().as_uri() + "?mode=ro"


def read_only_connect(module: Any, db_path: Path) -> Any:
    """A DB-API connection of ``module`` (``sqlite3`` or ``pysqlite3.dbapi2``) in ``mode=ro``."""
    return module.connect(read_only_uri(db_path), uri=True, check_same_thread=False)


def fsync_file(path: Path) -> None:
    """Force ``path``'s content to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(folder: Path) -> None:
    """Force ``folder``'s entries to disk: a rename is durable only after this."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recovered_path(db_path: Path) -> Path:
    """Where a salvage of ``db_path`` goes: ``<home>/recovered-<UTC stamp>/state.db``.

    The stamp is the damaged file's modification time, so every hint about the same
    incident (doctor, repair, this module) names the same folder, and the next
    incident, on the file ``db replace`` installed, gets a new one: the folder of a
    salvage already installed is never offered again.
    """
    try:
        when = os.lstat(db_path).st_mtime_ns
    except OSError:
        when = time.time_ns()
    seconds, rest = divmod(when, 1_000_000_000)
    # Microseconds: two incidents within one second (a test, a crash loop) still differ.
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(seconds)) + f".{rest // 1000:06d}Z"
    return db_path.parent / f"recovered-{stamp}" / db_path.name
