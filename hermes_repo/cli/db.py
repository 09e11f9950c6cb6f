"""``hermes-repo db``: schema migrations (upgrade, current revision, drift check).

These commands build their own engine with :func:`create_store_engine` instead of
:meth:`StateStore.open`: the store refuses to open a file behind head, and that is exactly
the file ``db upgrade`` exists to fix.
"""

from __future__ import annotations

import contextlib
import io
import shlex
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from .. import walcheck
from ..engine import Driver, create_store_engine, engine_driver
from ..errors import translate
from ..ops.replace import replace_store
from ..ops.snapshots import SnapshotVerifyError, snapshot_before
from ..schema import migrate
from ..schema.backup import timestamped_backup
from ._options import json_option
from ._output import CliError, echo_json

if TYPE_CHECKING:
    from . import CliState

__all__ = ["db"]


@dataclass(frozen=True)
class _Revision:
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
def _engine(db_path: Path, *, report_only: bool = False) -> Iterator[Engine]:
    walcheck.preserve_damaged_wal(db_path)  # before SQLite can discard its frames
    # report_only: the journal mode is the file's, and a report must show it as found,
    # not switch it to this process's choice first.
    engine = create_store_engine(
        db_path, journal_switch=(lambda: contextlib.nullcontext(False)) if report_only else None
    )
    try:
        yield engine
    finally:
        engine.dispose()


def _revision(engine: Engine, db_path: Path) -> _Revision:
    try:
        with engine.connect() as conn:
            schema = migrate.schema_status(conn)
    except DBAPIError as exc:
        raise translate(exc, action=f"reading the schema revision of {db_path}") from exc
    return _Revision(db_path, schema.revision, schema.head, schema.status, schema)


def _refuse_unless_ours(rev: _Revision) -> None:
    """Stop on files no migration of this code may touch."""
    if rev.status == "ahead":
        raise CliError(
            f"{rev.path} is at schema revision {rev.revision}, newer than this hermes_repo "
            f"knows (head {rev.head}); upgrade the hermes_repo package, never downgrade the file"
        )
    if rev.status in ("damaged", "unversioned") and rev.schema is not None:
        raise CliError(migrate.damaged_schema_fix(rev.path, rev.schema))
    if rev.status == "foreign":
        raise CliError(
            f"{rev.path} holds tables but no hermes_repo schema revision, so it is not a "
            "hermes_repo store; point --home / HERMES_HOME at another folder"
        )


def _driver_line(driver: Driver, journal_mode: str) -> str:
    fix = "yes" if driver.has_wal_reset_fix else "no"
    return (
        f"SQLite {driver.sqlite_version} via {driver.name} "
        f"(WAL-reset fix: {fix}), journal_mode {journal_mode}"
    )


@click.group("db")
def db() -> None:
    """Schema migrations (upgrade, revision, drift check) and installing a recovered file.

    The schema of state.db is built and changed only by the migrations shipped inside
    the package (Alembic); no ini file or source checkout is needed.

    \b
    Example:
      hermes-repo db upgrade && hermes-repo db check
    """


@db.command("upgrade")
@click.pass_obj
def upgrade(state: CliState) -> None:
    """Bring state.db to the newest schema, taking a snapshot first.

    A missing or empty file is created at head; a store already at head is left as it
    is (no snapshot). A store behind head is first copied into a verified snapshot
    (label pre-upgrade, listed by `snapshot list`; safe while agents write to the
    store) and its id is printed. If the file
    fails integrity_check no snapshot can be verified, so an online backup
    (state.db.pre-upgrade-<UTC time>.bak, SQLite's backup API) is taken instead and its
    path printed. Then every pending migration runs in one transaction, so a failure
    leaves the file as it was. A file newer than this code, or one that is not a
    hermes_repo store, is refused.

    \b
    Example:
      hermes-repo --home ~/.hermes db upgrade
    """
    path = state.db_path
    with _engine(path) as engine:
        rev = _revision(engine, path)
        _refuse_unless_ours(rev)
        if rev.status == "at-head":
            # Nothing will change: a snapshot here would only push older automatic
            # snapshots out of their retention.
            click.echo(f"{path} is already at head {rev.head}; nothing to migrate")
            return
        if rev.status != "empty":
            _restore_point(engine, path, rev)
        migrate.upgrade(engine)
        after = _revision(engine, path)
    click.echo(f"upgraded {path}: {rev.revision or 'empty'} -> {after.revision}")


