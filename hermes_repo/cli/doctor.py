"""``hermes-repo doctor``: report the store's health and what to run to fix it.

The command never opens the store with :meth:`StateStore.open` (an open may rebuild
the search index, which writes): it runs :func:`hermes_repo.ops.doctor.diagnose`, which
reads through its own read-only connection, so it is safe while a gateway runs.
``--fix`` is the exception: it runs :func:`hermes_repo.ops.repair.repair_store` (the
same repair as ``sessions repair``), which refuses while another process holds the
store, and then diagnoses again.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import click
from rich import box
from rich.table import Table

from ._findings import print_findings, repair_failure_line
from ._output import CliError, Text, echo_json, stdout_console

if TYPE_CHECKING:
    from ..ops.doctor import DoctorReport
    from ..ops.repair import RepairReport
    from . import CliState

__all__ = ["doctor_command"]


@click.command("doctor")
@click.option(
    "--fix",
    is_flag=True,
    help="Repair what can be repaired in place (as `sessions repair` does), then check "
    "again. Refused while another process has the store open.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_obj
def doctor_command(state: CliState, fix: bool, as_json: bool) -> None:
    """Check the store without writing to it; exit 1 when something needs fixing.

    Reports the file header, the file and WAL sizes, the SQLite in use (and whether it
    has the WAL-reset fix), the schema revision against this code, the canonical row
    counts and a read-only quick_check of their tables, the full-text search state (the
    fts_stale marker, the six sync triggers, each index's integrity), this process's
    quarantine, pending, rejected and salvage spool files, snapshots, and the other
    processes holding the store. Every finding comes with the exact command that fixes
    it. Transcripts that break role alternation or tool pairing are a note, not a
    finding ("notes" in --json): a repairing load tidies them as it reads them, so they
    leave the exit code 0. Safe to run while other processes use the store.

    On a PostgreSQL store (--url / HERMES_REPO_URL) the file checks do not apply; it
    reports the connection (server version), the revision and any drift from the
    models, invalid or missing indexes (with the REINDEX command), the pg_trgm and
    unaccent extensions, the row counts and session counters, whether commits wait for
    a synchronous standby (a warning naming synchronous_standby_names and
    synchronous_commit when a failover could lose an acknowledged write; one server
    without a standby is a note), and the spool files in --home. There --fix runs only
    the transcript repair (nothing file-level: no backup, snapshot or index rebuild;
    an invalid index is fixed with the REINDEX it names).

    --fix first refuses, naming the pids, if another process has the store open (stop
    the gateway first); otherwise it runs the repair of `sessions repair` (backup,
    snapshot, index rebuild, transcript repair, verification; a damaged file is left as
    it is for `sessions salvage`) and reports the store's health afterwards.

    \b
    Example:
      hermes-repo doctor
      hermes-repo --home ~/.hermes/hermes-repo doctor --json
      hermes-repo doctor --fix
    """
    # Only what this run needs is imported: the repair (and what it brings) for --fix,
    # the server checks for a server. A plain doctor on a file loads neither.
    # The URL rules load SQLAlchemy: not consulted when no URL was given.
    server = state.server if state.url is not None else None
    repaired: RepairReport | None = None
    if fix:
        from ..ops.repair import RepairStoreHeldError, repair_store

        try:
            repaired = repair_store(state.home, url=state.url)
        except RepairStoreHeldError as exc:
            again = f"hermes-repo --home {shlex.quote(str(state.db_path.parent))} doctor --fix"
            raise CliError(
                f"doctor --fix refused: {exc.holders_text} the store open; nothing was "
                f"changed. Stop every process using the store (e.g. the gateway), then run "
                f"`{again}`"
            ) from exc
    if server is not None:
        from ..ops.doctor.server import diagnose_server

        report = diagnose_server(state.db_path.parent, server)
    else:
        from ..ops.doctor.report import diagnose

        report = diagnose(state.home)
    if as_json:
        payload = report.to_dict()
        if repaired is not None:
            payload = {"repair": repaired.as_dict(), **payload}
        echo_json(payload)
    else:
        if repaired is not None:
            _print_repair_outcome(repaired, notes=server is not None)
        _print_report(report)
    if repaired is not None and not repaired.ok:
        raise CliError(repair_failure_line(repaired))
    if not report.healthy:
        raise click.exceptions.Exit(1)


def _print_repair_outcome(repaired: RepairReport, *, notes: bool = False) -> None:
    console = stdout_console()
    if notes:  # on a server: what --fix did not do, and why
        for note in repaired.notes:
            console.print(Text(f"note: {note}"), soft_wrap=True)
    if repaired.backup is not None:
        console.print(Text(f"repair backup: {repaired.backup}"), soft_wrap=True)
    if repaired.snapshot is not None:
        console.print(Text(f"repair snapshot: {repaired.snapshot} (label pre-repair)"))
    verdict = "repaired and verified" if repaired.ok else "repair did not fix the store"
    console.print(Text(f"{verdict}: {repaired.summary}"), soft_wrap=True)
    console.print(Text("health after the repair:", style="bold"))


def _print_report(report: DoctorReport) -> None:
    console = stdout_console()
    for section in report.sections.values():
        table = Table(
            title=Text(section.title), title_justify="left", box=box.SIMPLE, show_header=False
        )
        table.add_column("what", no_wrap=True, style="cyan")
        table.add_column("value", overflow="fold", ratio=1)
        for label, value in section.rows():
            table.add_row(Text(label), Text(value))
        console.print(table)
    # Notes need nothing done (transcripts a repairing load tidies as it reads them):
    # printed apart from the findings, so the output agrees with the exit code.
    for note in report.notes:
        console.print(Text(f"note: {note}"), soft_wrap=True)
    if report.healthy:
        console.print(Text("healthy: nothing to fix", style="green"))
        return
    console.print(Text(f"{len(report.findings)} finding(s):", style="bold"))
    print_findings(console, report.findings)
