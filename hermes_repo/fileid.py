"""The store's files known by identity (device and inode), not by their names.

SQLite opens ``state.db`` and its ``-wal`` by name once and then writes through its file
descriptors. When a name stops pointing at the file the store writes (the ``-wal``
deleted, ``state.db`` moved away or replaced), SQLite goes on committing into an
inode that nothing can open again, and every acknowledged write since the last
checkpoint is lost with the process; the next open at the path creates an empty store.
So each store records the identity of its database file when it is built and of its
``-wal`` while its connections are open, and checks them:

* after each committed write unit (no SQL; one ``os.stat`` of the folder while no name
  in it changed since both files were last verified, one per file otherwise, so a
  commit costs one system call in the usual case): a mismatch means
  the write is **not acknowledged** (:class:`~hermes_repo.errors.StoreFileReplacedError`,
  which a transcript flush spools and replays by uid later) and the store takes no
  further writes (reads go on);
* before each new pool connection: a new connection would open whatever the path names
  now (a new empty ``state.db``, a new ``-wal`` the other connections cannot see).

When the ``-wal`` was removed and nothing took its place, the connection that noticed
still holds it: a ``TRUNCATE`` checkpoint through it copies every committed frame into
``state.db`` before the store stops, so the writes acknowledged before the removal
survive a kill. A ``-wal`` replaced by another file is never checkpointed (its index in
``-shm`` may describe the other file's frames).

Tests and operators see the state in :attr:`StoreFiles.lost`, ``health().notes`` and the
doctor (which reports the ``-wal`` set aside by the next open, :mod:`.walcheck`).
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .engine import JOURNAL_MODE_INFO
from .errors import StoreFileReplacedError

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = ["FileId", "StoreFiles", "file_id"]

log = logging.getLogger("hermes_repo.fileid")


@dataclass(frozen=True)
class FileId:
    """A file's identity: what a name points at, whatever it is called now."""

    dev: int
    ino: int


