"""``hermes-repo pending``: transcripts waiting in spool files, and their replay.

When a flush cannot reach the database, messages go to
``<home>/sessions/<sid>.pending.jsonl``; they are replayed exactly once by the next
``StateStore.open`` or by ``pending replay``. ``pending list`` reads only the files (it
works while the database itself is locked or broken) and also shows the files that are
never replayed: ``<sid>.rejected.jsonl`` (lines the replay could not use, kept for
inspection) and ``<sid>.jsonl`` (salvage written while the database was damaged).
"""

from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.table import Table

from .. import hints
from ..engine import default_home
from ..transcript import spool
from ._lazy import deprecated_alias
from ._numbers import BUDGET_S
from ._options import json_option, session_option
from ._output import CliError, Text, echo_json, format_time, stdout_console

if TYPE_CHECKING:
    from pathlib import Path

    from ..provenance import StoreIdentity
    from ._state import CliState

__all__ = ["pending"]

_KINDS = (
    ("pending", spool.PENDING_SUFFIX),
    ("rejected", spool.REJECTED_SUFFIX),
    ("salvage", spool.HOLD_SUFFIX),
)


def _home(state: CliState) -> Path:
    return state.home if state.home is not None else default_home()


def _here(state: CliState) -> StoreIdentity:
    """The store this command line names, as far as it is known without opening it (a
    server's id is not read: its records are placed by their target)."""
    from ..provenance import StoreIdentity, peek_file_identity, url_target

    server = state.server
    if server is not None:
        return StoreIdentity(None, url_target(server.url), is_file=False)
    return peek_file_identity(state.db_path)


def _door_mismatch(f: spool.PendingFile, session_source: str | None) -> str | None:
    doors = [s for s in f.sources if s not in ("cli", session_source)]
    if session_source is None or not doors:
        return None
    return (
        f"written for a session of source {doors[0]!r}; session {f.session_id!r} of this "
        f"store is of source {session_source!r}: never replayed into it"
    )


def _owners(
    f: spool.PendingFile, here: StoreIdentity, session_source: str | None
) -> list[dict[str, Any]]:
    from ..transcript.replay import replay_command, why_not_here

    out = []
    for owner, n in f.owners:
        why = why_not_here(owner, here, spooled_at=f.mtime)
        command = None if why is None else replay_command(owner, here, f.path)
        if why is None:
            why = _door_mismatch(f, session_source)  # no other store replays it
        out.append(
            {
                "store_id": owner.store_id,
                "target": owner.target,
                "records": n,
                "replayed_here": why is None,
                "why_not_here": why,
                "replay_with": command,
            }
        )
    return out


def _file_dict(
    kind: str,
    f: spool.PendingFile,
    now: float,
    here: StoreIdentity,
    session_source: str | None,
) -> dict[str, Any]:
    owners = _owners(f, here, session_source)
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
        "sources": list(f.sources),
        "stores": owners,
        "here": here.target,
    }


def _store_text(owners: list[dict[str, Any]]) -> str:
    parts = []
    for o in owners:
        name = o["store_id"][:12] if o["store_id"] else (o["target"] or "unknown (older version)")
        parts.append(name)
    return ", ".join(parts) or "-"


