"""Online backups through SQLite's backup API (never a file copy of a live WAL store)."""

from __future__ import annotations

import itertools
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ..engine import Driver, create_store_engine, engine_driver
from ..errors import BackupSpaceError

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = [
    "BACKUP_KEEP",
    "BACKUP_MAX_BYTES",
    "BackupSpaceError",
    "backup_to",
    "prune_backups",
    "read_only_engine",
    "timestamped_backup",
]

#: Raw backups kept per label (``state.db.pre-repair-*.bak``...); the newest is always
#: kept, older ones go beyond this count or beyond :data:`BACKUP_MAX_BYTES` in total.
BACKUP_KEEP = 3
BACKUP_MAX_BYTES = 2 * 2**30


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
    _require_space(db_path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in itertools.count():
        suffix = "" if n == 0 else f"-{n:02d}"
        dest = db_path.with_name(f"{db_path.name}.{label}-{stamp}{suffix}.bak")
        if dest.exists():
            continue
        try:
            backup_to(engine, dest)
        except FileExistsError:
            continue  # taken between the check and the create
        prune_backups(db_path, label, protect=dest)
        return dest
    raise AssertionError("unreachable")  # pragma: no cover - itertools.count never ends


def _require_space(db_path: Path) -> None:
    """A backup is about the size of the store and its -wal: check before writing one."""
    need = sum(
        p.stat().st_size for p in (db_path, db_path.with_name(db_path.name + "-wal")) if p.is_file()
    )
    free = shutil.disk_usage(db_path.parent).free
    # No fixed margin: the guarded FTS rebuild has checked for twice the store's size
    # before it calls here, and must never fail at this point instead.
    if free < need * 1.1:
        raise BackupSpaceError(
            f"not enough free space beside {db_path} for a backup ({need / 1e6:.1f} MB "
            f"needed, {free / 1e6:.1f} MB free), so nothing was changed; free space on "
            "that disk (old state.db.*.bak files can go) and retry"
        )


def prune_backups(
    db_path: Path,
    label: str,
    *,
    keep: int = BACKUP_KEEP,
    max_bytes: int = BACKUP_MAX_BYTES,
    protect: Path | None = None,
) -> list[Path]:
    """Delete the oldest ``state.db.<label>-*.bak`` beyond ``keep`` or ``max_bytes``.

    The newest backup (and ``protect``) always stays. Returns what was removed.
    """
    backups = sorted(
        db_path.parent.glob(f"{db_path.name}.{label}-*.bak"),
        key=lambda p: (p.stat().st_mtime, p.name),
        reverse=True,
    )
    removed: list[Path] = []
    total = 0
    for i, path in enumerate(backups):
        total += path.stat().st_size
        if path == protect or i == 0:
            continue
        if i >= keep or total > max_bytes:
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
