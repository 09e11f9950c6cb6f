"""The one engine factory: which SQLite, connection hooks, file modes.

Why each hook exists:

* pysqlite's legacy transaction handling skips ``BEGIN`` before DDL and SAVEPOINT, so a
  failed migration stays half-applied. The ``connect`` hook sets ``isolation_level=None``
  and the ``begin`` hook emits ``BEGIN`` itself; writers get ``BEGIN IMMEDIATE`` so a read
  transaction never has to upgrade to a write lock and die with SQLITE_BUSY_SNAPSHOT.
* PRAGMAs run on the raw connection before any transaction: inside one,
  ``foreign_keys`` silently does nothing.
* Each connection keeps up to :data:`STATEMENT_CACHE_SIZE` prepared statements (the
  driver's default is 128). ``pysqlite3``'s statement cache (the one of Python 3.10 and
  older) replaces its newest entry when full: once a connection has run 128 distinct
  statement texts, two statements new to the cache evict each other and each is compiled
  again at every execution, for as long as the connection lives (a flush's ``INSERT``
  with the full-text triggers is the costliest to compile; docs/performance.md).
* SQLite 3.7.0 through 3.51.2 can corrupt a WAL database when two connections write and
  checkpoint at once (the WAL-reset bug). We prefer the ``pysqlite3`` wheel, which bundles
  a fixed SQLite; on a vulnerable SQLite the store uses a rollback journal instead of WAL
  (slower writes, no corruption window). See docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shlex
import stat
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

from .backend import SQLITE, Backend
from .errors import ConfigurationError, UnsafePathError
from .homes import DB_NAME as DB_NAME
from .homes import check_not_hermes_file, note_in_use
from .homes import default_home as default_home

if TYPE_CHECKING:
    from sqlalchemy import Engine
    from sqlalchemy.engine import Connection

__all__ = [
    "BUSY_TIMEOUT_MS",
    "JOURNAL_MODE_INFO",
    "STATEMENT_CACHE_SIZE",
    "WAL_FIX_VERSION",
    "WRITE_OPTION",
    "Driver",
    "check_journal_files",
    "create_store_engine",
    "db_path_for_home",
    "default_home",
    "prepare_path",
    "select_driver",
    "sqlite_uri",
]

WAL_FIX_VERSION = (3, 51, 3)
BUSY_TIMEOUT_MS = 1000
#: Prepared statements a store connection keeps (``cached_statements``): more than the
#: store's own repertoire (its migrations, every hot path, the multi-row INSERT sizes),
#: so its cache does not fill; a full ``pysqlite3`` cache compiles statements new to it
#: at each execution (see the module docstring). About 4 KB a cached statement,
#: allocated only for statements a connection runs.
STATEMENT_CACHE_SIZE = 1024
# Execution option that makes the begin hook take the write lock up front.
WRITE_OPTION = "hermes_write"
JOURNAL_MODE_INFO = "hermes_journal_mode"
"""Key of a pool connection's ``info`` where the connect hook leaves the file's journal
mode (lower case) as that connection found or set it (:mod:`hermes_repo.fileid`)."""

DriverName = Literal["auto", "pysqlite3", "stdlib"]


@dataclass(frozen=True)
class Driver:
    """The DB-API module the store talks to, and what its SQLite can do.

    ``backend`` is the database behind it; on PostgreSQL ``sqlite_version`` is empty
    and the SQLite-only facts (WAL-reset bug, journal mode) do not apply.
    """

    name: str
    module: ModuleType
    sqlite_version: str
    backend: Backend = SQLITE

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(p) for p in self.sqlite_version.split(".") if p)

    @property
    def has_wal_reset_fix(self) -> bool:
        # No SQLite file, no WAL-reset bug: nothing to warn about on a server.
        return not self.backend.is_file or self.version_tuple >= WAL_FIX_VERSION

    @property
    def journal_mode(self) -> str:
        """WAL where SQLite has the WAL-reset fix; a rollback journal where it does not."""
        forced = forced_journal_mode()
        if forced is not None:
            return forced
        return "WAL" if self.has_wal_reset_fix else "DELETE"


def forced_journal_mode() -> str | None:
    """``HERMES_REPO_JOURNAL_MODE`` (``WAL`` or ``DELETE``), None when unset or empty;
    any other value is refused rather than ignored (a typo would silently keep the
    mode the operator meant to change)."""
    raw = os.environ.get("HERMES_REPO_JOURNAL_MODE", "").strip()
    if not raw:
        return None
    if raw.upper() not in ("WAL", "DELETE"):
        raise ConfigurationError(
            f"unknown journal mode {raw!r} in HERMES_REPO_JOURNAL_MODE; set it to wal or "
            "delete, or unset it (WAL where SQLite has the WAL-reset fix, else delete)"
        )
    return raw.upper()


def select_driver(name: DriverName | None = None) -> Driver:
    """Pick the SQLite driver: ``pysqlite3`` when installed, else the standard ``sqlite3``.

    ``HERMES_REPO_DRIVER=stdlib|pysqlite3`` overrides the automatic choice.
    """
    choice = name or os.environ.get("HERMES_REPO_DRIVER", "auto") or "auto"
    forced_journal_mode()  # a typo is refused before any store is touched
    if choice not in ("auto", "pysqlite3", "stdlib"):
        raise ConfigurationError(
            f"unknown SQLite driver {choice!r}; set HERMES_REPO_DRIVER to auto, pysqlite3 or stdlib"
        )
    if choice in ("auto", "pysqlite3"):
        try:
            mod = importlib.import_module("pysqlite3.dbapi2")
        except ImportError as exc:
            if choice == "pysqlite3":
                raise ConfigurationError(
                    "HERMES_REPO_DRIVER=pysqlite3 but pysqlite3 is not installed; "
                    "run `pip install pysqlite3` or unset HERMES_REPO_DRIVER"
                ) from exc
        else:
            return Driver("pysqlite3", mod, str(mod.sqlite_version))
    import sqlite3

    return Driver("stdlib", sqlite3, sqlite3.sqlite_version)


def db_path_for_home(home: str | os.PathLike[str] | None) -> Path:
    """``<home>/state.db`` as an absolute path (``home`` None: :func:`default_home`).

    Hermes Agent's own ``state.db`` there is refused (:class:`HermesAgentFileError`,
    naming the import command) before anything can open it or write beside it.

    Absolute because SQLite (built with ``SQLITE_USE_URI``, as both drivers here are)
    reads any file name that starts with ``file:`` as a URI: a relative home called
    ``file:x`` would otherwise send plain ``connect(path)`` calls to ``x``.
    """
    folder = Path(home).expanduser() if home is not None else default_home()
    db_path = folder.absolute() / DB_NAME
    check_not_hermes_file(db_path)
    return db_path


def check_journal_files(db_path: Path) -> None:
    """Refuse a symlink or a non-regular file at ``-wal``/``-shm``/``-journal``.

    SQLite opens these by name, following a symlink, and reports a folder in their
    place only as "unable to open database file"; whatever reads them before SQLite
    (the ``-wal`` header check) must not follow a planted link either.
    """
    for suffix in ("-wal", "-shm", "-journal"):
        side = db_path.with_name(db_path.name + suffix)
        try:
            mode = os.lstat(side).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(mode):
            what = "a symlink" if stat.S_ISLNK(mode) else "not a regular file"
            raise UnsafePathError(
                f"{side} is {what}; SQLite would keep the store's journal there. Move it "
                "away (stop every process using the store first) and retry"
            )


def prepare_path(db_path: Path) -> None:
    """Create the store folder (0700) and ``state.db`` (0600) safely before SQLite opens it.

    A symlink in place of ``state.db`` is refused: it could point the store's writes at
    any file the process may write. SQLite creates ``-wal``/``-shm``/``-journal`` with
    the main file's mode, so they are 0600 too.
    """
    folder = db_path.parent
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if db_path.is_symlink():
        raise UnsafePathError(
            f"{db_path} is a symlink; the store refuses to write through it. "
            "Replace it with the real file (or point --home / HERMES_HOME at the real folder)"
        )
    check_journal_files(db_path)
    _refuse_orphaned_wal(db_path)
    if db_path.exists():
        if not stat.S_ISREG(db_path.stat().st_mode):
            raise UnsafePathError(f"{db_path} is not a regular file; move it away and retry")
        return
    try:
        fd = os.open(db_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return  # another process created it first; the checks above ran on its file
    os.close(fd)


def _refuse_orphaned_wal(db_path: Path) -> None:
    """A safety net under :func:`hermes_repo.walcheck.set_aside_orphaned_wal`, which
    every open runs first: SQLite deletes a non-empty ``-wal`` beside a missing or
    empty database, committed writes and all."""
    try:
        if db_path.stat().st_size > 0:
            return
    except FileNotFoundError:
        pass
    wal = db_path.with_name(db_path.name + "-wal")
    try:
        size = wal.stat().st_size
    except FileNotFoundError:
        return
    if size > 0:
        raise ConfigurationError(
            f"{db_path} is missing or empty but {wal} holds {size} bytes of committed "
            "writes (the database was moved away or removed while open); the store is "
            "not opened, so SQLite cannot discard them. Run `hermes-repo --home "
            f"{shlex.quote(str(db_path.parent))} doctor`: it sets the -wal aside and "
            "says how to put it back with its database"
        )


def sqlite_uri(db_path: Path, mode: Literal["ro", "rw", "rwc"] = "ro") -> str:
    """A ``file:`` URI for ``db_path`` that SQLite reads back as exactly that path.

    Every byte that means something in a URI (``?``, ``#``, ``%``, spaces, non-ASCII)
    is percent-encoded; SQLite decodes it again. Pass it with ``uri=True``.
    """
    return Path(db_path).absolute().as_uri() + f"?mode={mode}"


JournalSwitchGuard = Callable[[], AbstractContextManager[bool]]


def _on_connect(driver: Driver, busy_timeout_ms: int, may_switch: JournalSwitchGuard | None) -> Any:
    def connect(dbapi_conn: Any, record: Any) -> None:
        # Take transaction control away from pysqlite; the begin hook emits BEGIN itself.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cur.execute("PRAGMA foreign_keys = ON")
            # NORMAL in WAL mode: a commit survives a process crash; a power loss may
            # lose the last transactions but never corrupts the file.
            cur.execute("PRAGMA synchronous = NORMAL")
            mode = cur.execute("PRAGMA journal_mode").fetchone()[0].upper()
            wanted = driver.journal_mode
            if mode != wanted:
                # The journal mode belongs to the FILE, not to this connection: switching
                # needs the file to ourselves, and switching under another process would
                # move it to a mode it did not choose (a fixed SQLite turning WAL on under
                # one without the WAL-reset fix). So a store switches only while no other
                # holder has it open (``may_switch``); otherwise the file keeps its mode
                # and health()/doctor report it.
                with contextlib.nullcontext(True) if may_switch is None else may_switch() as alone:
                    if alone:
                        with contextlib.suppress(driver.module.OperationalError):
                            mode = cur.execute(f"PRAGMA journal_mode = {wanted}").fetchone()[0]
                            mode = str(mode).upper()
            if record is not None:
                record.info[JOURNAL_MODE_INFO] = mode.lower()
        finally:
            cur.close()

    return connect


def _on_begin(conn: Connection) -> None:
    if conn.get_execution_options().get(WRITE_OPTION):
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    else:
        conn.exec_driver_sql("BEGIN")


def connect_store(
    db_path: Path, *, driver: Driver, journal_switch: JournalSwitchGuard | None = None
) -> Any:
    """One driver connection to ``db_path`` set up as the store's engine sets up each of
    its own (busy timeout, foreign keys, synchronous, the journal mode), without loading
    SQLAlchemy: the read commands' quick reads (see :mod:`hermes_repo.cli._reads`).

    In autocommit mode, as the engine's connections are: each statement is a consistent
    read on its own. The caller records its owner with :func:`~hermes_repo.homes.note_in_use`.
    """
    prepare_path(db_path)
    # The path as a plain file name (no uri=True), absolute, as the engine passes it.
    conn = driver.module.connect(str(Path(db_path).absolute()))
    try:
        _on_connect(driver, BUSY_TIMEOUT_MS, journal_switch)(conn, None)
    except BaseException:
        conn.close()
        raise
    return conn


def create_store_engine(
    db_path: Path,
    *,
    driver: Driver | None = None,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    journal_switch: JournalSwitchGuard | None = None,
    **engine_kwargs: Any,
) -> Engine:
    """Create the engine for ``db_path`` with the store's hooks.

    Use ``engine.execution_options(hermes_write=True)`` for connections that write: their
    transactions start with ``BEGIN IMMEDIATE``.

    ``journal_switch`` decides whether a connection may switch the file's journal mode
    to the driver's (see :attr:`Driver.journal_mode`): a context manager factory that
    yields True while the switch is safe (the store holds the file alone). None: switch
    whenever SQLite allows it.
    """
    # Imported here: the driver and path rules above serve `hermes-repo --version` and
    # `--help`, which must not pay for loading SQLAlchemy.
    from sqlalchemy import create_engine, event
    from sqlalchemy.engine import URL

    drv = driver or select_driver()
    prepare_path(db_path)
    # The path goes in as the URL's database *component*, never through a URL string:
    # `sqlite:///{path}` would read a `?` in a folder name as the start of a query
    # string (the store silently opening another file) and decode `%41` to `A`. The
    # pysqlite dialect hands this component to connect() as a plain file name (no
    # uri=True); being absolute, it never starts with `file:`, which SQLite built with
    # SQLITE_USE_URI would parse as a URI anyway. Every byte of the path is taken as is.
    url = URL.create("sqlite+pysqlite", database=str(Path(db_path).absolute()))
    connect_args = dict(engine_kwargs.pop("connect_args", {}))
    connect_args.setdefault("cached_statements", STATEMENT_CACHE_SIZE)
    engine = create_engine(url, module=drv.module, connect_args=connect_args, **engine_kwargs)
    # Its connections hold POSIX locks on the file: nothing may now read the file itself
    # to classify it (a descriptor closed there would drop those locks).
    note_in_use(db_path, engine)
    engine.info_driver = drv  # type: ignore[attr-defined]
    event.listen(engine, "connect", _on_connect(drv, busy_timeout_ms, journal_switch))
    event.listen(engine, "begin", _on_begin)
    return engine


def engine_driver(engine: Engine) -> Driver:
    """The :class:`Driver` an engine was built with."""
    drv = getattr(engine, "info_driver", None)
    if not isinstance(drv, Driver):
        raise ConfigurationError("engine was not created by hermes_repo.engine.create_store_engine")
    return drv
