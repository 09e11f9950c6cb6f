"""Safe spool file access: locking, durable appends, reads and deletes.

A spool file is only ever appended to, then fsynced with its folder, and deleted by
replay after the records are committed (see :mod:`hermes_repo.transcript.replay`).

Safety: the session id is validated before it becomes a file name; ``sessions/`` is
created 0700 and opened with ``O_NOFOLLOW | O_DIRECTORY``; files are opened relative to
that folder's descriptor with ``O_NOFOLLOW`` (``O_APPEND`` for writing) and created
0600, so no symlink, in place of the folder or of a file, can redirect a write
(:class:`~hermes_repo.errors.UnsafePathError`). Every reader and writer of one spool
file holds its lock file (``<file>.lock``, an ``flock`` that dies with its
process), so the replay never reads a line a live writer is still appending, and never
deletes a file under one. A symlink, folder or unreadable file at any of these names
is an :class:`~hermes_repo.errors.UnsafePathError` naming it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ...errors import UnsafePathError
from ...schema.sidefiles import flock_within
from .names import PENDING_SUFFIX, pending_name, sessions_dir
from .records import SpoolContents, SpoolOwner, encode_record, parse_spool, wrap

LOCK_SUFFIX = ".lock"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _unsafe(path: Path, what: str) -> UnsafePathError:
    return UnsafePathError(
        f"{path} is {what}; hermes_repo refuses to read or write spool files through it. "
        "Move it away (spool files must be regular files in a real sessions/ folder)"
    )


@contextlib.contextmanager
def _open_dir(home: str | os.PathLike[str], *, create: bool) -> Iterator[int | None]:
    """A descriptor of ``<home>/sessions`` (None if missing and not ``create``)."""
    folder = sessions_dir(home)
    if create:
        Path(home).mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except FileNotFoundError:
        if create:
            raise
        yield None
        return
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _unsafe(folder, "a symlink or not a folder") from exc
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _check_regular(fd: int, path: Path) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _unsafe(path, "not a regular file")
    return st


def _open_in(dir_fd: int, name: str, flags: int, path: Path) -> int:
    try:
        return os.open(name, flags, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unsafe(path, "a symlink") from exc
        if exc.errno in (errno.EISDIR, errno.ENXIO):
            raise _unsafe(path, "not a regular file") from exc
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise _unsafe(path, "not readable and writable by this process") from exc
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


@contextlib.contextmanager
def spool_lock(home: str | os.PathLike[str], name: str, *, timeout: float = -1) -> Iterator[None]:
    """Hold the lock of spool file ``name`` (waits; ``timeout`` < 0 waits forever).

    The lock is a ``flock`` on ``<name>.lock``, opened 0600 through the folder's
    descriptor with ``O_NOFOLLOW`` and locked on that very descriptor, so a symlink
    planted at the lock's name is refused, never followed (between a check and a
    second open by name, it could be). The file is left in place on release: waiters
    must lock the same inode. Raises :class:`TimeoutError` when ``timeout`` runs out.
    """
    lock_name = name + LOCK_SUFFIX
    path = sessions_dir(home) / lock_name
    with _open_dir(home, create=True) as dir_fd:
        assert dir_fd is not None
        fd = _open_in(dir_fd, lock_name, _LOCK_FLAGS, path)
    try:
        _check_regular(fd, path)
        if not flock_within(fd, timeout):
            raise TimeoutError(f"{path} is held by another process; retry when it is done")
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def append_lines(home: str | os.PathLike[str], name: str, lines: Sequence[bytes]) -> Path:
    """Append complete lines to ``sessions/<name>`` durably; the caller holds its lock.

    If the file ends without a newline (a torn append by a crashed process), a newline
    is written first so the new records never fuse with the torn one. The data goes out
    in one buffer, then the file and the folder are fsynced (the folder so the directory
    entry of a new file survives a power loss too).
    """
    path = sessions_dir(home) / name
    data = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
    with _open_dir(home, create=True) as dir_fd:
        assert dir_fd is not None
        fd = _open_in(dir_fd, name, _APPEND_FLAGS, path)
        try:
            st = _check_regular(fd, path)
            if st.st_mode & 0o077:
                os.fchmod(fd, 0o600)  # transcripts are private, whoever made the file
            if st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) != b"\n":
                data = b"\n" + data
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(dir_fd)
    return path


def append_messages(
    home: str | os.PathLike[str],
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    suffix: str = PENDING_SUFFIX,
    at: float | None = None,
    source: str | None = None,
    owner: SpoolOwner | None = None,
) -> Path:
    """Wrap ``messages`` and append them to the session's spool file, under its lock
    (``source``: the session's, recorded so a replay that creates it gives it that;
    ``owner``: the store the records belong to, the only one that replays them)."""
    name = pending_name(session_id, suffix)
    when = time.time() if at is None else at
    # Encode before taking the lock or touching the file: a message that cannot be
    # encoded must fail the call without leaving half a batch on disk.
    lines = [encode_record(wrap(m, when, session_id, source, owner)) for m in messages]
    with spool_lock(home, name):
        return append_lines(home, name, lines)


def read_spool(
    home: str | os.PathLike[str], name: str, *, session_id: str | None = None
) -> SpoolContents | None:
    """Read and parse ``sessions/<name>`` (None if it does not exist); hold its lock.

    With ``session_id``, records naming another session come back as rejected lines
    (see :func:`parse_spool`).
    """
    path = sessions_dir(home) / name
    with _open_dir(home, create=False) as dir_fd:
        if dir_fd is None:
            return None
        try:
            fd = _open_in(dir_fd, name, _READ_FLAGS, path)
        except FileNotFoundError:
            return None
        try:
            st = _check_regular(fd, path)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
    return parse_spool(b"".join(chunks), size=st.st_size, mtime=st.st_mtime, session_id=session_id)


def remove_file(home: str | os.PathLike[str], name: str) -> bool:
    """Delete ``sessions/<name>`` and fsync the folder; False if it was already gone."""
    with _open_dir(home, create=False) as dir_fd:
        if dir_fd is None:
            return False
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return False
        os.fsync(dir_fd)
    return True


_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def keep_only(home: str | os.PathLike[str], name: str, lines: Sequence[bytes]) -> None:
    """Replace ``sessions/<name>`` by ``lines`` (each kept byte for byte), atomically;
    the caller holds its lock. No lines: the file is deleted.

    Used after a replay committed the records of a file that belong to this store,
    when the file also holds records of another store (they stay for that one). The
    new content goes to ``<name>.tmp``, is fsynced, then renamed over the file and the
    folder fsynced: a crash leaves either the old file (its committed records are
    found stored by uid at the next replay) or the new one, never half of either.
    """
    if not lines:
        remove_file(home, name)
        return
    path = sessions_dir(home) / name
    tmp = name + ".tmp"
    data = b"".join(line + b"\n" for line in lines)
    with _open_dir(home, create=False) as dir_fd:
        if dir_fd is None:
            return
        fd = _open_in(dir_fd, tmp, _TMP_FLAGS, path.with_name(tmp))
        try:
            _check_regular(fd, path.with_name(tmp))
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        os.fsync(dir_fd)
