"""Where the store lives, and the one file it must never take for its own.

Hermes Agent keeps *its* store at ``$HERMES_HOME/state.db`` (default ``~/.hermes``). Our
store is a ``state.db`` too, so the two cannot share a folder: the default home of
hermes_repo is a folder of its own inside Hermes' home, ``$HERMES_HOME/hermes-repo``
(else ``~/.hermes/hermes-repo``). Hermes' folder then gains that one subfolder and none of
its files is touched: no holders file, ``-wal``, ``-shm`` or snapshots folder beside
Hermes' file.

Two rules keep older setups working and Hermes' file safe:

* a store of ours made before this rule at ``$HERMES_HOME/state.db`` (recognised by its
  ``alembic_version`` table or its ``state_meta.store_id``) stays the default home
  while ``hermes-repo/`` holds no store;
* a Hermes Agent file wherever a store path resolves (the default or an explicit
  ``--home``) is refused before anything opens it, with the import command to run.

A file is recognised by reading its table names through a read-only, immutable SQLite
open: it takes no lock and creates no file beside the one it reads.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sqlite3
import stat
import tempfile
import threading
import weakref
from collections import Counter
from pathlib import Path
from typing import Any, Literal

from .errors import HermesAgentFileError

__all__ = [
    "DB_NAME",
    "STORE_FOLDER",
    "check_not_hermes_file",
    "default_home",
    "hermes_home",
    "in_use",
    "note_in_use",
    "read_head",
    "store_kind",
]

DB_NAME = "state.db"
STORE_FOLDER = "hermes-repo"
"""The folder of our store inside Hermes' home (the default home)."""

StoreKind = Literal["none", "ours", "hermes", "unknown"]
_HEADER = b"SQLite format 3\x00"


# The store files this process has SQLite connections on (an engine of ours, the doctor's
# connection), by real path. Reading such a file to classify it would be unsafe: closing
# any descriptor of a file drops every POSIX lock the process holds on it, the locks of
# SQLite's own connections included (SQLite's "how to corrupt", 2.2). Such a file is ours
# anyway: nothing of ours opens Hermes' file as a store.
_IN_USE: Counter[str] = Counter()
_IN_USE_LOCK = threading.Lock()


def _file_key(db_path: Path) -> str:
    return os.path.realpath(db_path)  # opens no descriptor


def note_in_use(db_path: Path, owner: Any) -> None:
    """Record that ``owner`` (an engine: anything that takes a weak reference) may hold
    SQLite connections on ``db_path`` until it is garbage collected."""
    key = _file_key(db_path)
    with _IN_USE_LOCK:
        _IN_USE[key] += 1
    weakref.finalize(owner, _released, key)


# Descriptors :func:`read_head` opened on a file in use, kept open until nothing of ours
# uses the file any more (SQLite defers its own closes the same way).
_KEPT_FDS: dict[str, list[int]] = {}


def _released(key: str) -> None:
    with _IN_USE_LOCK:
        _IN_USE[key] -= 1
        if _IN_USE[key] <= 0:
            del _IN_USE[key]
            for fd in _KEPT_FDS.pop(key, []):
                os.close(fd)


def read_head(db_path: Path, size: int) -> bytes:
    """The first ``size`` bytes of ``db_path``, read without ever closing a descriptor of
    a file this process has SQLite connections on (see :data:`_IN_USE`): there the
    descriptor is kept for the next read. Raises ``OSError`` as ``open`` does."""
    key = _file_key(db_path)
    with _IN_USE_LOCK:
        if _IN_USE[key] > 0:
            kept = _KEPT_FDS.setdefault(key, [])
            st = os.stat(db_path)
            fd = next((f for f in kept if _same_file(f, st)), None)
            if fd is None:  # first read, or the file was replaced: the old one stays open
                fd = os.open(db_path, os.O_RDONLY | os.O_CLOEXEC)
                kept.append(fd)
            return os.pread(fd, size, 0)
    with open(db_path, "rb") as fh:
        return fh.read(size)


def _same_file(fd: int, st: os.stat_result) -> bool:
    here = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (st.st_dev, st.st_ino)


class in_use:
    """While the block runs, ``db_path`` counts as a file this process has open (for a
    raw driver connection, which takes no weak reference)."""

    def __init__(self, db_path: Path) -> None:
        self._key = _file_key(db_path)

    def __enter__(self) -> None:
        with _IN_USE_LOCK:
            _IN_USE[self._key] += 1

    def __exit__(self, *exc: object) -> None:
        _released(self._key)


