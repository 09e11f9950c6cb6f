"""Online backups through SQLite's backup API (never a file copy of a live WAL store)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqlalchemy import Engine

from ..engine import engine_driver

__all__ = ["backup_to", "timestamped_backup"]


def backup_to(engine: Engine, dest: Path) -> Path:
    """Copy the live database into ``dest`` (created 0600) with the backup API."""
    driver = engine_driver(engine)
    fd = os.open(dest, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    raw = engine.raw_connection()
    try:
        target = driver.module.connect(str(dest))
        try:
            raw.driver_connection.backup(target)  # type: ignore[union-attr]
        finally:
            target.close()
    finally:
        raw.close()
    return dest


def timestamped_backup(engine: Engine, db_path: Path, label: str) -> Path:
    """``state.db.<label>-<UTC time>.bak`` beside the store."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return backup_to(engine, db_path.with_name(f"{db_path.name}.{label}-{stamp}.bak"))