def file_id(path: Path | str) -> FileId | None:
    """The identity of the file ``path`` names now (None: nothing there)."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return FileId(st.st_dev, st.st_ino)


class StoreFiles:
    """One open store's ``state.db`` and ``-wal``, by identity; see the module docstring.

    Built when the store's engine is (after the file exists); :meth:`install` attaches
    the connection checks, :meth:`after_commit` runs after each committed write unit.
    """

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self.wal_path = db_path.with_name(db_path.name + "-wal")
        self._db_name = os.fspath(db_path)
        self._dir_name = os.fspath(db_path.parent)
        # The folder's (mtime, inode, device) when both files were last verified, if
        # that mtime was old enough to change with any later rename (see _folder_state).
        self._quiet: tuple[int, int, int] | None = None
        self._wal_name = os.fspath(self.wal_path)
        #: The database file the store was opened on.
        self.db_id = file_id(db_path)
        self._wal_id: FileId | None = None
        self._wal_mode = False
        self._lock = threading.Lock()
        #: Why the store takes no more writes (None: its files are where they were).
        self.lost: str | None = None
        self.lost_since: float | None = None

    # -- enforcement ---------------------------------------------------------------------

    def refuse(self) -> None:
        """Raise :class:`StoreFileReplacedError` once the store's files were lost."""
        lost = self.lost
        if lost is not None:
            raise StoreFileReplacedError(lost)

    def after_commit(self, dbapi_conn: Any) -> None:
        """Check the files after a committed write unit on ``dbapi_conn``; raise
        :class:`StoreFileReplacedError` (the write is not acknowledged) on a mismatch."""
        # The hot path of every commit: stat calls compared field by field (building a
        # FileId each time cost a third as much as the system calls).
        if self.lost is not None:
            raise StoreFileReplacedError(self.lost)
        quiet = self._quiet
        if quiet is not None:
            # Removing, renaming or creating a name changes the folder's mtime: while it
            # is the one seen when both files were last verified, so are they.
            try:
                st = os.stat(self._dir_name)
            except OSError:
                st = None
            if st is not None and (st.st_mtime_ns, st.st_ino, st.st_dev) == quiet:
                return
            self._quiet = None
        db = self.db_id
        if self._wal_mode and self._wal_id is not None:
            folder_before = _folder_state(self._dir_name)
        else:
            folder_before = None
        try:
            st = os.stat(self._db_name)
        except OSError:
            st = None
        if db is not None and st is not None and st.st_ino == db.ino and st.st_dev == db.dev:
            if not self._wal_mode:
                return
            wal = self._wal_id
            try:
                st = os.stat(self._wal_name)
            except OSError:
                st = None
            if st is not None:
                if wal is None:
                    self._wal_id = FileId(st.st_dev, st.st_ino)  # made by the first write
                    return
                if st.st_ino == wal.ino and st.st_dev == wal.dev:
                    self._quiet = folder_before
                    return
        self._lose(self._problem(), dbapi_conn)

    def status(self) -> str | None:
        """Why the store takes no more writes, checking the files now (never raises)."""
        if self.lost is None and self.db_id is not None:
            problem = self._problem()
            if problem is not None:
                return problem + " (seen by a health check; the next write is refused)"
        return self.lost

    # -- what is wrong ----------------------------------------------------------------

    def _problem(self, *, wal: bool = True) -> str | None:
        name = self.db_path.name
        now = file_id(self.db_path)
        if now != self.db_id:
            if now is None:
                return f"{name} was moved away or removed while the store was open"
            return f"{name} was replaced by another file while the store was open"
        if not wal or not self._wal_mode or self._wal_id is None:
            return None
        now = file_id(self.wal_path)
        if now == self._wal_id:
            return None
        if now is None:
            return f"{self.wal_path.name} was removed while the store was open"
        return f"{self.wal_path.name} was replaced by another file while the store was open"

    def _lose(self, problem: str | None, dbapi_conn: Any = None) -> None:
        if problem is None:  # the file came back between two stats: nothing to say
            return
        rescued = self._rescue(dbapi_conn) if dbapi_conn is not None else False
        home = shlex.quote(str(self.db_path.parent))
        if rescued:
            fate = (
                "every write committed so far was copied into the database file through "
                "the store's open handle (a checkpoint) before it stopped writing, but "
                "this last write is not acknowledged"
            )
        elif self.wal_path.name in problem:
            fate = "the last writes are not durable (they live in a file no name reaches)"
        else:
            fate = (
                f"this store writes to the file it opened, wherever it is now, and "
                f"nothing more at {self.db_path}; the last writes are not acknowledged"
            )
        message = (
            f"{problem}: {fate}. The store takes no more writes. Stop every process "
            f"using this store and run `hermes-repo --home {home} doctor`"
        )
        with self._lock:
            if self.lost is None:
                self.lost = message
                self.lost_since = time.time()
                log.critical("%s", message)
        raise StoreFileReplacedError(self.lost)

    def _rescue(self, dbapi_conn: Any) -> bool:
        """Checkpoint a removed ``-wal`` through the handle that still reads it.

        Only when the database file is still in place and no other file took the
        ``-wal``'s name: then the ``-shm`` index describes this handle's frames and the
        checkpoint copies the acknowledged writes into ``state.db``.
        """
        if not self._wal_mode or file_id(self.db_path) != self.db_id:
            return False
        if file_id(self.wal_path) is not None:
            return False
        try:
            cursor = dbapi_conn.cursor()
            try:
                busy, _log, _done = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            finally:
                cursor.close()
        except Exception as exc:  # any driver error: the rescue failed, the refusal stands
            log.error("checkpoint of the removed %s failed: %s", self.wal_path.name, exc)
            return False
        return bool(busy == 0)

    # -- connection hooks ---------------------------------------------------------------

    def install(self, engine: Engine) -> None:
        """Check the files before each new pool connection; track the open ones."""
        from sqlalchemy import event  # on use: reading a quarantine loads no SQLAlchemy

        @event.listens_for(engine, "do_connect")
        def before_connect(*_args: Any) -> None:
            self.refuse()  # no reconnect that would open what the path names now
            # The -wal must still be the one the open connections use: while any is
            # open, SQLite never deletes it, so another file there was put by someone.
            problem = self._problem(wal=_others(engine) > 0)
            if problem is not None:
                self._lose(problem)

        @event.listens_for(engine, "connect")
        def on_connect(_dbapi_conn: Any, record: Any) -> None:
            if _others(engine) > 0:
                return
            # No other connection of ours kept the -wal alive: SQLite may have deleted
            # it at the last close, and this connection opened a new one.
            mode = record.info.get(JOURNAL_MODE_INFO) if record is not None else None
            with self._lock:
                self._wal_mode = mode == "wal" if mode is not None else self._wal_mode
                self._wal_id = file_id(self.wal_path) if self._wal_mode else None
                self._quiet = None


# File times come from a coarse kernel clock (a tick of up to 10 ms): a folder changed
# within the same tick as its last look keeps the same mtime. Only an mtime older than
# this margin when it was read stands for "nothing renamed since".
_QUIET_MARGIN_NS = 200_000_000


def _folder_state(folder: str) -> tuple[int, int, int] | None:
    """The folder's (mtime, inode, device), read now, if that mtime is old enough that
    any later change of its names gives it another one; else None."""
    now = time.time_ns()
    try:
        st = os.stat(folder)
    except OSError:
        return None
    if st.st_mtime_ns > now - _QUIET_MARGIN_NS:
        return None
    return (st.st_mtime_ns, st.st_ino, st.st_dev)


def _others(engine: Engine) -> int:
    """How many other connections the engine's pool holds open while one is being made
    (0 when the pool does not say: the -wal is then learnt again, never refused)."""
    pool = engine.pool
    try:
        return max(0, int(pool.checkedin()) + int(pool.checkedout()) - 1)  # type: ignore[attr-defined]
    except (AttributeError, TypeError):
        return 0
