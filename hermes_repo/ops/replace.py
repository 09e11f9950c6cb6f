"""``replace_store(home, new_db)``: install a recovered (or restored) file as the store.

What ``hermes-repo db replace NEW.db`` runs. Putting a new ``state.db`` in place of a
damaged one by hand goes wrong in a way that is easy to miss: the damaged file's ``-wal``
is kept on purpose after a quarantine, and SQLite replays a ``-wal`` into whatever file
sits at its name, so the new file is damaged on its first open and the original is
already gone. This module does it in an order that never loses either file:

1. **Check the new file** without touching it: a regular file, not the store itself
   nor one of its companions, starting with the SQLite header.
2. **Stage a copy beside the store** (``.state.db.replace-<pid>.tmp``, 0600) through
   SQLite's backup API from a read-only connection: the copy carries whatever the new
   file's own ``-wal`` holds, lands on the store's file system (so the final rename is
   atomic), and leaves the operator's file as it was. The copy is verified before
   anything of the store moves: ``integrity_check`` and schema revision at head.
3. **Take the store alone** (the holder lock, exclusive, without waiting) and refuse,
   naming the pids, while any process has it open, library or not (a POSIX lock on
   ``state.db`` or its ``-shm`` is an SQLite connection).
4. **Move the old set aside together**: ``state.db`` and its ``-wal``/``-shm``/
   ``-journal`` become ``state.db.replaced-<UTC time>`` plus the same suffixes (0600), a
   set SQLite and ``sessions salvage --source`` still read as one database. Then the
   staged copy is renamed to ``state.db``; no stale ``-wal``/``-shm`` can meet it.
5. **Verify** that the installed store opens (:meth:`StateStore.open`) at head.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from ..driver_errors import describe
from ..engine import DriverName, db_path_for_home, select_driver
from ..engine_pg import SQLITE_FILE
from ..errors import HermesRepoError, ReplaceError
from ..holders import HolderLock, StoreHeldError, lock_pids, pid_alive
from ..maintenance.sqlite_only import refuse_on_server
from ..schema import migrate
from ..schema.backup import backup_to, read_only_engine
from ..schema.files import SIDE_SUFFIXES, fsync_dir, fsync_file, side_file, side_files
from ..store import StateStore

__all__ = ["REPLACE_COMMAND", "SIDE_SUFFIXES", "ReplaceError", "ReplaceResult", "replace_store"]

REPLACE_COMMAND = "hermes-repo db replace"
"""The command every message that tells an operator to install a new file names."""

_SQLITE_MAGIC = b"SQLite format 3\x00"
_STAGE_PREFIX = ".state.db.replace-"


@dataclass
class ReplaceResult:
    """What ``replace_store`` did: where the old set went and what was verified."""

    path: str
    new: str
    aside: list[str] = field(default_factory=list)
    """The old ``state.db`` and its companions, moved aside (empty: there was no store)."""
    integrity: str = ""
    revision: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return asdict(self)


def _check_new(db_path: Path, new: Path) -> None:
    if not new.exists():
        raise ReplaceError(f"{new} does not exist; pass the path of the recovered state.db")
    if not stat.S_ISREG(new.stat().st_mode):
        raise ReplaceError(f"{new} is not a regular file; pass the path of the recovered state.db")
    own = [db_path, *side_files(db_path)]
    for path in own:
        with contextlib.suppress(OSError):
            if path.exists() and os.path.samefile(path, new):
                raise ReplaceError(
                    f"{new} is the store's own file {path.name}; pass the recovered file "
                    "(e.g. the --output of `sessions salvage`)"
                )
    with open(new, "rb") as f:
        head = f.read(100)
    if not head.startswith(_SQLITE_MAGIC) or len(head) < 100:
        raise ReplaceError(
            f"{new} is not an SQLite database (its header is missing or damaged); "
            "pass the file `sessions salvage --output` wrote"
        )


def _remove_stale_stages(folder: Path) -> None:
    """Staged copies left by a replace that was killed (its pid is gone)."""
    for path in folder.glob(_STAGE_PREFIX + "*.tmp*"):
        pid_text = path.name[len(_STAGE_PREFIX) :].split(".", 1)[0]
        if pid_text.isdigit() and int(pid_text) != os.getpid() and not pid_alive(int(pid_text)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def sqlite_lock_pids(db_path: Path) -> tuple[int, ...]:
    """Pids of other processes holding a POSIX (SQLite) lock on the store or its ``-shm``.

    The holders file sees only this library; an ``sqlite3`` shell or another program
    with the file open shows here instead (Linux only; elsewhere the answer is empty).
    In WAL mode every connection keeps a read lock on the ``-shm`` while it is open.
    """
    return lock_pids([db_path, side_file(db_path, "-shm")], kinds=("POSIX", "OFDLCK"))


def _stage(new: Path, stage: Path, driver_name: DriverName | None) -> tuple[str, str | None]:
    """Copy ``new`` to ``stage`` with the backup API and verify the copy."""
    drv = select_driver(driver_name)
    source = read_only_engine(new, drv)
    try:
        backup_to(source, stage)
    except DBAPIError as exc:
        raise ReplaceError(
            f"{new} could not be read ({describe(exc)}); check the file, or salvage the store "
            "again with `sessions salvage --output`"
        ) from exc
    finally:
        source.dispose()
    check = read_only_engine(stage, drv)
    try:
        with check.connect() as conn:
            rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA integrity_check").all()]
            status = migrate.schema_status(conn)
    except DBAPIError as exc:
        raise ReplaceError(
            f"{new} fails to open as a store ({describe(exc)}); nothing was replaced. "
            "Salvage the store again with `sessions salvage --output`"
        ) from exc
    finally:
        check.dispose()
    integrity = "ok" if rows == ["ok"] else "; ".join(rows[:5])
    if integrity != "ok":
        raise ReplaceError(
            f"{new} fails integrity_check ({integrity}); nothing was replaced. "
            "Salvage the store again with `sessions salvage --output`"
        )
    if status.status != "at-head":
        fix = {
            "behind": f"bring it to head first with `hermes-repo --home {new.parent} db upgrade`",
            "ahead": "upgrade the hermes_repo package first",
        }.get(status.status, "pass a hermes_repo store (e.g. the --output of `sessions salvage`)")
        raise ReplaceError(
            f"{new} is not a store at schema head {status.head} (status {status.status}, "
            f"revision {status.revision or '-'}); nothing was replaced: {fix}"
        )
    return integrity, status.revision


def _aside_base(db_path: Path) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(1000):
        suffix = "" if n == 0 else f"-{n:02d}"
        base = db_path.with_name(f"{db_path.name}.replaced-{stamp}{suffix}")
        if not any(p.exists() for p in (base, *side_files(base))):
            return base
    raise ReplaceError(f"too many replaced sets named {db_path.name}.replaced-{stamp}; tidy them")


def _refuse_if_held(db_path: Path) -> None:
    pids = sqlite_lock_pids(db_path)
    if pids:
        raise ReplaceError(
            f"{StoreHeldError.naming(pids)}: nothing was replaced (an SQLite connection "
            "holds the file)"
        )


def replace_store(
    home: str | os.PathLike[str] | None,
    new_db: str | os.PathLike[str],
    *,
    driver: DriverName | None = None,
    url: str | URL | None = None,
) -> ReplaceResult:
    """Install ``new_db`` as the store in ``home``; the old set is kept aside (see module).

    Raises :class:`ReplaceError` (nothing moved) when the new file is not a sound store
    at head, or while any process holds the store. A PostgreSQL store (``url``, as
    :meth:`StateStore.open` takes it) is refused with :class:`NotOnThisBackendError`
    naming ``pg_restore``.
    """
    refuse_on_server("db replace", "replace", url)
    db_path = db_path_for_home(home)
    new = Path(new_db).expanduser().absolute()
    _check_new(db_path, new)
    folder = db_path.parent
    if not folder.is_dir():
        raise ReplaceError(f"{folder} is not a folder; check --home / HERMES_HOME")
    _remove_stale_stages(folder)
    stage = folder / f"{_STAGE_PREFIX}{os.getpid()}.tmp"
    result = ReplaceResult(path=str(db_path), new=str(new))
    try:
        result.integrity, result.revision = _stage(new, stage, driver)
        fsync_file(stage)
        holder = HolderLock(db_path)
        try:
            with holder.exclusive():
                _refuse_if_held(db_path)
                base = _aside_base(db_path)
                for suffix in ("", *SIDE_SUFFIXES):
                    old = side_file(db_path, suffix)
                    if old.exists() or old.is_symlink():
                        dest = side_file(base, suffix)
                        os.rename(old, dest)
                        with contextlib.suppress(OSError):
                            os.chmod(dest, 0o600, follow_symlinks=False)
                        result.aside.append(str(dest))
                os.rename(stage, db_path)
                fsync_dir(folder)
        except StoreHeldError as exc:
            raise ReplaceError(f"{exc}: nothing was replaced") from exc
        finally:
            holder.release()
    finally:
        for path in (stage, *side_files(stage)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    try:
        # The installed file, even where HERMES_REPO_URL names a server.
        with StateStore.open(folder, url=SQLITE_FILE, replay=False) as store:
            health = store.health()
    except HermesRepoError as exc:
        kept = ", ".join(result.aside) or "nothing (there was no store)"
        raise ReplaceError(
            f"the new {db_path} was installed but does not open ({exc}); the old set is "
            f"kept as {kept}: stop the store and move it back if needed"
        ) from exc
    result.counts = dict(health.counts)
    return result
