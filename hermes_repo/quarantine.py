"""Quarantine of a structurally damaged store, enforced through engine events.

SQLite does not quarantine by itself: after a SQLITE_CORRUPT and its rollback, later
writes may succeed again and spread the damage, and a close-time checkpoint can copy
WAL pages over a damaged file. In the field a handle kept writing for ~50 minutes after
its first structural error and its checkpoint turned a damaged-but-readable file into
an unopenable one. So the first bare SQLITE_CORRUPT / SQLITE_NOTADB that is not FTS
damage quarantines the file for this process (the decision is made where driver errors
are classified, :meth:`hermes_repo.database.Database.failure`; this module keeps the
record and enforces it):

* the failing write is not retried (:class:`StateDbCorruptError`, chained);
* every later write fails at once, before any statement reaches SQLite (``begin`` and
  ``before_cursor_execute`` hooks);
* the pool never opens a new connection (``do_connect`` hook);
* connections close without a checkpoint (``close`` hook sets
  ``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE``, or a read-only sentinel blocks it), so ``-wal``
  survives for forensics and salvage;
* reads go on where the file allows, for salvage.

Quarantine is per process and per *file*, known by its identity (device and inode),
not by its path, and lasts until the process restarts: :meth:`StateStore.open` refuses
the quarantined file wherever it was moved, and opens the new file ``db replace``
installed at the same path. The registry keeps a read-only descriptor of each
quarantined file, so its inode number cannot be reused by a new file while the record
lasts.

The same guard carries the store's file identities (:mod:`hermes_repo.fileid`): a
database file or ``-wal`` removed or replaced under the open store stops its writes
the same way (``refuse``), without quarantining the file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .engine import WRITE_OPTION, Driver, sqlite_uri
from .errors import StateDbCorruptError
from .fileid import FileId, StoreFiles, file_id
from .sqlite_capi import disable_checkpoint_on_close

if TYPE_CHECKING:
    # SQLAlchemy is imported by install(): reading the registry (the doctor) needs none.
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

__all__ = [
    "NEXT_STEPS",
    "Guard",
    "QuarantineInfo",
    "canonical_tables_ok",
    "clear",
    "enter",
    "install",
    "is_quarantined",
    "quarantine_info",
    "sentinel_count",
]

log = logging.getLogger("hermes_repo.quarantine")

NEXT_STEPS = (
    "stop every process using the store, then run "
    "`hermes-repo --home {home} sessions salvage --source {db} --inspect-only` and, if "
    "rows are recoverable, `hermes-repo --home {home} sessions salvage --source {db} "
    "--output NEW.db` and put it in place of the old file with "
    "`hermes-repo --home {home} db replace NEW.db`; "
    "or restore a snapshot (`hermes-repo --home {home} snapshot list`)"
)
"""The next steps for a quarantined store; ``{db}`` and ``{home}`` are shell-quoted."""

# What a quarantined store may no longer run on any connection: anything that can write.
_WRITES = re.compile(
    r"\b(INSERT|UPDATE|DELETE|REPLACE|CREATE|DROP|ALTER|VACUUM|REINDEX|IMMEDIATE|EXCLUSIVE"
    r"|wal_checkpoint)\b|^\s*PRAGMA\b[^;]*=",
    re.I,
)


@dataclass(frozen=True)
class QuarantineInfo:
    """Why and when a store file was quarantined."""

    path: str
    since: float
    error: str

    @property
    def next_steps(self) -> str:
        # --home on every command: the operator's HERMES_HOME may name another store.
        return NEXT_STEPS.format(
            db=shlex.quote(self.path), home=shlex.quote(os.path.dirname(self.path))
        )

    def message(self) -> str:
        return (
            f"the database file {self.path} is damaged ({self.error}) and is quarantined in "
            f"this process: no further writes reach it. Next: {self.next_steps}"
        )


_lock = threading.Lock()
_quarantined: dict[FileId, QuarantineInfo] = {}
# A read-only descriptor per quarantined file: a live inode's number is never reused.
_pins: dict[FileId, int] = {}


def _key(db_path: Path | str) -> FileId | None:
    return file_id(db_path)


def quarantine_info(db_path: Path | str) -> QuarantineInfo | None:
    """The quarantine of the file ``db_path`` names now, if this process holds one."""
    key = _key(db_path)
    return None if key is None else _quarantined.get(key)


def is_quarantined(db_path: Path | str) -> bool:
    return quarantine_info(db_path) is not None


def clear(db_path: Path | str) -> None:
    """Forget a quarantine: of the file ``db_path`` names now, and any recorded under
    that path (tests; a quarantined file that was moved keeps its record otherwise).

    Closes the pinning descriptor, which drops this process's POSIX locks on that file:
    call it only with no connection of this process open on it (a test's teardown)."""
    path = os.path.realpath(db_path)
    with _lock:
        keys = {k for k, info in _quarantined.items() if os.path.realpath(info.path) == path}
        key = _key(db_path)
        if key is not None:
            keys.add(key)
        for k in keys:
            _quarantined.pop(k, None)
            fd = _pins.pop(k, None)
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)


