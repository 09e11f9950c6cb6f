"""``hermes-repo db``: schema migrations (upgrade, current revision, drift check).

The work is :func:`hermes_repo.maintenance.upgrade.upgrade`, the upgrade
``StateStore.open(upgrade=True)`` runs too (here on an engine of its own instead of
:meth:`StateStore.open`: the store refuses to open a file behind head, and that is
exactly the file ``db upgrade`` exists to fix), and :mod:`hermes_repo.ops.replace`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..engine import Driver
from ..errors import HermesRepoError
from ._numbers import COPY_BATCH_SIZE, MAX_COPY_BATCH_SIZE
from ._options import json_option
from ._output import CliError, echo, echo_json, stderr_console

if TYPE_CHECKING:
    from ..maintenance.upgrade import RestorePoint
    from ..store import StateStore
    from ..transfer.copy_target import CopyTarget
    from ._state import CliState

__all__ = ["db"]


def _driver_line(driver: Driver, journal_mode: str) -> str:
    fix = "yes" if driver.has_wal_reset_fix else "no"
    return (
        f"SQLite {driver.sqlite_version} via {driver.name} "
        f"(WAL-reset fix: {fix}), journal_mode {journal_mode}"
    )


@click.group("db")
def db() -> None:
    """Schema migrations (upgrade, revision, drift check), installing a recovered file,
    and copying the store to PostgreSQL or another SQLite file.

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
      hermes-repo --home ~/.hermes/hermes-repo db upgrade
    """
    from ..maintenance.upgrade import schema_engine, upgrade
    from ..ops.server_schema import upgrade_server

    server = state.server
    if server is not None:
        was, now = upgrade_server(server)
        if was.status == "at-head":
            echo(f"{was.location} is already at head {was.head}; nothing to migrate")
        else:
            echo(f"upgraded {was.location}: {was.revision or 'empty'} -> {now.revision}")
        return
    path = state.db_path
    with schema_engine(path) as engine:
        # The library's upgrade (the one StateStore.open(upgrade=True) runs): the restore
        # point is printed as soon as it exists, before the migrations run.
        done = upgrade(
            engine,
            path,
            unverified=lambda why: echo(f"no snapshot: {why}"),
            protected=lambda point: _say_restore_point(path, point),
        )
    if not done.migrated:
        echo(f"{path} is already at head {done.before.head}; nothing to migrate")
        return
    echo(f"upgraded {path}: {done.before.revision or 'empty'} -> {done.after.revision}")


def _say_restore_point(path: Path, point: RestorePoint) -> None:
    """Say what the restore point taken before a migration is, and how to undo."""
    snap = point.snapshot
    if snap is None:
        echo(f"backup: {point.backup}")
        return
    restore = f"hermes-repo --home {shlex.quote(str(path.parent))} snapshot restore {snap.id}"
    # Restore accepts only a snapshot at the running code's head: one taken behind head
    # is restored by the hermes_repo version that wrote it.
    echo(
        f"snapshot: {snap.id} (label pre-upgrade, revision {snap.revision}); undo with "
        f"`{restore}`, run by the hermes_repo whose head is {snap.revision}"
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
    from ..maintenance.upgrade import describe_revision
    from ..ops.server_schema import server_revision
    from ..provenance import peek_file_identity

    server = state.server
    if server is not None:
        at = server_revision(server)
        if as_json:
            echo_json(at.as_dict())
            return
        for name, value in at.as_dict().items():
            echo(f"{name + ':':<9} {value or '-'}")
        return
    found = describe_revision(state.db_path)
    # Read-only, never waiting: None for a file without one yet (or unreadable).
    store_id = peek_file_identity(state.db_path).store_id
    if as_json:
        echo_json({**found.as_dict(), "store_id": store_id})
        return
    rev = found.revision
    echo(f"path:     {rev.path}")
    echo(f"revision: {rev.revision or '-'}")
    echo(f"head:     {rev.head}")
    echo(f"status:   {rev.status}")
    echo(f"store id: {store_id or '-'}")
    if found.driver is not None and found.journal_mode is not None:
        echo(f"sqlite:   {_driver_line(found.driver, found.journal_mode)}")


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
    from ..maintenance.upgrade import check_schema
    from ..ops.server_schema import check_server

    server = state.server
    if server is not None:
        srev, drift = check_server(server)
        if srev.status != "at-head":
            raise CliError(
                f"{srev.location} is {srev.status} (revision {srev.revision or '-'}, head "
                f"{srev.head}); run `hermes-repo --url URL db upgrade`"
            )
        where, head = srev.location, srev.head
        fix = "restore the database from a backup (pg_restore)"
    else:
        rev, drift = check_schema(state.db_path)
        where, head = str(state.db_path), rev.head
        fix = "restore a backup or recover the store into a new file with the migrations"
    if drift is not None:
        echo(drift)
        raise CliError(
            f"the schema of {where} differs from the models (drift printed above); {fix}"
        )
    echo(f"{where}: schema at head {head}, no drift")


@db.command("replace")
@click.argument("new_db", metavar="NEW.db", type=click.Path(dir_okay=False, path_type=Path))
@json_option()
@click.pass_obj
def replace(state: CliState, new_db: Path, as_json: bool) -> None:
    """Install NEW.db (e.g. the output of `sessions salvage`) as the store, safely.

    Stop every process using the store first: the command refuses while any process
    has it open and names the pids. NEW.db is copied beside the store with SQLite's
    backup API (NEW.db itself is left as it is) and the copy must pass integrity_check
    and be at schema head. Then the old state.db is moved aside together with its
    -wal, -shm and -journal, as state.db.replaced-<UTC time> plus the same suffixes
    (kept, 0600; `sessions salvage --source` still reads them as one database), the
    copy takes its place, and the store is opened to verify it. Never copy a file over
    state.db by hand: SQLite would replay the old -wal into it.

    \b
    Example:
      hermes-repo sessions salvage --source ~/.hermes/state.db --output ~/.hermes/recovered/state.db
      hermes-repo --home ~/.hermes/hermes-repo db replace ~/recovered/state.db
    """
    from ..ops.replace import replace_store

    result = replace_store(state.db_path.parent, new_db, url=state.url)
    if as_json:
        echo_json(result.as_dict())
        return
    echo(
        f"installed {result.new} as {result.path} (integrity_check {result.integrity}, "
        f"revision {result.revision}; {result.counts.get('sessions', 0)} sessions, "
        f"{result.counts.get('messages', 0)} messages)"
    )
    if result.aside:
        echo(f"the old files are kept aside: {', '.join(result.aside)}")


class _CopyBar:
    """Rows copied out of the total (messages, then LangGraph checkpoint rows), on a
    terminal's stderr (nothing in a pipe)."""

    def __init__(self) -> None:
        console = stderr_console()
        self.progress = Progress(
            TextColumn("[bold]copying rows"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=not console.is_terminal,
            transient=True,
        )
        self.task = self.progress.add_task("copy", total=None)

    def __call__(self, done: int, total: int) -> None:
        self.progress.update(self.task, completed=done, total=total)

    def __enter__(self) -> _CopyBar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


def _open_copy_target(target: CopyTarget, home: Path | None) -> StateStore:
    """The target store, created at head by the migrations when empty; a store behind
    head is refused by the open (SchemaMismatchError naming `db upgrade`).

    Its pending spool files are its own business: a copy writes copied rows only, so
    nothing is replayed at the open. A server target keeps its local files (the spool)
    in the invocation's home, as any store on a server does."""
    from ..engine_pg import SQLITE_FILE
    from ..store import StateStore

    try:
        if target.home is not None:
            # A file target stays a file whatever HERMES_REPO_URL says.
            return StateStore.open(target.home, url=SQLITE_FILE, replay=False)
        return StateStore.open(home, url=target.url, replay=False)
    except HermesRepoError as exc:
        # Name the target: the error alone does not say which of the two stores failed.
        raise CliError(f"copy target {target.display}: {exc}") from exc


@db.command("copy")
@click.option(
    "--to",
    "to",
    required=True,
    metavar="TARGET",
    help="A postgresql+psycopg:// URL, sqlite:///path/state.db, or a folder for state.db.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, MAX_COPY_BATCH_SIZE),
    default=COPY_BATCH_SIZE,
    show_default=True,
    help="Rows per transaction (memory holds one batch).",
)
@json_option("Print the summary (counts, verified checksums) as JSON.")
@click.pass_obj
def copy(state: CliState, to: str, batch_size: int, as_json: bool) -> None:
    """Copy every session, message, canonical state_meta row and LangGraph checkpoint
    of the store into TARGET.

    The source is the store the global options choose. TARGET is a PostgreSQL URL
    (postgresql+psycopg://user@host:port/database), an SQLite store given as
    sqlite:///path/to/state.db, or a folder that holds or will hold state.db. An empty
    target is created at head by the migrations; one behind head is refused (upgrade it
    first). Every column is copied and message ids are kept (they are the replay
    order); search indexes are built by the target itself. LangGraph threads keep their
    memory: checkpoints, channel values and pending writes go too.

    Rows go in batches, each its own transaction. Running the command again writes
    only what is missing or changed, so a copy that was interrupted (killed, a lost
    connection) is finished by running it again, and a finished one adds nothing. A
    target holding another store's rows is refused before anything is written. At the
    end both stores' counts and checksums are compared; a difference (the source was
    written to during the copy) is an error: stop the writers and run it again. Until
    that check passes the target is marked unfinished (`doctor` on it reports
    copy-unfinished with this command); the target keeps its own store id and lists
    the source's in copied_from.

    A password in the URL is never printed; PGPASSWORD or ~/.pgpass keep it out of the
    shell history too.

    \b
    Example:
      hermes-repo --home ~/.hermes/hermes-repo db copy --to postgresql+psycopg://hermes@db.internal:5432/hermes
      hermes-repo --home ~/.hermes/hermes-repo db copy --to /srv/hermes-copy --json
      hermes-repo --home ~/.hermes/hermes-repo db copy --to sqlite:////srv/hermes-copy/state.db
      hermes-repo --url postgresql+psycopg://hermes@db.internal/hermes db copy --to ~/.hermes-back
    """
    from ..transfer.copy import copy_store
    from ..transfer.copy_target import parse_copy_target

    target = parse_copy_target(to)
    source = state.existing_store
    same_file = (
        source.driver.backend.is_file
        and target.home is not None
        and target.home.resolve() == source.home.resolve()
    )
    if same_file:
        raise CliError(f"{target.display} is the store being copied; give another target")
    with _open_copy_target(target, state.home) as dst, _CopyBar() as bar:
        report = copy_store(source, dst, batch_size=batch_size, progress=bar)
    if as_json:
        echo_json(report.as_dict())
        return
    figures = report.checksums
    echo(f"copied {report.source} -> {report.target} in {report.seconds:.1f} s")
    for name, tally in (
        ("sessions", report.sessions),
        ("messages", report.messages),
        ("state_meta", report.state_meta),
    ):
        echo(
            f"  {name}: {tally.inserted} new, {tally.updated} updated, "
            f"{tally.unchanged} already there"
        )
    for name, tally in report.checkpoints.items():
        if tally.inserted or tally.updated or tally.unchanged:
            echo(
                f"  {name}: {tally.inserted} new, {tally.updated} updated, "
                f"{tally.unchanged} already there"
            )
    echo(
        f"verified: {figures['sessions']['count']} sessions, "
        f"{figures['messages']['count']} messages (max id {figures['messages']['max_id']}), "
        f"{figures['state_meta']['count']} state_meta rows, "
        f"{figures['langgraph_checkpoints']['count']} LangGraph checkpoints on both sides"
    )
