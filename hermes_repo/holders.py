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
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from .errors import StoreHeldError
from .schema.sidefiles import open_side_file

__all__ = ["HolderLock", "StoreHeldError", "holder_pids", "holders_path"]


def holders_path(db_path: Path) -> Path:
    """The lock file whose shared holders are the processes that have the store open."""
    return db_path.with_name(db_path.name + ".holders")


def holder_pids(db_path: Path) -> tuple[int, ...]:
    """Pids of the *other* processes registered as holders of the store, best effort.

    An operator told "another process has the store open" needs to know which one to
    stop. ``flock`` does not say, but Linux lists every lock in ``/proc/locks``;
    elsewhere (or when a pid lives in another pid namespace) the answer is empty.
    """
    return lock_pids([holders_path(db_path)], kinds=("FLOCK",))


def lock_pids(paths: Iterable[Path], *, kinds: tuple[str, ...]) -> tuple[int, ...]:
    """Pids of other processes holding a lock of one of ``kinds`` (``FLOCK``, ``POSIX``,
    ``OFDLCK``) on any of ``paths``, read from ``/proc/locks`` (Linux; elsewhere empty)."""
    keys: set[tuple[int, int, int]] = set()
    for path in paths:
        with contextlib.suppress(OSError):
            st = os.stat(path)
            keys.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    if not keys:
        return ()
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return ()
    pids: set[int] = set()
    for line in lines:
        # "1: FLOCK  ADVISORY  READ 15909 fe:00:2171713 0 EOF"; "->" marks a waiter.
        fields = line.split()
        if len(fields) < 6 or fields[1] not in kinds or "->" in fields:
            continue
        try:
            major, minor, inode = fields[5].split(":")
            key = (int(major, 16), int(minor, 16), int(inode))
            pid = int(fields[4])
        except ValueError:
            continue
        # -1: an open-file-description lock, which has no owning process.
        if key in keys and pid not in (0, -1, os.getpid()):
            pids.add(pid)
    return tuple(sorted(pids))


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists (someone else's process counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _open_lock_file(path: Path) -> int:
    # 0600, never through a symlink, a regular file or an UnsafePathError naming it.
    return open_side_file(path)


class HolderLock:
    """This process's registration as a holder of one store file."""

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.path = holders_path(db_path)
        self._fd: int | None = None
        self._exclusive = False

    def acquire_shared(self, timeout_s: float | None = None) -> None:
        """Register as a holder; waits only while an exclusive operation runs.

        ``timeout_s`` bounds that wait (None: as long as it runs); when it is spent,
        :class:`StoreHeldError` names the process that holds the store alone.
        """
        if self._fd is None:
            self._fd = _open_lock_file(self.path)
        if timeout_s is None:
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            return
        # flock has no timed wait: poll without blocking, briefly at first.
        deadline = time.monotonic() + timeout_s
        pause = 0.01
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError as exc:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StoreHeldError.naming(holder_pids(self.db_path)) from exc
                time.sleep(min(pause, remaining))
                pause = min(pause * 2, 0.2)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @contextlib.contextmanager
    def alone(self) -> Iterator[bool]:
        """Yield True while this process holds the store alone, False when another
        holder has it open (never waits)."""
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(self.exclusive())
            except StoreHeldError:
                yield False
                return
            yield True

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the store alone for the block, or raise :class:`StoreHeldError` at once.

        A holder upgrades its own shared lock (so its own registration does not count as
        "another process"), and returns to shared afterwards.

        Re-entrant: inside the block, ``exclusive()`` on the same object yields at once.
        The explicit repair holds the store alone for its whole run and calls the guarded
        FTS rebuild, which asks again; a second ``flock`` on a new descriptor would
        conflict with our own lock and be refused as if another process held the store,
        and a nested release would hand the store back in the middle of the repair.
        """
        if self._exclusive:
            yield
            return
        own = self._fd is not None
        fd = self._fd if self._fd is not None else _open_lock_file(self.path)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                if own:
                    # flock converts a lock by dropping it first: take the shared one back.
                    fcntl.flock(fd, fcntl.LOCK_SH)
                raise StoreHeldError.naming(holder_pids(self.db_path)) from exc
            self._exclusive = True
            try:
                yield
            finally:
                self._exclusive = False
                fcntl.flock(fd, fcntl.LOCK_SH if own else fcntl.LOCK_UN)
        finally:
            if not own:
                os.close(fd)
