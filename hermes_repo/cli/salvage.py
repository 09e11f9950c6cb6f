"""``hermes-repo sessions salvage``: salvage a damaged state.db into a new store.

(``sessions recover`` is its deprecated name, a hidden alias for one release.)

The command never writes to (or beside) the source: both modes read a private byte copy
(see :mod:`hermes_repo.salvage`). ``--inspect-only`` reports what is readable;
``--output NEW.db`` builds a fresh store there with the migrations and fills it.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..engine import DB_NAME
from ._lazy import deprecated_alias
from ._output import CliError, Text, echo_json, stderr_console, stdout_console

if TYPE_CHECKING:
    from ..salvage import ProgressEvent, SalvageInspection, SalvageResult, TableReport
    from . import CliState

__all__ = ["recover_alias", "salvage_command"]

_PHASES = {
    "copy": "copying the source",
    "read": "reading rows (SQL)",
    "scan": "scanning pages",
    "write": "writing rows",
    "index": "rebuilding search",
    "verify": "checking the new store",
}


class _Bar:
    """A rich progress bar on stderr that follows the salvage's phases."""

    def __init__(self) -> None:
        console = stderr_console()
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            console=console,
            # Only for a person at a terminal: in a pipe or a log it would be noise.
            disable=not console.is_terminal,
            transient=True,
        )
        self.task = self.progress.add_task("starting", total=None)
        self.phase = ""

    def __call__(self, event: ProgressEvent) -> None:
        if event.phase != self.phase:
            self.phase = event.phase
            self.progress.reset(self.task, description=_PHASES.get(event.phase, event.phase))
        self.progress.update(self.task, completed=event.done, total=event.total)

    def __enter__(self) -> _Bar:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


@click.command("salvage")
@click.option(
    "--source",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    metavar="DB",
    help="The damaged state.db (its -wal beside it is read too). Never written to.",
)
@click.option("--inspect-only", is_flag=True, help="Report what is recoverable; write nothing.")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="NEW.db",
    help="Build a new store here from the readable rows (the path must not exist).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Where the private copy of the source goes. [default: beside NEW.db, or the "
    "system temporary folder with --inspect-only]",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_obj
def salvage_command(
    state: CliState,
    source: Path,
    inspect_only: bool,
    output: Path | None,
    workdir: Path | None,
    as_json: bool,
) -> None:
    """Salvage sessions and messages from a damaged state.db.

    The source is copied byte for byte to a private folder and only the copy is read:
    first through SQLite, resuming past damaged pages, then, where SQLite cannot read,
    by decoding the database pages directly (the -wal's newest pages win). With
    --output the rows go into a new store built by the migrations, messages keep their
    ids and uids, messages whose session row was lost get a placeholder session
    (source 'recovered'), and the search indexes are rebuilt. Counts before and after
    are printed. LangGraph threads' checkpoints, channel values and pending writes are
    salvaged the same way: the rows read go in as they were, and the ones that could
    not be read are counted, never rebuilt.

    \b
    Example:
      hermes-repo sessions salvage --source ~/.hermes/state.db --inspect-only
      hermes-repo sessions salvage --source ~/.hermes/state.db --output ~/recovered/state.db
    """
    from ..maintenance.sqlite_only import refuse_on_server
    from ..salvage import inspect, salvage

    # A damaged file is salvaged into a file: with a PostgreSQL store chosen, that is
    # not the store's recovery (the server's backups are), so it is refused by name.
    refuse_on_server("sessions salvage", "salvage", state.url)
    if inspect_only == (output is not None):
        raise click.UsageError("give exactly one of --inspect-only and --output NEW.db")
    if output is None:
        with _Bar() as bar:
            report = inspect(source, progress=bar, workdir=workdir)
        if as_json:
            echo_json(report.as_dict())
        else:
            _print_inspection(stdout_console(), report)
        return
    with _cleanup_on_signals(output), _Bar() as bar:
        result = salvage(source, output, progress=bar, workdir=workdir)
    if as_json:
        echo_json(result.as_dict())
    else:
        _print_result(stdout_console(), result)


@contextlib.contextmanager
def _cleanup_on_signals(output: Path) -> Iterator[None]:
    """Turn SIGTERM, SIGHUP (a dropped ssh session) and SIGINT into an exception.

    The default action of SIGTERM and SIGHUP ends the process without running any
    cleanup, leaving a half-built output and a copy of every conversation behind. As an
    exception they unwind through :func:`~hermes_repo.salvage.salvage`, which removes
    both; the command then exits with 128 + the signal number, as a killed process would.
    """
    from ..salvage import SalvageError

    class SalvageInterrupted(SalvageError):
        """A signal stopped the salvage; its partial output and private copy were removed."""

    caught: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        if caught:
            return  # already unwinding: a second signal must not cut the cleanup short
        caught.append(signum)
        raise SalvageInterrupted(
            f"interrupted by {signal.Signals(signum).name}; nothing was written to "
            f"{output} and the scratch copy was removed: run the same command again"
        )

    wanted = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {sig: signal.signal(sig, stop) for sig in wanted}
    try:
        yield
    except SalvageInterrupted as exc:
        CliError(str(exc)).show()
        raise click.exceptions.Exit(128 + caught[0]) from exc
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _ranges(ids: list[int]) -> str:
    """``[1, 2, 3, 7, 9, 10]`` as ``1-3, 7, 9-10``: lost ids usually come a page at a time."""
    spans: list[list[int]] = []
    for i in sorted(ids):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def _missing_text(report: TableReport) -> str:
    if report.known_missing is None:
        return "-"
    if not report.known_missing:
        return "0"
    more = ", ..." if report.known_missing > len(report.missing_sample) else ""
    return f"{report.known_missing} (ids {_ranges(report.missing_sample)}{more})"


