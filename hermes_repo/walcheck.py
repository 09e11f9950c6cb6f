"""A ``-wal`` whose header is damaged is saved before SQLite discards it.

SQLite trusts the 32-byte WAL header: when its magic number, version or checksum is
wrong, the next connection treats the log as empty, resets it, and the last close
deletes it, committed frames and all, without a word. The frames themselves usually
survive such damage (a zeroed first block, a torn header write), and every committed
message in them is lost with the file.

:func:`preserve_damaged_wal` runs before any open of a store (``StateStore.open``,
``doctor``, ``sessions repair``, ``snapshot create``): a ``-wal`` large enough to hold a
frame whose header is invalid is copied aside, together with the database file, as one
set: ``state.db.damaged-wal-<UTC time>`` and ``state.db.damaged-wal-<UTC time>-wal``
(0600). ``sessions salvage --source`` reads that set like any damaged store (its page
scanner reads frames whose header is lost, with the page size of the database). The
event is logged at CRITICAL with that command, listed in ``health().notes`` and found
by the doctor. A set already saved for the same bytes is not copied again.

The same check sets aside an **orphaned** ``-wal`` (:func:`set_aside_orphaned_wal`):
when ``state.db`` is missing or empty (0 bytes) but a non-empty ``-wal`` sits at its
name, the database was moved away or removed while a process wrote to it, and the
``-wal`` holds its last committed writes. SQLite deletes a ``-wal`` beside an empty
database at the next open, so it is renamed aside first, with its ``-shm``, as
``state.db.orphaned-wal-<UTC time>-wal`` (0600): put the moved database at
``state.db.orphaned-wal-<UTC time>`` and the two read as one again. Logged at CRITICAL,
listed in ``health().notes`` and found by the doctor; the new store is then created as
usual.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shlex
import shutil
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from .deprecation import warn_renamed
from .engine import check_journal_files
from .errors import StoreFileReplacedError, WalSaveError
from .holders import lock_pids
from .homes import read_head
from .schema.files import free_bytes, fsync_dir, recovered_path, side_file

__all__ = [
    "ORPHAN_MARK",
    "SAVED_MARK",
    "WAL_MAGICS",
    "WAL_VERSION",
    "DamagedWal",
    "OrphanedWal",
    "WalSaveError",
    "notes",
    "orphaned_sets",
    "preserve_damaged_wal",
    "recovered_path",
    "refuse_removed_wal",
    "saved_sets",
    "set_aside_orphaned_wal",
    "wal_header_problem",
]

log = logging.getLogger("hermes_repo.walcheck")

WAL_MAGICS = (0x377F0682, 0x377F0683)  # low bit set: checksums use big-endian words
WAL_VERSION = 3007000
SAVED_MARK = ".damaged-wal-"
"""Part of a saved set's name: ``state.db.damaged-wal-<UTC time>[-wal]``."""
ORPHAN_MARK = ".orphaned-wal-"
"""Part of a set-aside orphan's name: ``state.db.orphaned-wal-<UTC time>-wal``."""
_HEADER = 32
_FRAME_HEADER = 24
_MIN_PAGE = 512


# Saved sets of this process, by store: health() reports them.
_saved: dict[Path, list[DamagedWal]] = {}


