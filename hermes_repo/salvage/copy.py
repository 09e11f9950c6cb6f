"""The private byte copy of a damaged store, and the clean-up of a killed run's leftovers.

Byte copies are right here, unlike for backups of a live store: the file is damaged, and
SQLite's backup API would have to read it through the very b-trees that are broken. The
copy goes into a private folder (0700, files 0600) and only the copy is ever opened, so
no ``-shm`` or ``-journal`` is created beside the source.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..holders import holders_path, pid_alive
from ..schema.files import free_bytes, side_file
from .report import ProgressCallback, ProgressEvent, SalvageError

__all__ = ["SCRATCH_PREFIX", "ScratchCopy", "make_copy", "remove_stale", "source_path"]

SCRATCH_PREFIX = "hermes-recover-"
"""Name of a private copy's folder: ``hermes-recover-<pid>-<random>``."""


@dataclass
class ScratchCopy:
    """The private folder and the copied files in it."""

    folder: Path
    db: Path
    wal: Path | None
    hot_journal: bool


def source_path(source: Path) -> Path:
    """The damaged ``state.db`` that ``source`` names, or a :class:`SalvageError`."""
    source = Path(source)
    # Operators sometimes point at the WAL they were told about; the store is beside it.
    if source.name.endswith("-wal"):
        source = source.with_name(source.name[: -len("-wal")])
    if not source.exists():
        raise SalvageError(f"{source} does not exist; pass the path of the damaged state.db")
    if not source.is_file():
        raise SalvageError(f"{source} is not a regular file; pass the path of state.db")
    return source


def _owner_pid(name: str, prefix: str) -> int | None:
    digits = name[len(prefix) :].split("-", 1)[0].split(".", 1)[0]
    return int(digits) if digits.isdigit() else None


def remove_stale(folder: Path, pattern: str) -> list[Path]:
    """Remove what a killed salvage left in ``folder``: entries matching ``pattern``
    whose owner pid (in the name) is no longer running and that belong to this user.

    A SIGKILL runs no cleanup; the next run finds the leftovers by their name and
    removes them, never those of a salvage that is still running.
    """
    removed: list[Path] = []
    prefix = pattern.split("*", 1)[0]
    for path in folder.glob(pattern):
        pid = _owner_pid(path.name, prefix)
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        if pid is None or pid == os.getpid() or pid_alive(pid) or st.st_uid != os.getuid():
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        removed.append(path)
    return removed


@contextlib.contextmanager
def _held_against_opens(source: Path) -> Iterator[bool]:
    """Keep library processes from opening the source while it is copied.

    Yields False when another process has the store open: the copy may then catch a
    transaction half-written. The holders file is used only if it already exists, so
    nothing is ever created beside the source.
    """
    path = holders_path(source)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        yield True
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def make_copy(
    source: Path,
    workdir: Path | None,
    progress: ProgressCallback | None,
    notes: list[str],
    *,
    reserve: float = 0.0,
) -> ScratchCopy:
    """Byte copies of the source's files in a new private folder under ``workdir``.

    ``reserve`` (a multiple of the source's size) is room wanted on top of the copy,
    for an output written to the same place.
    """
    wal_src = side_file(source, "-wal")
    journal_src = side_file(source, "-journal")
    parts = [(source, "state.db")]
    if wal_src.is_file():
        parts.append((wal_src, "state.db-wal"))
    if journal_src.is_file() and journal_src.stat().st_size > 0:
        # A hot rollback journal: the main file holds a half-written transaction that
        # SQLite rolls back (in the copy) before reading.
        parts.append((journal_src, "state.db-journal"))
    need = sum(p.stat().st_size for p, _ in parts)
    base = workdir if workdir is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    free = free_bytes(base)
    if free < need * (1.1 + reserve) + (16 << 20):
        raise SalvageError(
            f"not enough free space in {base} for a private copy of the source "
            f"({need / 1e6:.1f} MB needed, {free / 1e6:.1f} MB free); "
            "free some space or choose another working folder"
        )
    remove_stale(base, f"{SCRATCH_PREFIX}*")
    folder = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=base))
    done = 0
    try:
        with _held_against_opens(source) as alone:
            if not alone:
                notes.append(
                    "another process has the source store open; the copy may hold a "
                    "half-written transaction: stop it and run the command again"
                )
            for src, name in parts:
                # 0600: the copy holds every conversation of the store.
                fd = os.open(folder / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
                with open(src, "rb") as fin, open(fd, "wb") as fout:
                    while chunk := fin.read(1 << 20):
                        fout.write(chunk)
                        done += len(chunk)
                        if progress is not None:
                            progress(ProgressEvent("copy", done, need))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    wal = folder / "state.db-wal"
    return ScratchCopy(
        folder,
        folder / "state.db",
        wal if wal.exists() else None,
        hot_journal=(folder / "state.db-journal").exists(),
    )
