"""Reading a Hermes ``state.db`` without ever writing to it: the file checked whole, opened
read-only and immutable (or a private copy read when a ``-wal`` holds committed frames or
a hot ``-journal`` an uncommitted transaction), and its tables' columns found by name."""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..engine import sqlite_uri
from ..errors import ImportSourceError
from ..schema.files import SQLITE_HEADER, side_file

__all__ = ["SQLITE_HEADER", "is_sqlite_file"]


def is_sqlite_file(path: Path) -> bool:
    """True when ``path`` starts with SQLite's 16-byte header."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def _check_file(path: Path) -> None:
    """Refuse what is not a whole SQLite file, before SQLite is asked anything."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            header = fh.read(100)
    except FileNotFoundError as exc:
        raise ImportSourceError(
            f"{path} does not exist; pass the state.db of a Hermes home (e.g. ~/.hermes/state.db)"
        ) from exc
    except OSError as exc:
        raise ImportSourceError(
            f"cannot read {path}: {exc.strerror}; check that it is a readable file"
        ) from exc
    if header[:16] != SQLITE_HEADER:
        found = "an empty file" if size == 0 else f"a file starting with {header[:16]!r}"
        raise ImportSourceError(
            f"{path} is not an SQLite database (found {found}); pass a Hermes Agent "
            "state.db, or use --format jsonl for a JSON Lines file"
        )
    if len(header) < 100:
        raise ImportSourceError(
            f"{path} is truncated: {size} bytes, shorter than SQLite's 100-byte header; "
            "copy the state.db again (with Hermes stopped) or restore it from a backup"
        )
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    # The in-header size is valid only when the change counter matches "version-valid-for".
    if header[24:28] == header[92:96] and pages and size < pages * page_size:
        raise ImportSourceError(
            f"{path} is truncated: its header declares {pages} pages of {page_size} bytes "
            f"({pages * page_size} bytes) but the file has {size}; copy the state.db again "
            "(with Hermes stopped) or restore it from a backup"
        )


def _stamp(path: Path, side: Path) -> tuple[int, int, int, int, bytes]:
    """What changes when Hermes writes: the file's mtime and size, the side file's
    (``-wal`` or ``-journal``) mtime, size and header (a WAL's salts change when it
    restarts after a checkpoint)."""
    st = path.stat()
    side_st = side.stat()
    with open(side, "rb") as fh:
        return st.st_mtime_ns, st.st_size, side_st.st_mtime_ns, side_st.st_size, fh.read(32)


def _private_copy(path: Path, side: Path, folder: Path) -> Path | None:
    """``path`` and its ``-wal`` or ``-journal`` (``side``) copied byte for byte into
    ``folder``, taken when the source did not change during the copy; None when the
    side file went away (the source is then whole) or it kept changing (a busy Hermes:
    the backup API takes over).

    The copy is opened normally, so SQLite itself does what it would do with the
    source: replays the WAL's committed frames, or rolls back the hot journal a Hermes
    killed mid-commit left (on network and FUSE filesystems Hermes falls back to
    ``journal_mode=DELETE``), so a row SQLite never committed is never read. Only
    reading the source's files: opening it through SQLite, even read-only, would
    rewrite the ``-shm`` of a Hermes that stopped without a checkpoint, or roll back
    its journal in place. A WAL frame Hermes was appending while the -wal was copied
    fails its checksum and is dropped by the copy's WAL recovery, so the copy holds the
    last whole commit. The journal is copied after the file: a page Hermes changed in
    the file has its original in the journal first.
    """
    copy = folder / "state.db"
    suffix = side.name[len(path.name) :]
    for _ in range(5):
        try:
            before = _stamp(path, side)
            shutil.copyfile(path, copy)
            shutil.copyfile(side, folder / f"state.db{suffix}")
            if _stamp(path, side) == before:
                return copy
        except FileNotFoundError:
            if not side.exists():
                (folder / f"state.db{suffix}").unlink(missing_ok=True)
                return None
    return _backup_copy(path, copy)


def _backup_copy(path: Path, copy: Path) -> Path:
    """A consistent copy through SQLite's backup API (one read transaction)."""
    for name in ("state.db", "state.db-wal", "state.db-journal"):
        (copy.parent / name).unlink(missing_ok=True)
    try:
        src = sqlite3.connect(sqlite_uri(path, "ro"), uri=True)
        try:
            dst = sqlite3.connect(copy)
            try:
                src.backup(dst)
            finally:
                dst.close()
        finally:
            src.close()
    except sqlite3.Error as exc:
        raise _unreadable(path, exc) from exc
    return copy


@contextmanager
def _open_source(path: Path) -> Iterator[sqlite3.Connection]:
    _check_file(path)
    wal = side_file(path, "-wal")
    journal = side_file(path, "-journal")
    with tempfile.TemporaryDirectory(prefix="hermes-import-") as tmp:
        # immutable=1 would ignore the WAL's committed frames, and read the pages of a
        # transaction a hot journal says to roll back: read a private copy instead.
        copy = None
        if wal.exists():
            copy = _private_copy(path, wal, Path(tmp))
        elif _size(journal):  # an empty (truncated) journal is never hot
            copy = _private_copy(path, journal, Path(tmp))
        # The copy is ours: opened normally, SQLite merges its WAL into what it reads.
        uri = sqlite_uri(path, "ro") + "&immutable=1" if copy is None else sqlite_uri(copy, "rw")
        try:
            conn = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as exc:
            raise _unreadable(path, exc) from exc
        try:
            yield conn
        finally:
            conn.close()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unreadable(path: Path, exc: sqlite3.Error) -> ImportSourceError:
    return ImportSourceError(
        f"cannot read {path}: SQLite says {exc}; the file is damaged or truncated: copy "
        "the state.db again (with Hermes stopped) or restore it from a backup"
    )


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f'PRAGMA table_info("{_quote(table)}")')]


def _quote(name: str) -> str:
    return name.replace('"', '""')


def _shape(conn: sqlite3.Connection, path: Path) -> dict[str, list[str]]:
    """Every plain table's columns; refuses a file that is not a Hermes store."""
    rows = conn.execute("SELECT name, type, sql FROM sqlite_master").fetchall()
    virtual = [str(n) for n, t, sql in rows if t == "table" and "VIRTUAL" in str(sql).upper()]
    tables = {}
    for name, kind, _sql in rows:
        name = str(name)
        if kind != "table" or name in virtual or name.startswith("sqlite_stat"):
            continue
        if any(name.startswith(v + "_") for v in virtual):  # an FTS shadow table
            continue
        tables[name] = _columns(conn, name)
    need = {"sessions": {"id", "started_at"}, "messages": {"id", "session_id", "role"}}
    for table, cols in need.items():
        if not cols <= set(tables.get(table, ())):
            found = ", ".join(sorted(tables)) or "no tables"
            missing = ", ".join(sorted(cols - set(tables.get(table, ()))))
            raise ImportSourceError(
                f"{path} is an SQLite database but not a Hermes Agent store: table "
                f"{table} {'lacks ' + missing if table in tables else 'is missing'} "
                f"(found: {found}); pass the state.db of a Hermes home"
            )
    return tables