def _number(value: int | None) -> str:
    return "?" if value is None else str(value)


def _print_source(console: Console, report: SalvageInspection) -> None:
    wal = report.wal
    wal_text = (
        f"{wal.committed_frames} committed frames ({wal.pages} pages used)"
        if wal.present and not wal.ignored
        else f"ignored: {wal.ignored}"
        if wal.ignored
        else "none"
    )
    console.print(Text.assemble(("source: ", "bold"), report.source))
    console.print(
        Text(
            f"header {report.header}; {report.pages} pages of {report.page_size} bytes; "
            f"WAL {wal_text}"
        )
    )
    if report.sql_error:
        console.print(Text(f"SQLite cannot open the file: {report.sql_error}", style="yellow"))
    if report.scanner_used and report.scan is not None:
        scan = report.scan
        broken = ", ".join(f"{name} page {pgno}" for name, pgno, _ in scan.broken_pages[:6])
        console.print(
            Text(
                f"page scanner: {scan.leaves_decoded} leaves decoded, {scan.orphan_leaves} "
                f"orphan leaves, {scan.bad_cells} unreadable cells"
                + (f"; unreadable pages: {broken}" if broken else "")
            )
        )


def _tables(report: SalvageInspection, after: dict[str, int] | None) -> Table:
    table = Table(box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("table", no_wrap=True)
    table.add_column("source claims", justify="right")
    table.add_column("read by SQL", justify="right")
    table.add_column("scanner only", justify="right")
    table.add_column("recoverable", justify="right")
    if after is not None:
        table.add_column("written", justify="right")
    table.add_column("known missing", overflow="fold")
    for name, t in report.tables.items():
        row: list[Any] = [
            name,
            _number(t.claimed),
            str(t.sql_rows),
            "-" if t.scan_rows is None else str(t.scan_only),
            str(t.recoverable),
        ]
        if after is not None:
            row.append(str(after.get(name, 0)))
        row.append(_missing_text(t))
        table.add_row(*row)
    return table


def _print_notes(console: Console, report: SalvageInspection) -> None:
    lost = report.tables["messages"].missing_by_session if "messages" in report.tables else {}
    if lost:
        top = ", ".join(f"{sid} ({n})" for sid, n in list(lost.items())[:5])
        more = f" and {len(lost) - 5} more" if len(lost) > 5 else ""
        console.print(Text(f"sessions with unreadable messages: {top}{more}"))
    lost_checkpoints = {
        name: t.claimed - t.recoverable
        for name, t in report.tables.items()
        if name.startswith("langgraph_") and t.claimed is not None and t.recoverable < t.claimed
    }
    if lost_checkpoints:
        parts = ", ".join(f"{n} of {name}" for name, n in lost_checkpoints.items())
        console.print(
            Text(
                f"LangGraph checkpoint rows unreadable (not recovered): {parts}; a thread "
                "that lost its newest checkpoint resumes from the newest one kept"
            )
        )
    if report.unassigned:
        parts = ", ".join(f"{n} like {k}" for k, n in sorted(report.unassigned.items()))
        console.print(Text(f"rows that fit no session table (not recovered): {parts}"))
    for note in report.notes:
        console.print(Text(f"note: {note}", style="yellow"))


def _print_inspection(console: Console, report: SalvageInspection) -> None:
    _print_source(console, report)
    console.print(_tables(report, None))
    _print_notes(console, report)
    verdict = (
        "every row the source lists is readable"
        if report.complete
        else "some rows are unreadable (see known missing)"
    )
    console.print(Text(f"{verdict}; nothing was written", style="bold"))


def _print_result(console: Console, result: SalvageResult) -> None:
    _print_source(console, result.before)
    console.print(_tables(result.before, result.after))
    _print_notes(console, result.before)
    if result.placeholders:
        shown = ", ".join(result.placeholders[:5])
        more = ", ..." if len(result.placeholders) > 5 else ""
        console.print(
            Text(
                f"{len(result.placeholders)} placeholder session(s) for messages whose "
                f"session row was lost (source 'recovered'): {shown}{more}"
            )
        )
    if result.rejected:
        console.print(
            Text(f"{result.rejected} row(s) refused by the new store's constraints", "yellow")
        )
    if result.counters_fixed:
        console.print(
            Text(f"{result.counters_fixed} session counter(s) set to the salvaged messages")
        )
    output = Path(result.output)
    home = Path(result.before.source).parent
    console.print(
        Text(
            f"wrote {output} (integrity_check: {result.integrity}) in {result.seconds:.1f} s",
            style="bold",
        )
    )
    if output.name == DB_NAME:
        console.print(Text(f"look inside: hermes-repo --home {output.parent} sessions list"))
    # Never a hand copy over state.db: SQLite would replay the old -wal into the new file.
    replace = f"hermes-repo --home {shlex.quote(str(home))} db replace {shlex.quote(str(output))}"
    console.print(Text(f"to put it in place of the old store (stopped first): {replace}"))


#: ``sessions recover``, the name ``sessions salvage`` had (hidden, warns).
recover_alias = deprecated_alias(salvage_command, "sessions recover", "sessions salvage")
