"""``hermes-repo doctor``: report the store's health and what to run to fix it.

The command never opens the store with :meth:`StateStore.open` (an open may rebuild
the search index, which writes): it runs :func:`hermes_repo.ops.doctor.diagnose`, which
reads through its own read-only connection, so it is safe while a gateway runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich import box
from rich.table import Table
from rich.text import Text

from ..ops.doctor import DoctorReport, diagnose
from ._output import echo_json, stdout_console

if TYPE_CHECKING:
    from . import CliState

__all__ = ["doctor_command"]

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_obj
def doctor_command(state: CliState, as_json: bool) -> None:
    """Check the store without writing to it; exit 1 when something needs fixing.

    Reports the file and WAL sizes, the SQLite in use (and whether it has the WAL-reset
    fix), the schema revision against this code, the canonical row counts, and the
    full-text search state: the fts_stale marker, the six sync triggers and each
    index's integrity. Every finding comes with the exact command that fixes it. Safe
    to run while other processes use the store.

    \b
    Example:
      hermes-repo doctor
      hermes-repo --home ~/.hermes doctor --json
    """
    report = diagnose(state.home)
    if as_json:
        echo_json(report.to_dict())
    else:
        _print_report(report)
    if not report.healthy:
        raise click.exceptions.Exit(1)


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
    if report.healthy:
        console.print(Text("healthy: nothing to fix", style="green"))
        return
    console.print(Text(f"{len(report.findings)} finding(s):", style="bold"))
    for finding in report.findings:
        line = Text("  ")
        line.append(finding.severity, style=_SEVERITY_STYLE.get(finding.severity, ""))
        line.append(f" [{finding.code}] {finding.summary}")
        # soft_wrap: a command people copy must not get line breaks inserted into it.
        console.print(line, soft_wrap=True)
        console.print(Text(f"    fix: {finding.fix}"), soft_wrap=True)