def _note(r: dict[str, Any]) -> str:
    if r["error"]:
        return str(r["error"])
    if not r["session_id"]:
        return "not a valid session id: never replayed"
    notes = []
    if r["kind"] == "pending":
        for o in r["stores"]:
            if o["why_not_here"]:
                fix = f"; replay with `{o['replay_with']}`" if o["replay_with"] else ""
                notes.append(
                    f"{o['records']} record(s) not replayed here: {o['why_not_here']}{fix}"
                )
    if r["sources"]:
        notes.insert(0, f"source {', '.join(r['sources'])}")
    return "; ".join(notes)


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
      hermes-repo pending replay
    """


@pending.command("list")
@json_option()
@click.pass_obj
def list_pending(state: CliState, as_json: bool) -> None:
    """List spool files per session: records, unusable lines, age of the oldest record,
    and the store (and session source) their records belong to.

    Only `pending` files are replayed (by the next open of the store, or `pending
    replay`), and only into the store their records name: a file of another store
    says why it is not replayed here and the command that replays it where it
    belongs. `rejected` and `salvage` (hold) files are kept for inspection. Never opens the
    database (a SQLite file's id is read read-only; a server's is not read).

    \b
    Example:
      hermes-repo pending list --json
    """
    from ..provenance import peek_session_sources

    home = _home(state)
    now = time.time()
    here = _here(state)
    files = [(kind, f) for kind, suffix in _KINDS for f in spool.list_pending(home, suffix=suffix)]
    sids = sorted({f.session_id for kind, f in files if kind == "pending" and f.session_id})
    sources = peek_session_sources(state.db_path, sids) if here.is_file else {}
    rows = [_file_dict(kind, f, now, here, sources.get(f.session_id or "")) for kind, f in files]
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
    table.add_column("store", overflow="fold")
    table.add_column("note", overflow="fold")
    for r in rows:
        note = _note(r)
        table.add_row(
            r["kind"],
            Text(r["session_id"] or r["file"]),
            str(r["records"]),
            str(r["bad_lines"]),
            format_time(r["oldest_at"]),
            _age(r["oldest_age_s"]),
            Text(_store_text(r["stores"])),
            Text(note),
        )
    console.print(table)


@pending.command("replay")
@session_option("Only this session's spool file.")
@click.option(
    "--budget",
    type=BUDGET_S,
    default=None,
    metavar="S",
    help="Seconds to wait for a locked database. [default: 20]",
)
@click.option(
    "--adopt",
    "adopt",
    multiple=True,
    metavar="STORE_ID",
    help="Also replay records of this store id: one this store was copied from (its "
    "copied_from), or 'legacy' for records of an older version that name no store.",
)
@json_option()
@click.pass_obj
def replay(
    state: CliState,
    session_id: str | None,
    budget: float | None,
    adopt: tuple[str, ...],
    as_json: bool,
) -> None:
    """Replay pending spool files into the database, exactly once.

    Records already stored (same uid, or the same trailing messages for records
    without uid) are skipped; the rest are inserted in one transaction per file and
    the file is deleted after the commit. Unusable lines move to <sid>.rejected.jsonl.
    Exits with 1 if a file could not be replayed (it is kept for the next try).

    \b
    Example:
      hermes-repo pending replay --session 20240611_101500_abcdef123456
    """
    from ..store import StateStore

    # Open without the automatic replay, so this command reports what it did.
    with StateStore.open(state.home, url=state.url, replay=False, write_budget_s=budget) as store:
        report = store.replay_pending(session_id, adopt=adopt)
    if as_json:
        echo_json(
            {
                "files": report.files,
                "inserted": report.inserted,
                "duplicates": report.duplicates,
                "kept": report.kept,
                "conflicts": report.conflicts,
                "foreign": report.foreign,
                "foreign_notes": list(report.foreign_notes),
                "errors": list(report.errors),
            }
        )
    else:
        console = stdout_console()
        console.print(
            Text(
                f"{report.files} file(s): {report.inserted} inserted, "
                f"{report.duplicates} duplicate(s), {report.kept} kept"
                + (f", {report.foreign} left for another store or door" if report.foreign else "")
            )
        )
        for note in report.foreign_notes:
            console.print(Text(note))
    if report.errors:
        raise CliError(
            f"{len(report.errors)} spool file(s) not replayed: {'; '.join(report.errors)}; "
            f"they are kept: fix the cause and run `{_this_store(state, 'pending replay')}` "
            "again"
        )


# `pending recover`, the name `pending replay` had (hidden, warns).
pending.add_command(deprecated_alias(replay, "pending recover", "pending replay"))


def _this_store(state: CliState, rest: str) -> str:
    """``rest`` as a command for the very store this one ran on: with its URL (password
    masked) on a server, with its home on a SQLite file (a hint without ``--url`` would
    make the operator replay a server's spool into a SQLite file of the home)."""
    from ..engine_pg import safe_url

    server = state.server
    if server is not None:
        return f"hermes-repo --url {shlex.quote(safe_url(server.url))} {rest}"
    return hints.command(state.db_path.parent, rest)
