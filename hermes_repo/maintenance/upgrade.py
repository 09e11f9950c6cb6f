"""Schema upgrades of a store file: where it stands, whether this code may migrate it,
and the restore point taken before it does.

:func:`upgrade` is the one upgrade of a SQLite store, run by ``hermes-repo db upgrade``
(on an engine of its own, :func:`schema_engine`: the store refuses to open a file behind
head, and that is exactly the file an upgrade exists to fix) and by
``StateStore.open(upgrade=True)`` (on the store's engine): both refuse what this code
may not migrate, take a restore point first, then run the migrations in one transaction.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from .. import walcheck
from ..driver_errors import translate
from ..engine import Driver, create_store_engine, engine_driver
from ..errors import SchemaMismatchError
from ..schema import migrate, server
from ..schema.backup import timestamped_backup
from .snapshots import Snapshot, SnapshotVerifyError, snapshot_before

__all__ = [
    "FileRevision",
    "RestorePoint",
    "SchemaRevision",
    "UpgradeResult",
    "check_schema",
    "describe_revision",
    "must_migrate",
    "read_revision",
    "refuse_unless_ours",
    "restore_point",
    "schema_engine",
    "upgrade",
    "upgrade_server_schema",
]


@dataclass(frozen=True)
class SchemaRevision:
    """Where a file stands against the migrations shipped with this code."""

    path: Path
    revision: str | None
    head: str
    status: str  # missing | empty | foreign | unversioned | at-head | damaged | behind | ahead
    schema: migrate.SchemaStatus | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "revision": self.revision,
            "head": self.head,
            "status": self.status,
        }


@contextmanager
def schema_engine(db_path: Path, *, report_only: bool = False) -> Iterator[Engine]:
    """An engine on ``db_path`` for migrating or reporting, disposed at the end.

    ``report_only``: the journal mode is the file's, and a report must show it as found,
    not switch it to this process's choice first.
    """
    walcheck.preserve_damaged_wal(db_path)  # before SQLite can discard its frames
    engine = create_store_engine(
        db_path, journal_switch=(lambda: contextlib.nullcontext(False)) if report_only else None
    )
    try:
        yield engine
    finally:
        engine.dispose()


def read_revision(engine: Engine, db_path: Path) -> SchemaRevision:
    """The schema revision and status of the file behind ``engine``."""
    try:
        with engine.connect() as conn:
            schema = migrate.schema_status(conn)
    except DBAPIError as exc:
        raise translate(exc, action=f"reading the schema revision of {db_path}") from exc
    return SchemaRevision(db_path, schema.revision, schema.head, schema.status, schema)


def refuse_unless_ours(rev: SchemaRevision) -> None:
    """Raise :class:`SchemaMismatchError` for a file no migration of this code may touch:
    newer than this code, not a hermes_repo store, or with a damaged schema."""
    if rev.status == "ahead":
        raise SchemaMismatchError(
            f"{rev.path} is at schema revision {rev.revision}, newer than this hermes_repo "
            f"knows (head {rev.head}); upgrade the hermes_repo package, never downgrade the file"
        )
    if rev.status in ("damaged", "unversioned") and rev.schema is not None:
        raise SchemaMismatchError(migrate.damaged_schema_fix(rev.path, rev.schema))
    if rev.status == "foreign":
        raise SchemaMismatchError(
            f"{rev.path} holds tables but no hermes_repo schema revision, so it is not a "
            "hermes_repo store; point --home / HERMES_HOME at another folder"
        )


@dataclass(frozen=True)
class FileRevision:
    """A report of a store file's revision and, when it exists, the SQLite reading it."""

    revision: SchemaRevision
    driver: Driver | None = None
    journal_mode: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = self.revision.as_dict()
        if self.driver is not None:
            out.update(
                driver=self.driver.name,
                sqlite_version=self.driver.sqlite_version,
                sqlite_has_wal_fix=self.driver.has_wal_reset_fix,
                journal_mode=self.journal_mode,
            )
        return out


def describe_revision(db_path: Path) -> FileRevision:
    """Where ``db_path`` stands, read without changing it (a missing file is not created)."""
    if not db_path.exists():
        return FileRevision(SchemaRevision(db_path, None, migrate.head_revision(), "missing"))
    with schema_engine(db_path, report_only=True) as engine:
        rev = read_revision(engine, db_path)
        with engine.connect() as conn:
            mode = str(conn.exec_driver_sql("PRAGMA journal_mode").scalar_one()).lower()
        return FileRevision(rev, engine_driver(engine), mode)


@dataclass(frozen=True)
class RestorePoint:
    """What protects a store about to be migrated: a verified snapshot, else a backup."""

    snapshot: Snapshot | None = None
    backup: Path | None = None


def restore_point(
    engine: Engine, db_path: Path, *, unverified: Callable[[str], None] | None = None
) -> RestorePoint:
    """A snapshot of the store before it is migrated; a raw backup when none can be made.

    A damaged store gets no verified snapshot; the migration may still be what the
    operator needs, so a raw backup is taken instead, after ``unverified`` is told why
    (so the reason is known even if the backup then fails). Other snapshot failures
    (no space, another snapshot running) are raised: a migration must not go on
    without a way back.
    """
    try:
        snap = snapshot_before(db_path.parent, "pre-upgrade")
    except SnapshotVerifyError as exc:
        if unverified is not None:
            unverified(" ".join(str(exc).split()))
        snap = None
    if snap is None:
        return RestorePoint(backup=timestamped_backup(engine, db_path, "pre-upgrade"))
    return RestorePoint(snapshot=snap)