@dataclass(frozen=True)
class DamagedWal:
    """A ``-wal`` with an invalid header, and where its set was saved."""

    wal: Path
    reason: str
    size: int
    saved_db: Path | None
    """The saved copy of the database (None: no room for it; only the -wal was saved)."""
    saved_wal: Path

    def salvage_command(self) -> str:
        """The salvage command that reads the saved set."""
        source = self.saved_db if self.saved_db is not None else self.wal.with_name("state.db")
        out = shlex.quote(str(recovered_path(self.wal.with_name("state.db"))))
        home = shlex.quote(str(self.wal.parent))
        src = shlex.quote(str(source))
        # Two commands; the caller wraps the whole in one pair of backticks.
        return (
            f"hermes-repo --home {home} sessions salvage --source {src} --inspect-only`"
            f", then `hermes-repo --home {home} sessions salvage --source {src} --output {out}"
        )

    def recover_command(self) -> str:
        """Deprecated name of :meth:`salvage_command`."""
        warn_renamed("DamagedWal.recover_command()", "DamagedWal.salvage_command()")
        return self.salvage_command()

    def message(self) -> str:
        """One line for logs and health notes: the cause and the next step."""
        return (
            f"{self.wal} ({self.size} bytes) has a damaged header ({self.reason}): SQLite "
            f"would discard its committed frames on the next open. It was saved as "
            f"{self.saved_wal}"
            + (f" with the database as {self.saved_db}" if self.saved_db is not None else "")
            + f"; salvage its rows with `{self.salvage_command()}`"
        )


def _checksum(data: bytes, big_endian: bool) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    s0 = s1 = 0
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & 0xFFFFFFFF
        s1 = (s1 + words[i + 1] + s0) & 0xFFFFFFFF
    return s0, s1


