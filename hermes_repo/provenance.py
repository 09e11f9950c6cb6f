"""Which store is this: the store id, and the fingerprint of a store's target.

A spool file lives in a *home*, but the store its records belong to may be the SQLite
file of that home or a PostgreSQL database the home's agent writes to; another process
may open the same home with another store. So every spool record names its store, and
a replay puts a record only into the store it names (see
:mod:`hermes_repo.transcript.replay`). Two names are kept:

* the **store id** (``state_meta`` key ``store_id``): a random uuid4 hex made when the
  store is created, or, for a store made by an older version, at its first open that
  may write. It stays with the store's rows: a backup restored, a file copied by hand
  or moved to another home is the same store. ``db copy`` never copies it (the target
  is another store) and records the source's id in ``copied_from`` (a JSON list), so
  an operator may *adopt* the source's spool into the copy.
* the **target** fingerprint: what a writer that never reached its store (its open
  failed) was trying to open: ``sqlite:<absolute path of state.db>``, or the server's
  URL without password or query (``postgresql+psycopg://user@host:5432/db``). Two
  targets are the same store when their :func:`target_key` are equal (dialect,
  host, port, database; or the file's real path).

``store_created_at`` is set with the id when the store is new (no session yet): a
record of an older version (naming no store) is never replayed into a store created
after its spool file was last written (the issue this module exists for: a server
host's spool drained into a SQLite file a stray command had just created).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .codec import decode_text
from .engine import select_driver
from .engine_pg import SCHEMA_PARAM
from .errors import HermesRepoError, StoreFileReplacedError
from .models import sessions_table
from .repositories.meta import COPIED_FROM_KEY, CREATED_AT_KEY, STORE_ID_KEY, MetaRepository
from .retry import RetryPolicy
from .walcheck import refuse_removed_wal

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

    from .database import Database
    from .uow import UnitOfWork

__all__ = [
    "StoreIdentity",
    "ensure_identity",
    "peek_file_identity",
    "peek_session_sources",
    "read_identity",
    "sqlite_target",
    "target_display_command",
    "target_key",
    "url_target",
]

log = logging.getLogger("hermes_repo.store")

_SQLITE = "sqlite:"
_PG_PORT = 5432


def sqlite_target(db_path: str | os.PathLike[str]) -> str:
    """The target fingerprint of a SQLite store file (its absolute real path)."""
    return _SQLITE + os.path.realpath(os.fspath(db_path))


def url_target(url: str | URL) -> str:
    """The target fingerprint of a server URL: no password, no query except ``host``
    (a socket folder) and ``hermes_schema`` (the store's schema); what it shows is safe
    to print and to keep in a file."""
    parsed = make_url(url) if isinstance(url, str) else url
    # The schema too: two stores may share one database, each in a schema of its own.
    query = {k: v for k, v in parsed.query.items() if k in ("host", SCHEMA_PARAM)}
    # Built anew: URL.set(password=None) would keep the password (None means "as is").
    clean = URL.create(
        parsed.drivername,
        username=parsed.username,
        host=parsed.host,
        port=parsed.port,
        database=parsed.database,
        query=query,
    )
    return clean.render_as_string(hide_password=False)


def target_key(target: str | None) -> tuple[str, ...] | None:
    """What makes two targets the same store (None: not a target this code reads)."""
    if not target:
        return None
    if target.startswith(_SQLITE):
        return ("sqlite", os.path.realpath(target[len(_SQLITE) :]))
    try:
        url = make_url(target)
    except (ArgumentError, ValueError):
        return None
    host = url.host or str(url.query.get("host") or "")
    schema = str(url.query.get(SCHEMA_PARAM) or "")
    return (
        url.get_backend_name(),
        host.lower(),
        str(url.port or _PG_PORT),
        url.database or "",
        schema,
    )


def target_display_command(
    target: str | None, rest: str, *, home: str | os.PathLike[str]
) -> str | None:
    """The ``hermes-repo`` command that runs ``rest`` on the spool of ``home`` against
    ``target`` (None when the target is unknown). A server's URL is shown without its
    password: the operator gives the one the store's URL has (``user:PASSWORD@``) or
    sets PGPASSWORD. A SQLite store replays only the spool of its own home: for one
    elsewhere the command moves the file there first (``{file}`` is left for the
    caller to fill in)."""
    if not target:
        return None
    here = shlex.quote(os.fspath(home))
    if not target.startswith(_SQLITE):
        return f"hermes-repo --home {here} --url {shlex.quote(target)} {rest}"
    store_home = Path(target[len(_SQLITE) :]).parent
    if os.path.realpath(store_home) == os.path.realpath(home):
        return f"hermes-repo --home {here} {rest}"
    there = shlex.quote(str(store_home))
    folder = shlex.quote(str(store_home / "sessions"))
    return f"mv {{file}} {folder}/ && hermes-repo --home {there} {rest}"


@dataclass(frozen=True)
class StoreIdentity:
    """Who a store is: its id (None when it has none yet: a read-only, quarantined or
    locked first open of an older store), its target, its creation time when this
    version created it, and the ids of the stores it was copied from."""

    store_id: str | None
    target: str
    is_file: bool
    created_at: float | None = None
    copied_from: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "store_id": self.store_id,
            "target": self.target,
            "created_at": self.created_at,
            "copied_from": list(self.copied_from),
        }


def _copied_from(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    try:
        ids = json.loads(value)
    except ValueError:
        return ()
    if not isinstance(ids, list):
        return ()
    return tuple(i for i in ids if isinstance(i, str) and i)


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _from_meta(meta: dict[str, str | None], target: str, is_file: bool) -> StoreIdentity:
    return StoreIdentity(
        store_id=meta.get(STORE_ID_KEY) or None,
        target=target,
        is_file=is_file,
        created_at=_float(meta.get(CREATED_AT_KEY)),
        copied_from=_copied_from(meta.get(COPIED_FROM_KEY)),
    )


def _meta_of(conn: Connection) -> dict[str, str | None]:
    repo = MetaRepository(conn)
    return {k: repo.get(k) for k in (STORE_ID_KEY, CREATED_AT_KEY, COPIED_FROM_KEY)}


def database_target(database: Database) -> str:
    """The target fingerprint of an open store's database."""
    if database.backend.is_file:
        return sqlite_target(database.path)
    return url_target(database.engine.url)


def read_identity(database: Database, policy: RetryPolicy | None = None) -> StoreIdentity:
    """The store's identity as its ``state_meta`` says now (never writes)."""
    meta = database.read(_meta_of, policy)
    return _from_meta(meta, database_target(database), database.backend.is_file)


def ensure_identity(database: Database, policy: RetryPolicy) -> StoreIdentity:
    """The store's identity, its id made first if it has none (see the module text).

    Two processes opening an older store at once agree: the id is inserted only when
    absent and read back in the same unit. If the store cannot be written now (locked
    past ``policy``'s budget, read-only, quarantined) the identity comes back without an
    id; spool records then name the target only, and a later open makes the id.
    """
    target = database_target(database)
    is_file = database.backend.is_file
    try:
        meta = database.read(_meta_of, policy)
    except HermesRepoError as exc:
        log.warning("the store id could not be read at open: %s", exc)
        return StoreIdentity(None, target, is_file)
    if meta.get(STORE_ID_KEY) or getattr(database, "quarantined", False):
        return _from_meta(meta, target, is_file)

    def make(uow: UnitOfWork) -> dict[str, str | None]:
        repo = uow.meta
        if repo.get(STORE_ID_KEY) is None:
            any_session = uow.connection.execute(select(sessions_table.c.id).limit(1)).first()
            if any_session is None:
                # A store holding no session yet is new as far as any spool can tell.
                repo.insert_absent(CREATED_AT_KEY, repr(time.time()))
            repo.insert_absent(STORE_ID_KEY, uuid.uuid4().hex)
        return _meta_of(uow.connection)

    try:
        meta = database.write(make, policy)
    except HermesRepoError as exc:
        log.info("the store id is not made at this open (%s); a later open makes it", exc)
    return _from_meta(meta, target, is_file)


def _may_peek(path: str) -> bool:
    """False when even a read-only connection must not be made: the ``-wal`` was
    removed under processes that still hold it (a connection would create a new one
    and keep their writes from ever reaching the database; see
    :func:`~hermes_repo.walcheck.refuse_removed_wal`)."""
    try:
        refuse_removed_wal(Path(path))
    except StoreFileReplacedError:
        return False
    return True


def peek_file_identity(db_path: str | os.PathLike[str]) -> StoreIdentity:
    """The identity of the SQLite store at ``db_path`` read without opening the store
    (a read-only connection, no waiting, nothing written; for reports that must work
    while the store is locked or damaged). A missing file is a store the next open
    would create (``created_at`` infinite: every spool file predates it); a file that
    cannot be read is known by its target only."""
    path = os.fspath(db_path)
    target = sqlite_target(path)
    if not os.path.exists(path):
        return StoreIdentity(None, target, True, created_at=math.inf)
    if not _may_peek(path):
        return StoreIdentity(None, target, True)
    # The store's own driver: closing a connection of another SQLite library in this
    # process could drop the POSIX locks of the store's connections on the same file.
    module = select_driver().module
    try:
        con = module.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=0)
    except module.Error:
        return StoreIdentity(None, target, True)
    try:
        rows = con.execute(
            "SELECT key, value FROM state_meta WHERE key IN (?, ?, ?)",
            (STORE_ID_KEY, CREATED_AT_KEY, COPIED_FROM_KEY),
        ).fetchall()
    except module.Error:
        return StoreIdentity(None, target, True)
    finally:
        con.close()
    return _from_meta({str(k): v for k, v in rows}, target, True)


def peek_session_sources(db_path: str | os.PathLike[str], session_ids: list[str]) -> dict[str, str]:
    """The source of each of ``session_ids`` the SQLite store at ``db_path`` holds, read
    as :func:`peek_file_identity` reads (nothing for a file that cannot be read)."""
    path = os.fspath(db_path)
    if not session_ids or not os.path.exists(path) or not _may_peek(path):
        return {}
    module = select_driver().module
    out: dict[str, str] = {}
    try:
        con = module.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True, timeout=0)
    except module.Error:
        return {}
    try:
        for sid in session_ids:
            row = con.execute("SELECT source FROM sessions WHERE id = ?", (sid,)).fetchone()
            if row is not None and isinstance(decode_text(row[0]), str):
                out[sid] = decode_text(row[0])
    except module.Error:
        return out
    finally:
        con.close()
    return out
