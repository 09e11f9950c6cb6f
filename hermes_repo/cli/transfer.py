"""``hermes-repo import`` and ``hermes-repo sessions export``: transcripts in and out.

The work is the library's (:mod:`hermes_repo.transfer` for JSON Lines and the export,
:mod:`hermes_repo.hermes_import` for a Hermes Agent state.db); these commands parse,
draw the progress bar on a terminal, and print the summary.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, cast

import click
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from ..homes import store_kind
from ._options import json_option
from ._output import CliError, echo, echo_json, json_for_terminal, stderr_console

if TYPE_CHECKING:
    from ..hermes_import import HermesImportReport
    from ..store import StateStore
    from ..transfer import ImportReport
    from ..transfer.export import ExportFormat, SessionExport
    from ._state import CliState

__all__ = ["export_command", "import_command"]

# :data:`hermes_repo.transfer.EXPORT_FORMATS`, restated so `sessions export --help` loads
# no library module (a test checks the two are equal).
EXPORT_FORMATS = ("jsonl", "markdown")


def _progress() -> Progress:
    console = stderr_console()
    return Progress(
        TextColumn("[bold]importing"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[sessions]} sessions, {task.fields[messages]} messages"),
        TimeElapsedColumn(),
        console=console,
        # Only for a person at a terminal: in a pipe or a log the bar would be noise
        # around the one error line a script looks for.
        disable=not console.is_terminal,
        transient=True,
    )


def run_import(state: CliState, path: Path) -> ImportReport:
    """Import the JSON Lines file ``path`` with a progress bar on a terminal's stderr."""
    from ..transfer import import_jsonl

    store = state.store
    with _progress() as progress:
        task = progress.add_task("import", total=None, sessions=0, messages=0)

        def advance(done: int, total: int, report: ImportReport) -> None:
            progress.update(
                task,
                completed=done,
                total=total,
                sessions=report.sessions,
                messages=report.messages_inserted,
            )

        return import_jsonl(store, path, progress=advance)


def _hermes_progress() -> Progress:
    console = stderr_console()
    return Progress(
        TextColumn("[bold]importing Hermes state.db"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.completed}/{task.total} messages"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,  # see _progress
        transient=True,
    )


def run_hermes_import(state: CliState, path: Path, *, dry_run: bool) -> HermesImportReport:
    """Import a Hermes Agent state.db with a progress bar on a terminal's stderr.

    A dry run writes nothing, a store included: when there is none yet, it runs against
    a scratch store built in a temporary folder (everything would be new) and removed.
    """
    if dry_run and state.server is None and store_kind(state.db_path) == "none":
        from ..engine_pg import SQLITE_FILE
        from ..store import StateStore

        with (
            tempfile.TemporaryDirectory(prefix="hermes-repo-dry-run-") as scratch,
            StateStore.open(scratch, url=SQLITE_FILE, replay=False) as store,
        ):
            return _hermes_import_into(store, path, dry_run=True)
    return _hermes_import_into(state.store, path, dry_run=dry_run)