@dataclass(frozen=True)
class UpgradeResult:
    """What :func:`upgrade` did: the revision before and after, and the restore point it
    took (None when there was nothing to protect: an empty file, or one at head)."""

    before: SchemaRevision
    after: SchemaRevision
    restore: RestorePoint | None = None

    @property
    def migrated(self) -> bool:
        return self.before.status != "at-head"


def upgrade(
    engine: Engine,
    db_path: Path,
    *,
    unverified: Callable[[str], None] | None = None,
    protected: Callable[[RestorePoint], None] | None = None,
) -> UpgradeResult:
    """Bring the SQLite store behind ``engine`` to head, with a restore point first.

    A file newer than this code, not a hermes_repo store, or with a damaged schema is
    refused (:func:`refuse_unless_ours`). A store at head is left as it is, with no
    snapshot (it would only push older automatic snapshots out of their retention). An
    empty file is built at head (there is nothing to protect). Any other store is first
    copied into a verified ``pre-upgrade`` snapshot, or a raw backup when it fails
    ``integrity_check`` (``unverified`` is told why: see :func:`restore_point`);
    ``protected`` is told the restore point before the migrations run, so a caller can
    name the way back even if they fail. The migrations then run in one transaction.
    """
    before = read_revision(engine, db_path)
    refuse_unless_ours(before)
    if before.status == "at-head":
        return UpgradeResult(before, before)
    point = None
    if before.status != "empty":
        point = restore_point(engine, db_path, unverified=unverified)
        if protected is not None:
            protected(point)
    migrate.upgrade(engine)
    return UpgradeResult(before, read_revision(engine, db_path), point)


def check_schema(db_path: Path) -> tuple[SchemaRevision, str | None]:
    """The file's revision and its drift from the models (None: none).

    Raises :class:`SchemaMismatchError` naming the command to run when there is no
    store, no schema, or a schema behind head, and for files :func:`refuse_unless_ours`
    refuses.
    """
    if not db_path.exists():
        raise SchemaMismatchError(f"no store at {db_path}; create it with `hermes-repo db upgrade`")
    with schema_engine(db_path) as engine:
        rev = read_revision(engine, db_path)
        refuse_unless_ours(rev)
        if rev.status == "empty":
            raise SchemaMismatchError(
                f"{db_path} holds no schema; create it with `hermes-repo db upgrade`"
            )
        if rev.status == "behind":
            raise SchemaMismatchError(
                f"{db_path} is at schema revision {rev.revision}, behind head {rev.head}; "
                "run `hermes-repo db upgrade` (it backs up first)"
            )
        # Alembic prints "No new upgrade operations detected." itself; the caller
        # states the verdict in its own words.
        with contextlib.redirect_stdout(io.StringIO()):
            drift = migrate.check(engine)
    return rev, drift


def must_migrate(
    schema: migrate.SchemaStatus, *, where: str, db_path: Path | None, upgrade: bool
) -> bool:
    """True when the migrations must run; False at head; else the refusal, raised.

    The one decision of every upgrade: a file's (``db_path`` given) and a server's
    (``db_path`` None; ``where`` is its URL without the password), whether at an open
    (``upgrade`` False: a store behind is refused, naming the command) or by
    ``db upgrade`` and ``open(upgrade=True)``."""
    on_file = db_path is not None
    current, head = schema.revision, schema.head
    if schema.status == "at-head":
        return False
    if schema.status == "empty":
        return True
    if schema.status in ("damaged", "unversioned") and db_path is not None:
        raise SchemaMismatchError(migrate.damaged_schema_fix(db_path, schema))
    if schema.status in ("damaged", "unversioned"):
        lost = ", ".join(schema.missing) or "alembic_version"
        raise SchemaMismatchError(
            f"{where} holds the hermes_repo tables but lacks {lost}, so its schema cannot "
            "be trusted; restore the database from a backup (pg_dump / pg_restore)"
        )
    if schema.status == "foreign":
        fix = (
            "Point --home / HERMES_HOME at another folder"
            if on_file
            else "Point --url / HERMES_REPO_URL at an empty database"
        )
        raise SchemaMismatchError(
            f"{where} holds tables but no hermes_repo schema revision; it is not a "
            f"hermes_repo store. {fix}"
        )
    if schema.status == "ahead":
        raise SchemaMismatchError(
            f"{where} is at schema revision {current}, newer than this version of "
            f"hermes_repo knows (head {head}); upgrade the hermes_repo package"
        )
    if not upgrade:
        command = (
            f"`hermes-repo --home {db_path.parent} db upgrade` (it backs up first)"
            if db_path is not None
            # The URL is shown without its password: the caller knows the one they gave.
            else f"`hermes-repo --url URL db upgrade` with the store's URL ({where})"
        )
        raise SchemaMismatchError(
            f"{where} is at schema revision {current}, behind this code (head {head}); "
            f"run {command}"
        )
    return True


def upgrade_server_schema(
    engine: Engine, *, where: str, wait_s: float, upgrade: bool = True
) -> None:
    """Bring a server's database to head under its migration lock, or refuse
    (:func:`must_migrate`): the one server upgrade, run by ``hermes-repo --url URL db
    upgrade`` and by every open of a server store (``upgrade`` as the open was given).
    Another host may be migrating right now, and what an earlier read saw may be its
    half-committed work: the decision is taken again holding the lock, which that host
    holds until its migration committed. A server's backups are its own (``pg_dump``);
    each revision runs in one transaction, so a failing upgrade leaves it as it was."""
    with server.migration_lock(engine, wait_s=wait_s) as conn:
        schema = migrate.schema_status(conn)
        if must_migrate(schema, where=where, db_path=None, upgrade=upgrade):
            migrate.upgrade_in(conn)