def wal_header_problem(wal: Path) -> str | None:
    """Why the header of ``wal`` is invalid, or None (valid, absent, or too small to
    hold a frame: then nothing can be lost)."""
    try:
        with open(wal, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < _HEADER + _FRAME_HEADER + _MIN_PAGE:
                return None
            head = f.read(_HEADER)
    except FileNotFoundError:
        return None
    magic, version, page_size, _ckpt, _s1, _s2, c0, c1 = struct.unpack(">8I", head)
    if magic not in WAL_MAGICS:
        return f"bad magic number 0x{magic:08x}"
    if version != WAL_VERSION:
        return f"bad version {version}"
    if not (_MIN_PAGE <= page_size <= 65536 and page_size & (page_size - 1) == 0):
        return f"bad page size {page_size}"
    if _checksum(head[:24], bool(magic & 1)) != (c0, c1):
        return "bad header checksum"
    return None


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def saved_sets(db_path: Path) -> list[Path]:
    """The saved ``-wal`` copies beside ``db_path``, oldest first."""
    return sorted(db_path.parent.glob(f"{db_path.name}{SAVED_MARK}*-wal"))


def _copy(src: Path, dest: Path) -> None:
    fd = os.open(dest, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    try:
        with open(src, "rb") as fin, open(fd, "wb", closefd=False) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
            fout.flush()
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        dest.unlink(missing_ok=True)
        raise
    os.close(fd)


def preserve_damaged_wal(db_path: Path) -> DamagedWal | None:
    """Save a ``-wal`` with an invalid header (and the database) before any open.

    An orphaned ``-wal`` (the database missing or empty) is set aside first
    (:func:`set_aside_orphaned_wal`). Returns what was found (also when the same bytes
    were saved before), or None when the ``-wal`` is absent, valid, or holds no frame.
    Logs at CRITICAL. The database copy is skipped when there is no room for it; when
    even the ``-wal`` cannot be saved, :class:`WalSaveError` stops the open (it would
    let SQLite discard the log).
    """
    check_journal_files(db_path)  # never read (or copy) through a planted link
    refuse_removed_wal(db_path)
    set_aside_orphaned_wal(db_path)
    wal = side_file(db_path, "-wal")
    try:
        reason = wal_header_problem(wal)
    except OSError as exc:
        raise WalSaveError(
            f"{wal} cannot be read ({exc}); fix its permissions and retry (the store is "
            "not opened: SQLite might discard a -wal it cannot read correctly)"
        ) from exc
    if reason is None:
        return None
    try:
        return _preserve(db_path, wal, reason)
    except OSError as exc:
        raise WalSaveError(
            f"{wal} has a damaged header ({reason}) and could not be saved ({exc}); the "
            "store was not opened, so SQLite cannot discard its committed frames. Free "
            "space beside the store (or fix permissions) and retry, or salvage it now with "
            f"`hermes-repo --home {shlex.quote(str(db_path.parent))} sessions salvage "
            f"--source {shlex.quote(str(db_path))} --inspect-only`"
        ) from exc


def _preserve(db_path: Path, wal: Path, reason: str) -> DamagedWal:
    size = wal.stat().st_size
    digest = _digest(wal)
    for saved in saved_sets(db_path):
        with contextlib.suppress(OSError):
            if saved.stat().st_size == size and _digest(saved) == digest:
                base = saved.with_name(saved.name[: -len("-wal")])
                found = DamagedWal(wal, reason, size, base if base.exists() else None, saved)
                return _report(db_path, found)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = db_path.with_name(f"{db_path.name}{SAVED_MARK}{stamp}")
    n = 0
    while base.exists() or side_file(base, "-wal").exists():
        n += 1
        base = db_path.with_name(f"{db_path.name}{SAVED_MARK}{stamp}-{n:02d}")
    saved_wal = side_file(base, "-wal")
    _copy(wal, saved_wal)
    saved_db: Path | None = base
    try:
        if free_bytes(db_path.parent) < db_path.stat().st_size * 1.1 + (16 << 20):
            raise OSError("not enough free space for a copy of the database")
        _copy(db_path, base)
    except OSError as exc:
        log.error("the database beside the damaged -wal was not copied: %s", exc)
        saved_db = None
    return _report(db_path, DamagedWal(wal, reason, size, saved_db, saved_wal))


def _report(db_path: Path, found: DamagedWal) -> DamagedWal:
    known = _saved.setdefault(db_path.absolute(), [])
    if found not in known:
        known.append(found)
    log.critical("%s", found.message())
    return found


def notes(db_path: Path) -> list[str]:
    """Health notes: the damaged ``-wal`` files this process saved for ``db_path``, and
    the orphaned ones it set aside."""
    key = db_path.absolute()
    return [d.message() for d in _saved.get(key, [])] + [o.message() for o in _orphans.get(key, [])]


# -- orphaned -wal -----------------------------------------------------------------------

_orphans: dict[Path, list[OrphanedWal]] = {}


@dataclass(frozen=True)
class OrphanedWal:
    """A non-empty ``-wal`` found beside a missing or empty database, and where it went."""

    wal: Path
    size: int
    database: str
    """What was at the database's name: "missing" or "empty"."""
    saved_wal: Path
    saved_shm: Path | None

    @property
    def base(self) -> Path:
        """Where the moved database goes so that it and :attr:`saved_wal` read as one."""
        return self.saved_wal.with_name(self.saved_wal.name[: -len("-wal")])

    def message(self) -> str:
        """One line for logs and health notes: what happened and what to do."""
        db = self.wal.with_name(self.wal.name[: -len("-wal")])
        home = shlex.quote(str(self.wal.parent))
        base = shlex.quote(str(self.base))
        shm = f" (with its -shm as {self.saved_shm})" if self.saved_shm is not None else ""
        return (
            f"{db} was {self.database} but {self.wal} ({self.size} bytes) held committed "
            "writes of a database moved away or removed while it was open; SQLite would "
            f"have discarded them at this open, so the -wal was set aside as "
            f"{self.saved_wal}{shm} and a new store is used at {db}. The two belong "
            f"together: put the moved database at {base} (e.g. `mv MOVED.db {base}`), "
            f"check the pair with `hermes-repo --home {home} sessions salvage --source "
            f"{base} --inspect-only`, salvage it with `hermes-repo --home {home} sessions "
            f"salvage --source {base} --output NEW.db` and install it with "
            f"`hermes-repo --home {home} db replace NEW.db`"
        )


def orphaned_sets(db_path: Path) -> list[Path]:
    """The orphaned ``-wal`` files set aside beside ``db_path``, oldest first."""
    return sorted(db_path.parent.glob(f"{db_path.name}{ORPHAN_MARK}*-wal"))


def _size(path: Path) -> int | None:
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return None


def set_aside_orphaned_wal(db_path: Path) -> OrphanedWal | None:
    """Rename a non-empty ``-wal`` (and its ``-shm``) aside when the database at
    ``db_path`` is missing or empty; see the module docstring. None: nothing orphaned.

    A store being created never looks like this: the switch to WAL writes the
    database's first page before the ``-wal`` exists. The database is looked at again
    after the ``-wal``, so a store another process created meanwhile is never mistaken
    for a missing one. Raises :class:`WalSaveError` when the rename fails (the open
    must not go on: SQLite would delete the ``-wal``).
    """
    wal = side_file(db_path, "-wal")
    if (_size(db_path) or 0) > 0:
        return None
    size = _size(wal)
    if not size:
        return None
    before = _size(db_path)
    if (before or 0) > 0:
        return None  # another process built the store between the two looks
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = db_path.with_name(f"{db_path.name}{ORPHAN_MARK}{stamp}")
    n = 0
    while any(os.path.lexists(p) for p in (base, side_file(base, "-wal"), side_file(base, "-shm"))):
        n += 1
        base = db_path.with_name(f"{db_path.name}{ORPHAN_MARK}{stamp}-{n:02d}")
    saved_wal = side_file(base, "-wal")
    try:
        os.rename(wal, saved_wal)
    except FileNotFoundError:
        return None  # another process set it aside first
    except OSError as exc:
        raise WalSaveError(
            f"{wal} ({size} bytes) holds committed writes of a database that is "
            f"{'missing' if before is None else 'empty'} at {db_path}, and could not be "
            f"set aside ({exc}); the store was not opened, so SQLite cannot discard it. "
            "Fix the folder's permissions and retry"
        ) from exc
    saved_shm: Path | None = side_file(base, "-shm")
    try:
        os.rename(side_file(db_path, "-shm"), side_file(base, "-shm"))
    except OSError:
        saved_shm = None  # an index only: SQLite rebuilds it from the -wal
    for path in (saved_wal, saved_shm):
        if path is not None:
            with contextlib.suppress(OSError):
                os.chmod(path, 0o600, follow_symlinks=False)
    with contextlib.suppress(OSError):
        fsync_dir(db_path.parent)
    found = OrphanedWal(wal, size, "missing" if before is None else "empty", saved_wal, saved_shm)
    _orphans.setdefault(db_path.absolute(), []).append(found)
    log.critical("%s", found.message())
    return found


# -- a -wal removed under live processes -------------------------------------------------


def refuse_removed_wal(db_path: Path) -> None:
    """Refuse to open a WAL store whose ``-wal`` was removed under processes that still
    have it open (:class:`StoreFileReplacedError`, naming them).

    Their ``-shm`` index describes frames in the file they hold; a connection made now
    would create a new, empty ``-wal``, fail to read ("disk I/O error") and keep those
    processes from ever checkpointing their writes into the database (a clean close of
    theirs does it while no other file has the name). Without live holders a stale
    ``-shm`` is harmless: SQLite rebuilds it.
    """
    wal, shm = side_file(db_path, "-wal"), side_file(db_path, "-shm")
    if os.path.lexists(wal):
        return
    try:
        if os.stat(shm).st_size == 0:
            return
        head = read_head(db_path, 20)  # never a descriptor closed under our locks
    except OSError:
        return
    if len(head) < 20 or head[18] != 2 or head[19] != 2:
        return  # not a WAL database
    pids = lock_pids([db_path, shm], kinds=("POSIX", "OFDLCK"))
    if not pids:
        return
    who = ", ".join(str(p) for p in pids)
    raise StoreFileReplacedError(
        f"{wal} is missing while other processes (pid {who}) have the store open: it was "
        "removed under them, and their writes since the last checkpoint are only in the "
        "file they still hold. The store is not opened here (a new -wal would keep those "
        "writes from ever reaching the database). Stop those processes cleanly (a clean "
        f"stop copies the writes into {db_path.name}; a kill loses them), then run "
        f"`hermes-repo --home {shlex.quote(str(db_path.parent))} doctor`"
    )