def _hermes_import_into(store: StateStore, path: Path, *, dry_run: bool) -> HermesImportReport:
    with _hermes_progress() as progress:
        task = progress.add_task("import", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return store.import_hermes_db(path, dry_run=dry_run, progress=advance)


def _hermes_summary(report: HermesImportReport) -> str:
    s, m = report.sessions, report.messages
    verb = "would import" if report.dry_run else "imported"
    lines = [
        f"{verb} {report.source} (Hermes schema {report.schema_version}): "
        f"sessions {s.imported} new, {s.already_present} already present; "
        f"messages {m.imported} new, {m.already_present} already present"
        f"{f' ({m.updated} with a new active state)' if m.updated else ''} "
        f"({s.kept_in_extra + m.kept_in_extra} value(s) kept in extra)"
    ]
    if m.edited or m.archived:
        lines.append(
            f"  following the source: {m.edited} message(s) edited in place (the previous "
            f"text kept as an archived row), {m.archived} message(s) Hermes deleted or "
            "rewrote archived"
        )
    for hermes_id, sid in report.mapped_sessions.items():
        lines.append(f"  session {hermes_id!r} stored as {sid}")
    for name, counts in report.tables.items():
        if name not in ("sessions", "messages"):
            lines.append(f"  {name}: {counts.read} row(s) kept in extra")
    lines.extend(f"warning: {w}" for w in report.warnings)
    return "\n".join(lines)


def _looks_like_jsonl(path: Path) -> bool:
    """Whether ``path`` starts like JSON Lines: text whose first non-blank character
    opens an object. Only for guessing the format: the import checks every line."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return True  # the import names the read error itself
    stripped = head.lstrip(b" \t\r\n\xef\xbb\xbf")
    return b"\x00" not in head and stripped.startswith(b"{")


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "hermes-db"]),
    default=None,
    help="Force the format (default: an SQLite file is a Hermes state.db, else JSON Lines).",
)
@click.option("--dry-run", is_flag=True, help="Hermes state.db: read and check all, write nothing.")
@json_option("Print the summary as JSON.")
@click.pass_obj
def import_command(
    state: CliState, file: Path, fmt: str | None, dry_run: bool, as_json: bool
) -> None:
    """Import sessions and messages from a Hermes Agent state.db or a JSON Lines FILE.

    A file that starts with SQLite's header is read as a Hermes Agent state.db (any
    schema version): opened read-only and immutable (never written, no -wal or -shm
    left beside it; a -wal or hot -journal is honoured through a private copy), every
    value kept (what has no column goes to the row's extra), every session landing (an
    id this store does not take is mapped, the original kept and shown). Re-running
    adds what is new and follows what Hermes rewrote since (deleted rows archived,
    edited rows updated with the previous version kept), so a later copy of the same
    Hermes home, or an interrupted import, is finished by the same command. An empty
    file, or one that is neither SQLite nor JSON Lines, is refused.

    \b
    JSON Lines format (one JSON object a line; blank lines are ignored):
      {"session": {"id": "s1", "source": "cli", "title": "..."}}
      {"session_id": "s1", "message": {"role": "user", "content": "hi", "uid": "m1"}}
    A message line follows its session's line. Session keys: id (required), source,
    user_id, model, title, parent_session_id, started_at, ended_at, end_reason.

    Each session is imported in its own unit of work. On a bad line (invalid JSON, a bad
    role, an unknown session, a value that can never be stored such as a timestamp in
    milliseconds...) the import stops with `error: FILE:LINE: <cause>`:
    the sessions before that line stay imported and the session the line belongs to is
    not imported at all. Re-running the same file adds nothing twice: existing sessions
    are reused and messages whose uid is already stored are skipped.

    \b
    Example:
      hermes-repo import ~/.hermes/state.db --dry-run
      hermes-repo import samples/sample_sessions.jsonl
    """
    # The importer of Hermes' state.db is loaded by this command alone.
    from ..hermes_import import is_sqlite_file

    if fmt is None:
        if file.stat().st_size == 0:
            # Neither format: "imported 0 sessions" would hide a copy that went wrong.
            raise CliError(
                f"{file} is empty: nothing to import; pass a Hermes Agent state.db or a "
                "JSON Lines file (a state.db copied while Hermes was writing may need "
                "copying again)"
            )
        fmt = "hermes-db" if is_sqlite_file(file) else "jsonl"
        if fmt == "jsonl" and not _looks_like_jsonl(file):
            raise CliError(
                f"{file} is neither a Hermes Agent state.db (it does not start with "
                "SQLite's header) nor JSON Lines (it does not start with a JSON object); "
                "pass the state.db of a Hermes home, or a JSON Lines file"
            )
    if fmt == "hermes-db":
        hermes = run_hermes_import(state, file, dry_run=dry_run)
        if as_json:
            echo_json(hermes.as_dict())
        else:
            echo(_hermes_summary(hermes))
        return
    if dry_run:
        raise CliError(
            f"--dry-run is for a Hermes state.db and {file} is read as JSON Lines; "
            "leave out --dry-run (a JSON Lines re-import adds nothing twice)"
        )
    report = run_import(state, file)
    if as_json:
        echo_json(report.as_dict())
        return
    echo(
        f"imported {file}: {report.sessions} session(s) "
        f"({report.sessions_created} new, {report.sessions_reused} existing), "
        f"{report.messages_inserted} message(s) added, "
        f"{report.messages_skipped} already stored"
    )


@click.command("export")
@click.argument("session_id", metavar="SID")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(EXPORT_FORMATS),
    default="jsonl",
    show_default=True,
    help="jsonl: one message dict a line; markdown: a readable transcript.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help=(
        "Write to this file (mode 0600, replaced only once complete) instead of stdout; "
        "never an existing SQLite database or one of the store's files."
    ),
)
@click.pass_obj
def export_command(state: CliState, session_id: str, fmt: str, output: Path | None) -> None:
    """Export one session's transcript as JSONL or Markdown.

    The export is the replay: active messages in order (archived audit rows are left
    out; see them with `sessions show --include-inactive`). JSONL has one message a
    line, exactly as `StateStore.load_conversation` returns it (uid and timestamp
    included). Markdown has a heading per message with its role and time, tool output
    and tool-call arguments in code blocks, images as links.

    \b
    Example:
      hermes-repo sessions export SID --format markdown -o transcript.md
    """
    from ..transfer.export import write_export
    from ..transfer.targets import refuse_store_targets

    def read_opened(store: StateStore) -> SessionExport:
        # Only when the store's open is needed: the repositories cost a quick read its
        # budget.
        from ..transfer.export_read import read_export

        return read_export(store, session_id, fmt)

    home = state.db_path.parent
    if output is not None:
        # Before the store is opened: a refused target must not cost an open (or
        # create a store where none was).
        refuse_store_targets(output, home)
    export = state.read(
        lambda quick: quick.read_export(session_id, cast("ExportFormat", fmt)),
        read_opened,
    )
    if output is None:
        for chunk in export.chunks():
            # JSONL to a terminal: C1 and bidi controls as \u escapes, the same JSON;
            # Markdown is escaped already (a file written with -o is left exact).
            sys.stdout.write(json_for_terminal(chunk))
        return
    write_export(export, output, home=home)
    echo(f"exported {len(export.messages)} message(s) of {session_id} to {output}", err=True)