def _opened_here(db_path: Path) -> bool:
    key = _file_key(db_path)
    with _IN_USE_LOCK:
        return _IN_USE[key] > 0


def hermes_home() -> Path:
    """Hermes Agent's home: ``$HERMES_HOME`` if set, else ``~/.hermes``."""
    env = os.environ.get("HERMES_HOME")
    return Path(env).expanduser() if env else Path.home() / ".hermes"


def store_kind(db_path: Path) -> StoreKind:
    """What the file at ``db_path`` is: ``none`` (missing or empty: a store may be built
    there), ``ours`` (a hermes_repo store), ``hermes`` (Hermes Agent's own store) or
    ``unknown`` (anything else, unreadable included: the caller's own checks decide)."""
    try:
        st = os.lstat(db_path)
    except (FileNotFoundError, NotADirectoryError):
        return "none"
    except OSError:
        return "unknown"
    if not stat.S_ISREG(st.st_mode):
        return "unknown"
    if st.st_size == 0:
        return "none"
    if _opened_here(db_path):
        return "ours"  # never read: see _IN_USE
    try:
        with open(db_path, "rb") as fh:
            if fh.read(len(_HEADER)) != _HEADER:
                return "unknown"
    except OSError:
        return "unknown"
    kind = _classify(Path(db_path).absolute().as_uri() + "?mode=ro&immutable=1")
    wal = db_path.with_name(db_path.name + "-wal")
    if kind == "none" and _size(wal) > 0:
        # An immutable read ignores the -wal, and a fresh file's tables may still be
        # only there (Hermes leaves its -wal at close on Python 3.12+): read a private
        # byte copy of both instead, which SQLite may recover without touching the
        # originals. Only a file whose own pages hold no table gets here: a small one.
        with tempfile.TemporaryDirectory(prefix="hermes-repo-peek-") as tmp:
            copy = Path(tmp) / DB_NAME
            try:
                shutil.copyfile(db_path, copy)
                shutil.copyfile(wal, copy.with_name(DB_NAME + "-wal"))
            except OSError:
                return "unknown"
            kind = _classify(copy.as_uri() + "?mode=rw")
    # Header and file but no table anywhere: an SQLite file nobody built a schema in.
    return "none" if kind == "none" else kind


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _classify(uri: str) -> StoreKind:
    """The kind of the database at ``uri`` by its tables; ``none`` for no table."""
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error:
        return "unknown"
    try:
        tables = {
            str(row[0])
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        if not tables:
            return "none"
        if "alembic_version" in tables:
            return "ours"
        if "state_meta" in tables:
            found = conn.execute("SELECT 1 FROM state_meta WHERE key = 'store_id'").fetchone()
            if found is not None:
                return "ours"
        # Hermes' schema: a schema_version table (every release that has one), or its
        # sessions and messages with neither of our markers.
        if "schema_version" in tables or {"sessions", "messages"} <= tables:
            return "hermes"
        return "unknown"
    except sqlite3.Error:
        # Torn by a concurrent writer, or damaged: not positively Hermes' file.
        return "unknown"
    finally:
        conn.close()


def default_home() -> Path:
    """The store folder used when none is given.

    ``$HERMES_HOME/hermes-repo`` (else ``~/.hermes/hermes-repo``); a store of ours left
    at ``$HERMES_HOME/state.db`` by an earlier version keeps being used there, as long
    as ``hermes-repo/`` holds no store of its own.
    """
    base = hermes_home()
    own = base / STORE_FOLDER
    if store_kind(own / DB_NAME) == "none" and store_kind(base / DB_NAME) == "ours":
        return base
    return own


def check_not_hermes_file(db_path: Path) -> None:
    """Refuse ``db_path`` when it is Hermes Agent's own store: it is imported, never
    opened as ours (that would leave our side files beside it, or migrate it)."""
    if store_kind(db_path) != "hermes":
        return
    folder = db_path.parent
    ours = folder / STORE_FOLDER
    raise HermesAgentFileError(
        f"{db_path} is Hermes Agent's own store, not a hermes_repo store; hermes_repo "
        "never opens it as its own and leaves its folder as it is. Copy its sessions "
        f"into the hermes_repo store with `hermes-repo import {shlex.quote(str(db_path))}` "
        f"(the store then lives in {ours}: leave --home out when HERMES_HOME is "
        f"{folder}, or pass --home {shlex.quote(str(ours))})"
    )