def _restore_point(engine: Engine, path: Path, rev: _Revision) -> None:
    """A snapshot of the store before it is migrated; a raw backup when none can be made.

    Other snapshot failures (no space, another snapshot running) stop the upgrade: it
    must not go on without a way back.
    """
    try:
        snap = snapshot_before(path.parent, "pre-upgrade")
    except SnapshotVerifyError as exc:
        # A damaged store gets no verified snapshot; the migration may still be what
        # the operator needs, so the old restore point is kept for it.
        click.echo(f"no snapshot: {' '.join(str(exc).split())}")
        snap = None
    if snap is None:
        click.echo(f"backup: {timestamped_backup(engine, path, 'pre-upgrade')}")
        return
    restore = f"hermes-repo --home {shlex.quote(str(path.parent))} snapshot restore {snap.id}"
    # Restore accepts only a snapshot at the running code's head: one taken behind head
    # is restored by the hermes_repo version that wrote it.
    by = (
        "" if rev.status == "at-head" else f", run by the hermes_repo whose head is {snap.revision}"
    )
    click.echo(
        f"snapshot: {snap.id} (label pre-upgrade, revision {snap.revision}); undo with "
        f"`{restore}`{by}"
    )


@db.command("current")
@json_option()
@click.pass_obj
def current(state: CliState, as_json: bool) -> None:
    """Show the schema revision of state.db, the head of this code, and the SQLite used.

    Status is one of: at-head, behind (run `db upgrade`), ahead (upgrade the package),
    empty, missing (no file yet; nothing is created), foreign (not a hermes_repo store).

    \b
    Example:
      hermes-repo db current --json
    """
    path = state.db_path
    if not path.exists():
        rev = _Revision(path, None, migrate.head_revision(), "missing")
        driver_info: dict[str, Any] = {}
    else:
        with _engine(path, report_only=True) as engine:
            rev = _revision(engine, path)
            driver = engine_driver(engine)
            with engine.connect() as conn:
                mode = str(conn.exec_driver_sql("PRAGMA journal_mode").scalar_one()).lower()
        driver_info = {
            "driver": driver.name,
            "sqlite_version": driver.sqlite_version,
            "sqlite_has_wal_fix": driver.has_wal_reset_fix,
            "journal_mode": mode,
        }
    if as_json:
        echo_json({**rev.as_dict(), **driver_info})
        return
    click.echo(f"path:     {rev.path}")
    click.echo(f"revision: {rev.revision or '-'}")
    click.echo(f"head:     {rev.head}")
    click.echo(f"status:   {rev.status}")
    if driver_info:
        click.echo(f"sqlite:   {_driver_line(driver, driver_info['journal_mode'])}")


@db.command("check")
@click.pass_obj
def check(state: CliState) -> None:
    """Verify that state.db is at head and its schema has no drift from the models.

    Exit 0 when the schema matches; exit 1 with the cause otherwise (behind head, ahead,
    missing, or drift, which is printed first on stdout as Alembic describes it).

    \b
    Example:
      hermes-repo db check || hermes-repo db upgrade
    """
    path = state.db_path
    if not path.exists():
        raise CliError(f"no store at {path}; create it with `hermes-repo db upgrade`")
    with _engine(path) as engine:
        rev = _revision(engine, path)
        _refuse_unless_ours(rev)
        if rev.status == "empty":
            raise CliError(f"{path} holds no schema; create it with `hermes-repo db upgrade`")
        if rev.status == "behind":
            raise CliError(
                f"{path} is at schema revision {rev.revision}, behind head {rev.head}; "
                "run `hermes-repo db upgrade` (it backs up first)"
            )
        # Alembic prints "No new upgrade operations detected." itself; the verdict below
        # says the same in the command's own words.
        with contextlib.redirect_stdout(io.StringIO()):
            drift = migrate.check(engine)
    if drift is not None:
        click.echo(drift)
        raise CliError(
            f"the schema of {path} differs from the models (drift printed above); "
            "restore a backup or recover the store into a new file with the migrations"
        )
    click.echo(f"{path}: schema at head {rev.head}, no drift")


@db.command("replace")
@click.argument("new_db", metavar="NEW.db", type=click.Path(dir_okay=False, path_type=Path))
@json_option()
@click.pass_obj
def replace(state: CliState, new_db: Path, as_json: bool) -> None:
    """Install NEW.db (e.g. the output of `sessions recover`) as the store, safely.

    Stop every process using the store first: the command refuses while any process
    has it open and names the pids. NEW.db is copied beside the store with SQLite's
    backup API (NEW.db itself is left as it is) and the copy must pass integrity_check
    and be at schema head. Then the old state.db is moved aside together with its
    -wal, -shm and -journal, as state.db.replaced-<UTC time> plus the same suffixes
    (kept, 0600; `sessions recover --source` still reads them as one database), the
    copy takes its place, and the store is opened to verify it. Never copy a file over
    state.db by hand: SQLite would replay the old -wal into it.

    \b
    Example:
      hermes-repo sessions recover --source ~/.hermes/state.db --output ~/.hermes/recovered/state.db
      hermes-repo --home ~/.hermes db replace ~/.hermes/recovered/state.db
    """
    result = replace_store(state.db_path.parent, new_db)
    if as_json:
        echo_json(result.as_dict())
        return
    click.echo(
        f"installed {result.new} as {result.path} (integrity_check {result.integrity}, "
        f"revision {result.revision}; {result.counts.get('sessions', 0)} sessions, "
        f"{result.counts.get('messages', 0)} messages)"
    )
    if result.aside:
        click.echo(f"the old files are kept aside: {', '.join(result.aside)}")
