"""``hermes-repo pending``: transcripts waiting in spool files, and their recovery.

When a flush cannot reach the database, messages go to
``<home>/sessions/<sid>.pending.jsonl``; they are replayed exactly once by the next
``StateStore.open`` or by ``pending recover``. ``pending list`` reads only the files (it
works while the database itself is locked or broken) and also shows the files that are
never replayed: ``<sid>.rejected.jsonl`` (lines recovery could not use, kept for
inspection) and ``<sid>.jsonl`` (salvage written while the database was damaged).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.table import Table

from .. import hints
from ..engine import default_home
from ..store import StateStore
from ..transcript import spool
from ._numbers import BUDGET_S
from ._options import json_option, session_option
from ._output import CliError, Text, echo_json, format_time, stdout_console

if TYPE_CHECKING:
    from pathlib import Path

    from ._state import CliState

__all__ = ["pending"]

_KINDS = (
    ("pending", spool.PENDING_SUFFIX),
    ("rejected", spool.REJECTED_SUFFIX),
    ("salvage", spool.SALVAGE_SUFFIX),
)


def _home(state: CliState) -> Path:
    return state.home if state.home is not None else default_home()


def _file_dict(kind: str, f: spool.PendingFile, now: float) -> dict[str, Any]:
    return {
        "kind": kind,
        "session_id": f.session_id,
        "file": f.name,
        "path": str(f.path),
        "records": f.records,
        "bad_lines": f.bad_lines,
        "bytes": f.size,
        "oldest_at": f.oldest_at,
        "oldest_age_s": f.age_s(now),
        "error": f.error,
    }


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


@click.group("pending")
def pending() -> None:
    """Transcripts spooled while the database could not take them.

    \b
    Example:
      hermes-repo pending list
      hermes-repo pending recover
    """


@pending.command("list")
@json_option()
@click.pass_obj
def list_pending(state: CliState, as_json: bool) -> None:
    """List spool files per session: records, unusable lines, age of the oldest record.

    Only `pending` files are replayed (by the next open of the store, or `pending
    recover`); `rejected` and `salvage` files are kept for inspection. Never opens
    the database.

    \b
    Example:
      hermes-repo pending list --json
    """
    home = _home(state)
    now = time.time()
    rows = [
        _file_dict(kind, f, now)
        for kind, suffix in _KINDS
        for f in spool.list_pending(home, suffix=suffix)
    ]
    if as_json:
        echo_json(rows)
        return
    console = stdout_console()
    if not rows:
        console.print(Text(f"no pending transcripts in {spool.sessions_dir(home)}"))
        return
    table = Table(
        title=f"{len(rows)} file(s) in {spool.sessions_dir(home)}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("kind", no_wrap=True)
    table.add_column("session", no_wrap=True, style="cyan")
    table.add_column("records", justify="right", no_wrap=True)
    table.add_column("bad lines", justify="right", no_wrap=True)
    table.add_column("oldest", no_wrap=True)
    table.add_column("age", justify="right", no_wrap=True)
    table.add_column("note", overflow="fold")
    for r in rows:
        note = r["error"] or ("" if r["session_id"] else "not a valid session id: never replayed")
        table.add_row(
            r["kind"],
            Text(r["session_id"] or r["file"]),
            str(r["records"]),
            str(r["bad_lines"]),
            format_time(r["oldest_at"]),
            _age(r["oldest_age_s"]),
            Text(note),
        )
    console.print(table)


@pending.command("recover")
@session_option("Only this session's spool file.")
@click.option(
    "--budget",
    type=BUDGET_S,
    default=None,
    metavar="S",
    help="Seconds to wait for a locked database. [default: 20]",
)
@json_option()
@click.pass_obj
def recover(state: CliState, session_id: str | None, budget: float | None, as_json: bool) -> None:
    """Replay pending spool files into the database, exactly once.

    Records already stored (same uid, or the same trailing messages for records
    without uid) are skipped; the rest are inserted in one transaction per file and
    the file is deleted after the commit. Unusable lines move to <sid>.rejected.jsonl.
    Exits with 1 if a file could not be replayed (it is kept for the next try).

    \b
    Example:
      hermes-repo pending recover --session 20240611_101500_abcdef123456
    """
    # Open without the automatic recovery, so this command reports what it did.
    with StateStore.open(state.home, url=state.url, recover=False, write_budget_s=budget) as store:
        report = store.recover_pending(session_id)
    if as_json:
        echo_json(
            {
                "files": report.files,
                "inserted": report.inserted,
                "duplicates": report.duplicates,
                "kept": report.kept,
                "errors": list(report.errors),
            }
        )
    else:
        stdout_console().print(
            Text(
                f"{report.files} file(s): {report.inserted} inserted, "
                f"{report.duplicates} duplicate(s), {report.kept} kept"
            )
        )
    if report.errors:
        raise CliError(
            f"{len(report.errors)} spool file(s) not recovered: {'; '.join(report.errors)}; "
            "they are kept: fix the cause and run "
            f"`{hints.command(state.db_path.parent, 'pending recover')}` again"
        )
