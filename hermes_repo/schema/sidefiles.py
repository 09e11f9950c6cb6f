"""Files the store keeps beside ``state.db``: opened 0600, never through a symlink.

The store's folder is shared with whatever else runs as the same user (or, for a
folder made by hand, other users). A symlink planted at the name of a lock file or of
the rebuild ledger's temporary file would otherwise make the store truncate or
overwrite the link's target. Every side file is therefore opened relative to a
descriptor of its folder with ``O_NOFOLLOW``, created 0600, and checked to be a
regular file; anything else is an :class:`~hermes_repo.errors.UnsafePathError` that
names the file and the fix, never a raw ``OSError``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

from ..errors import ConfigurationError, UnsafePathError

__all__ = ["exclusive_lock", "open_side_file", "replace_side_file", "side_file_error"]

_NOT_A_FILE = {errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR, errno.EACCES, errno.EPERM}


def side_file_error(path: Path, exc: OSError | None = None, *, what: str = "") -> Exception:
    """The library error for side file ``path`` that cannot be used as it is."""
    if exc is not None and exc.errno not in _NOT_A_FILE:
        return ConfigurationError(
            f"cannot open {path}: {exc.strerror or exc}; check the folder's permissions "
            "and free space, then retry"
        )
    if not what:
        if exc is not None and exc.errno == errno.ELOOP:
            what = "a symlink"
        elif exc is not None and exc.errno in (errno.EACCES, errno.EPERM):
            what = "not readable and writable by this process"
        else:
            what = "not a regular file"
    return UnsafePathError(
        f"{path} is {what}; the store creates this file itself (0600) and refuses to "
        "use anything else in its place. Remove it (the store makes a new one) and retry"
    )


@contextlib.contextmanager
def _folder(path: Path) -> Iterator[int]:
    try:
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise side_file_error(path, exc) from exc
    try:
        yield fd
    finally:
        os.close(fd)


def open_side_file(path: Path, flags: int = os.O_RDWR, *, create: bool = True) -> int:
    """A descriptor of side file ``path``, created 0600 if missing (with ``create``).

    Raises :class:`FileNotFoundError` only when ``create`` is False and the file is
    missing; a symlink, a folder, a FIFO... raise :class:`UnsafePathError`.
    """
    extra = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_CREAT if create else 0)
    with _folder(path) as dir_fd:
        try:
            fd = os.open(path.name, flags | extra, 0o600, dir_fd=dir_fd)
        except FileNotFoundError:
            if create:
                raise side_file_error(path, what="in a folder that does not exist") from None
            raise
        except OSError as exc:
            raise side_file_error(path, exc) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise side_file_error(path)
        if st.st_mode & 0o077:
            # Made by someone else, or by an older version: private like every side file.
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def replace_side_file(path: Path, data: bytes, *, tmp: Path | None = None) -> None:
    """Write ``data`` to ``path`` atomically: a 0600 temporary file beside it (``tmp``,
    default ``<path>.tmp``), fsynced, renamed over it (a rename replaces a symlink at
    ``path``; it never follows one)."""
    tmp = tmp if tmp is not None else path.with_name(path.name + ".tmp")
    fd = open_side_file(tmp, os.O_WRONLY | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    with _folder(path) as dir_fd:
        os.replace(tmp.name, path.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)


def flock_within(fd: int, timeout: float, *, poll_s: float = 0.02) -> bool:
    """Take an exclusive ``flock`` on ``fd``; False if another holder kept it ``timeout``
    seconds (0: do not wait; < 0: wait as long as it takes)."""
    if timeout < 0:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return True
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)


@contextlib.contextmanager
def exclusive_lock(path: Path, *, timeout: float = -1) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on side file ``path`` for the block.

    Yields True once held; with ``timeout`` >= 0 yields False if another holder kept
    it that long (0: do not wait). The lock dies with its process; the file stays (a
    waiter must lock the same inode).
    """
    fd = open_side_file(path)
    try:
        if not flock_within(fd, timeout):
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
