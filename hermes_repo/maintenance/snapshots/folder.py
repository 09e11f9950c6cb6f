"""The snapshot folder: 0700, one create or restore at a time, room checked first.

Snapshots are whole conversation histories, so the folder is private and never a
symlink; a lock file serialises the operations that write in it, and free space is
checked before anything is written.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from ...errors import UnsafePathError
from ...schema.files import free_bytes, side_files
from .manifest import PARTIAL, SNAPSHOT_DIR, SnapshotBusyError, SnapshotSpaceError

__all__ = [
    "FOLDER_LOCK_WAIT_S",
    "SPACE_MARGIN_BYTES",
    "SPACE_MARGIN_SHARE",
    "clean_partials",
    "ensure_folder",
    "folder_lock",
    "require_space",
    "unlink_with_sides",
    "with_margin",
]

log = logging.getLogger("hermes_repo.snapshots")

#: Space wanted beyond the copy itself: SQLite's temporary journal while the copy is
#: switched out of WAL, the manifest, and room left for the agents that keep writing.
SPACE_MARGIN_BYTES = 16 * 2**20
SPACE_MARGIN_SHARE = 0.10
#: How long a create or restore waits for another snapshot operation to finish.
FOLDER_LOCK_WAIT_S = 10.0
_LOCK_NAME = ".lock"


def ensure_folder(folder: Path) -> None:
    """Create the folder 0700, or tighten it; refuse a symlink (it could aim copies anywhere)."""
    if folder.is_symlink():
        raise UnsafePathError(
            f"{folder} is a symlink; snapshots are not written through one. "
            "Replace it with a real folder and retry"
        )
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not folder.is_dir():
        raise UnsafePathError(f"{folder} is not a folder; move it away and retry")
    if stat.S_IMODE(folder.stat().st_mode) != 0o700:
        # Snapshots are whole conversation histories: no one else may list or read them.
        os.chmod(folder, 0o700)


@contextlib.contextmanager
def folder_lock(folder: Path, wait_s: float | None = None) -> Iterator[None]:
    """One create or restore at a time per folder, so retention and the clean-up of
    half-made files never touch a snapshot that another operation is writing.

    ``wait_s`` defaults to :data:`FOLDER_LOCK_WAIT_S`, read at call time (a default
    argument would freeze it at import, and setting the module value would do nothing).
    """
    if wait_s is None:
        wait_s = FOLDER_LOCK_WAIT_S
    fd = os.open(folder / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SnapshotBusyError(
                        f"another snapshot create or restore is running in {folder} "
                        f"(waited {wait_s:.0f} s); wait for it to finish and retry"
                    ) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def unlink_with_sides(path: Path) -> None:
    for p in (path, *side_files(path)):
        p.unlink(missing_ok=True)


def with_margin(size: int) -> int:
    return size + max(SPACE_MARGIN_BYTES, int(size * SPACE_MARGIN_SHARE))


def require_space(needs: list[tuple[Path, int, str]]) -> None:
    """Refuse before writing anything when a filesystem lacks room for what goes on it.

    ``needs`` holds (folder, bytes, what); folders on one filesystem add up.
    """
    by_device: dict[int, tuple[Path, int, list[str]]] = {}
    for folder, size, what in needs:
        dev = folder.stat().st_dev
        prev = by_device.get(dev)
        if prev is None:
            by_device[dev] = (folder, size, [what])
        else:
            by_device[dev] = (prev[0], prev[1] + size, [*prev[2], what])
    for folder, need, whats in by_device.values():
        free = free_bytes(folder)
        if free < need:
            raise SnapshotSpaceError(
                f"not enough free space in {folder}: {' and '.join(whats)} need "
                f"~{_mib(need)} MiB, only {_mib(free)} MiB free; free space on that disk "
                f"(e.g. delete old snapshots in {SNAPSHOT_DIR}/) and retry"
            )


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def clean_partials(folder: Path, prefix: str = "") -> None:
    """Remove what an interrupted create or restore left (only ``<prefix>*.partial*``)."""
    for p in folder.glob(f"{prefix}*{PARTIAL}*"):
        if p.is_file() and not p.is_symlink():
            log.info("removing %s, left by an interrupted snapshot operation", p)
            p.unlink(missing_ok=True)
