"""Online backups through SQLite's backup API (never a file copy of a live WAL store)."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path

from sqlalchemy import Engine

from ..engine import Driver, create_store_engine, engine_driver

__all__ = ["backup_to", "read_only_engine", "timestamped_backup"]


def read_only_engine(db_path: Path, driver: Driver) -> Engine:
    """An engine on an existing store whose connections are opened ``mode=ro``.

    The source for a backup that must not write to the store it copies: a damaged file
    (a read-write connection's close-time checkpoint can spread the damage), or a store
    an operator asked to leave as it is. Built by :func:`create_store_engine` so the
    store's connection hooks run; the ``creator`` only swaps in the read-only open.
    """
    uri = db_path.resolve().as_uri() + "?mode=ro"
    return create_store_engine(
        db_path,
        driver=driver,
        creator=lambda: driver.module.connect(uri, uri=True, check_same_thread=False),
    )


def backup_to(engine: Engine, dest: Path) -> Path:
    """Copy the live database into ``dest`` (created 0600, must not exist) with the backup API.

    A failed copy (disk full) removes the half-written file: it must never pass for a
    backup later.
    """
    driver = engine_driver(engine)
    fd = os.open(dest, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    try:
        raw = engine.raw_connection()
        try:
            target = driver.module.connect(str(dest))
            try:
                raw.driver_connection.backup(target)  # type: ignore[union-attr]
            finally:
                target.close()
        finally:
            raw.close()
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return dest


def timestamped_backup(engine: Engine, db_path: Path, label: str) -> Path:
    """``state.db.<label>-<UTC time>[-NN].bak`` beside the store, never overwriting one.

    Names carry the time to the second; a second backup within the same second (a
    restart loop, a deploy script run twice) gets a counter instead of failing.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in itertools.count():
        suffix = "" if n == 0 else f"-{n:02d}"
        dest = db_path.with_name(f"{db_path.name}.{label}-{stamp}{suffix}.bak")
        if dest.exists():
            continue
        try:
            return backup_to(engine, dest)
        except FileExistsError:
            continue  # taken between the check and the create
    raise AssertionError("unreachable")  # pragma: no cover - itertools.count never ends
