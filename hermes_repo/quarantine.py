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

Quarantine is per process and per file, and lasts until the process restarts on a
repaired or recovered file: :meth:`StateStore.open` refuses a quarantined path.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.engine import Connection

from .engine import WRITE_OPTION, Driver, sqlite_uri
from .errors import StateDbCorruptError
from .sqlite_capi import disable_checkpoint_on_close

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
    "`hermes-repo --home {home} sessions recover --source {db} --inspect-only` and, if "
    "rows are recoverable, `hermes-repo --home {home} sessions recover --source {db} "
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
_quarantined: dict[str, QuarantineInfo] = {}


def _key(db_path: Path | str) -> str:
    return os.path.realpath(db_path)


def quarantine_info(db_path: Path | str) -> QuarantineInfo | None:
    """The quarantine of ``db_path`` in this process, if any."""
    return _quarantined.get(_key(db_path))


def is_quarantined(db_path: Path | str) -> bool:
    return _key(db_path) in _quarantined


def clear(db_path: Path | str) -> None:
    """Forget a quarantine (tests, or after the file was replaced by a recovered one)."""
    with _lock:
        _quarantined.pop(_key(db_path), None)


def enter(db_path: Path, error: str) -> QuarantineInfo:
    """Quarantine ``db_path`` in this process (once; later calls return the first record)."""
    with _lock:
        info = _quarantined.get(_key(db_path))
        if info is None:
            info = QuarantineInfo(path=str(db_path), since=time.time(), error=error)
            _quarantined[_key(db_path)] = info
            log.critical("%s", info.message())
    return info


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
    """One store file's quarantine state, looked up by a key computed once.

    The statement hook runs on every statement of the hot path: it must cost a dict
    lookup, not a ``realpath``.
    """

    def __init__(self, db_path: Path) -> None:
        self.db_path = db_path
        self._key = _key(db_path)

    @property
    def info(self) -> QuarantineInfo | None:
        return _quarantined.get(self._key)

    @property
    def active(self) -> bool:
        return self._key in _quarantined

    def refuse(self) -> None:
        """Raise :class:`StateDbCorruptError` if the file is quarantined."""
        info = _quarantined.get(self._key)
        if info is not None:
            raise StateDbCorruptError(info.message())


def install(engine: Engine, db_path: Path, driver: Driver) -> Guard:
    """Attach the quarantine to a store engine (once, at creation); returns its guard.

    What enters the quarantine is decided where driver errors are classified (the
    engine's ``handle_error`` event installed by :class:`hermes_repo.database.Database`,
    which every store builds on its engine); these hooks enforce it.
    """
    guard = Guard(db_path)
    refuse = guard.refuse

    @event.listens_for(engine, "do_connect")
    def on_connect(*_args: Any) -> None:
        refuse()  # a quarantined store never opens a new connection

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
