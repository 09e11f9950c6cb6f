"""Where an export may write: never over a database or a file of any store.

``-o ~/.hermes/state.db`` used to replace the live database with JSON Lines and exit 0;
``-o OTHER/state.db-wal`` replaced another store's log (its committed messages lost,
and the doctor then saw a healthy, emptier store), and ``-o
OTHER/sessions/<sid>.pending.jsonl`` a spooled message. :func:`refuse_store_targets`
refuses such targets before anything is read or written.
"""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

from ..engine import DB_NAME
from ..errors import ConfigurationError, UnsafePathError
from ..schema.files import SIDE_SUFFIXES, SQLITE_HEADER
from ..transcript.spool import PENDING_SUFFIX, REJECTED_SUFFIX, SESSIONS_DIR

__all__ = ["refuse_store_targets", "store_file_problem"]

# The folder a store keeps its snapshots in (hermes_repo.maintenance.snapshots.SNAPSHOT_DIR):
# named here, not imported, because the operator tasks build on this package; a test
# of the export pins the two together.
_SNAPSHOT_DIR = "state-snapshots"
_SPOOL_SUFFIXES = (PENDING_SUFFIX, REJECTED_SUFFIX)
# A -wal starts with one of two magic numbers (big-endian); a -shm with the WAL
# version, 3007000, in the machine's byte order.
_WAL_HEADS = tuple(struct.pack(">I", magic) for magic in (0x377F0682, 0x377F0683))
_SHM_HEADS = (struct.pack("<I", 3007000), struct.pack(">I", 3007000))


def store_file_problem(path: Path) -> str | None:
    """Why ``path`` (absolute) is a file of some store, judged by its name and folder."""
    folder = path.parent
    if os.path.lexists(folder / DB_NAME):
        return f"its folder holds a store ({folder / DB_NAME}), whose files only the store writes"
    if folder.name == SESSIONS_DIR and os.path.lexists(folder.parent / DB_NAME):
        return f"it is in the spool folder of the store {folder.parent / DB_NAME}"
    for suffix in SIDE_SUFFIXES:
        base = path.name.removesuffix(suffix)
        if base != path.name and os.path.lexists(folder / base):
            return f"it is the {suffix} file SQLite keeps beside the database {folder / base}"
    for suffix in _SPOOL_SUFFIXES:
        if path.name.endswith(suffix):
            return f"its name ({suffix}) is that of a store's spool file"
    return None


def refuse_store_targets(output: Path, home: Path) -> None:
    """Refuse an export target that is a database or a file of any store.

    ``home`` is the folder of the store being exported. A target is refused
    (:class:`~hermes_repo.errors.UnsafePathError`) by its name and folder (the files
    of a store, of this one or any other, and the journal files of any database) and,
    when it exists, by its first bytes (an SQLite database, a ``-wal``, a ``-shm``).
    Paths are checked as given and after resolving symlinks, so no spelling slips past.
    """
    target = Path(os.path.realpath(output))
    real_home = Path(os.path.realpath(home))
    fix = "choose another file for -o"
    if target.parent == real_home and target.name.startswith(DB_NAME):
        raise UnsafePathError(
            f"{output} is one of the store's own files ({target.name}); the export "
            f"never writes over the store; {fix}"
        )
    for folder in (SESSIONS_DIR, _SNAPSHOT_DIR):
        if target.is_relative_to(os.path.realpath(real_home / folder)):
            raise UnsafePathError(
                f"{output} is inside the store's {folder}/ folder, which only the store "
                f"writes; {fix}"
            )
    for candidate in dict.fromkeys((Path(os.path.abspath(output)), target)):
        problem = store_file_problem(candidate)
        if problem is not None:
            raise UnsafePathError(
                f"{output} may be a file of a store ({problem}); the export refuses to "
                f"write there; {fix}"
            )
    try:
        mode = os.stat(output).st_mode
        if not stat.S_ISREG(mode):
            # A FIFO or a device (`-o /dev/stdout`): reading its header could block, and
            # the rename that completes an export would replace the device's name.
            raise UnsafePathError(
                f"{output} is not a regular file; the export writes a new file and renames "
                f"it into place; leave out -o to write to stdout, or {fix}"
            )
        with open(output, "rb") as existing:
            header = existing.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigurationError(
            f"cannot check the existing {output}: {exc.strerror}; {fix}"
        ) from exc
    if header == SQLITE_HEADER:
        raise UnsafePathError(
            f"{output} is an SQLite database; the export refuses to write JSON over it; {fix}"
        )
    if header[:4] in _WAL_HEADS:
        raise UnsafePathError(
            f"{output} is an SQLite write-ahead log (-wal); it may hold a database's "
            f"committed rows, and the export refuses to write over it; {fix}"
        )
    if header[:4] in _SHM_HEADS:
        raise UnsafePathError(
            f"{output} is an SQLite shared-memory index (-shm); the export refuses to "
            f"write over it; {fix}"
        )
