"""Who holds the store: a registry of open stores, kept with shared file locks.

Every open :class:`~hermes_repo.StateStore` holds a *shared* ``flock`` on
``state.db.holders``. Operations that must run with the store to themselves (the guarded
FTS rebuild, repair, snapshot restore) ask for the *exclusive* lock without waiting: if
any other process has the store open, the request fails at once and the operation is
refused instead of racing a live writer. The kernel drops a dead process's locks, so a
crashed holder never blocks repairs. Processes that open ``state.db`` without this
library (the ``sqlite3`` shell, say) are not seen; the operator docs say to stop them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["HolderLock", "StoreHeldError", "holders_path"]


class StoreHeldError(RuntimeError):
    """Another process has the store open."""


def holders_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".holders")


def _open_lock_file(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


class HolderLock:
    """This process's registration as a holder of one store file."""

    def __init__(self, db_path: Path) -> None:
        self.path = holders_path(db_path)
        self._fd: int | None = None

    def acquire_shared(self) -> None:
        """Register as a holder; waits only while an exclusive operation runs."""
        if self._fd is None:
            self._fd = _open_lock_file(self.path)
        fcntl.flock(self._fd, fcntl.LOCK_SH)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the store alone for the block, or raise :class:`StoreHeldError` at once.

        A holder upgrades its own shared lock (so its own registration does not count as
        "another process"), and returns to shared afterwards.
        """
        own = self._fd is not None
        fd = self._fd if self._fd is not None else _open_lock_file(self.path)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                if own:
                    # flock converts a lock by dropping it first: take the shared one back.
                    fcntl.flock(fd, fcntl.LOCK_SH)
                raise StoreHeldError(
                    "another process has the store open; stop it (e.g. the gateway) and retry"
                ) from exc
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_SH if own else fcntl.LOCK_UN)
        finally:
            if not own:
                os.close(fd)