def enter(db_path: Path, error: str, key: FileId | None = None) -> QuarantineInfo:
    """Quarantine the file at ``db_path`` (``key``: its identity, when the caller knew
    the file before its path could change) in this process; once, later calls return
    the first record."""
    with _lock:
        key = key or _key(db_path)
        info = _quarantined.get(key) if key is not None else None
        if info is None:
            info = QuarantineInfo(path=str(db_path), since=time.time(), error=error)
            if key is not None:
                _quarantined[key] = info
                _pin(db_path, key)
            log.critical("%s", info.message())
    return info


def _pin(db_path: Path, key: FileId) -> None:
    try:
        fd = os.open(db_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    if _fd_id(fd) != key:
        os.close(fd)  # the path names another file by now: nothing to pin
        return
    _pins[key] = fd


def _fd_id(fd: int) -> FileId:
    st = os.fstat(fd)
    return FileId(st.st_dev, st.st_ino)


def canonical_tables_ok(driver: Driver, db_path: Path) -> bool:
    """Read-only ``quick_check`` of the canonical tables (True: they are sound).

    Decides a bare SQLITE_CORRUPT: a damaged FTS shadow page and a damaged ``messages``
    page raise the same code. Opened ``mode=ro`` so the probe can never write.
    """
    try:
        conn = driver.module.connect(sqlite_uri(db_path), uri=True)
    except driver.module.Error:
        return False
    try:
        return all(
            conn.execute(f"PRAGMA quick_check({t})").fetchone()[0] == "ok"
            for t in ("sessions", "messages")
        )
    except driver.module.Error:
        return False
    finally:
        conn.close()


class Guard:
    """One store file's quarantine state, looked up by a key computed once, and the
    store's file identities (``files``: None on a server).

    The statement hook runs on every statement of the hot path: it must cost a dict
    lookup, not a ``stat``.
    """

    def __init__(self, db_path: Path, files: StoreFiles | None = None) -> None:
        self.db_path = db_path
        self.files = files
        self._key = files.db_id if files is not None else _key(db_path)

    @property
    def key(self) -> FileId | None:
        """The identity of the store's database file (None: no file yet, or a server)."""
        return self._key

    @property
    def info(self) -> QuarantineInfo | None:
        return _quarantined.get(self._key) if self._key is not None else None

    @property
    def active(self) -> bool:
        return self._key in _quarantined

    def enter(self, error: str) -> QuarantineInfo:
        """Quarantine this store's file (the one it opened, wherever it is now)."""
        return enter(self.db_path, error, self._key)

    def refuse(self) -> None:
        """Raise :class:`StateDbCorruptError` if the file is quarantined, and
        :class:`~hermes_repo.errors.StoreFileReplacedError` if the store's files were
        removed or replaced under it."""
        info = _quarantined.get(self._key) if self._key is not None else None
        if info is not None:
            raise StateDbCorruptError(info.message())
        if self.files is not None:
            self.files.refuse()

    def committed(self, dbapi_conn: Any) -> None:
        """After a committed write unit: raise if the store's files are no longer the
        ones it opened (the write is then not acknowledged)."""
        if self.files is not None:
            self.files.after_commit(dbapi_conn)


def install(engine: Engine, db_path: Path, driver: Driver) -> Guard:
    """Attach the quarantine to a store engine (once, at creation); returns its guard.

    What enters the quarantine is decided where driver errors are classified (the
    engine's ``handle_error`` event installed by :class:`hermes_repo.database.Database`,
    which every store builds on its engine); these hooks enforce it.
    """
    files = StoreFiles(db_path)
    guard = Guard(db_path, files)
    refuse = guard.refuse

    from sqlalchemy import event

    @event.listens_for(engine, "do_connect")
    def on_connect(*_args: Any) -> None:
        refuse()  # a quarantined store never opens a new connection

    files.install(engine)

    @event.listens_for(engine, "begin")
    def on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(WRITE_OPTION):
            refuse()

    @event.listens_for(engine, "before_cursor_execute")
    def on_execute(
        conn: Connection, cursor: Any, statement: str, params: Any, ctx: Any, many: bool
    ) -> None:
        if guard.active and (
            conn.get_execution_options().get(WRITE_OPTION) or _WRITES.search(statement)
        ):
            refuse()

    @event.listens_for(engine.pool, "close")
    def on_close(dbapi_conn: Any, _record: Any) -> None:
        if guard.active and not disable_checkpoint_on_close(dbapi_conn, driver.module, db_path):
            # No C-level switch available: a read-only connection holding a SHARED lock
            # across the close stops the closing handle from checkpointing.
            _hold_sentinel(driver, db_path)

    @event.listens_for(engine.pool, "close_detached")
    def on_close_detached(dbapi_conn: Any) -> None:
        on_close(dbapi_conn, None)

    return guard


_sentinels: list[Any] = []


def sentinel_count() -> int:
    """How many read-only sentinel connections this process holds (see ``install``)."""
    return len(_sentinels)


def _hold_sentinel(driver: Driver, db_path: Path) -> None:
    try:
        s = driver.module.connect(sqlite_uri(db_path), uri=True)
        s.execute("BEGIN")
        s.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except driver.module.Error:
        return
    # Kept for the life of the process: a read-only connection never checkpoints.
    _sentinels.append(s)
