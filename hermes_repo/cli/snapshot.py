"""``hermes-repo snapshot``: verified copies of the store in ``<home>/state-snapshots/``.

The work is done by :mod:`hermes_repo.maintenance.snapshots`; these commands never open the
store as a holder (a restore must be able to take it over), so they use the CLI state
only for ``--home``.
"""

from __future__ import annotations

import datetime as dt
import sys
from typing import TYPE_CHECKING

import click

from .. import hints
from ..errors import IntegrityViolation
from ._numbers import DEFAULT_KEEP, KEEP
from ._output import CliError, echo, echo_json, format_time

if TYPE_CHECKING:
    from . import CliState

__all__ = ["snapshot"]


def _epoch(created_at: str | None) -> float | None:
    if created_at is None:
        return None
    try:
        return dt.datetime.fromisoformat(created_at).timestamp()
    except ValueError:
        return None


def _counts_text(counts: dict[str, int]) -> str:
    if not counts:
        return "-"
    return (
        f"{counts.get('sessions', 0)} sessions, {counts.get('messages', 0)} messages "
        f"({counts.get('active_messages', 0)} active)"
    )


def _size_text(size: int | None) -> str:
    return "-" if size is None else f"{size / 2**20:,.1f} MiB"


@click.group("snapshot")
def snapshot() -> None:
    """Take, list and restore snapshots of state.db (in <home>/state-snapshots/).

    A snapshot is an online copy made with SQLite's backup API (safe while agents
    write), verified with integrity_check, plus a manifest: schema revision, counts,
    size and sha256. Restore refuses a snapshot of another schema revision, a changed
    or damaged snapshot, and a store that another process has open. A PostgreSQL store
    (--url) is refused: back it up with pg_dump -Fc, restore with pg_restore.

    \b
    Example:
      hermes-repo snapshot create --label before-cleanup
      hermes-repo snapshot list
      hermes-repo snapshot restore 20260101T093000Z-3fa9c1
    """


@snapshot.command("create")
@click.option("--label", metavar="L", help="A note kept in the manifest (e.g. why).")
@click.option(
    "--keep",
    type=KEEP,
    default=DEFAULT_KEEP,
    show_default=True,
    metavar="N",
    help="Operator snapshots to keep; older ones are deleted after this one is made "
    "(automatic snapshots are not counted nor deleted).",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_obj
def create(state: CliState, label: str | None, keep: int, as_json: bool) -> None:
    """Take a snapshot of state.db now, then keep only the newest N.

    Needs free space for a copy of the store (plus a margin) beside the snapshots;
    a store that fails integrity_check gets no snapshot (run `hermes-repo doctor`).

    \b
    Example:
      hermes-repo snapshot create --label nightly --keep 7
    """
    from ..maintenance import snapshots as ops

    if label is not None:
        try:
            label.encode("utf-8")
        except UnicodeEncodeError:
            raise IntegrityViolation(
                f"snapshot label {label!r} is not valid Unicode text (bytes that are not "
                "UTF-8); pass a label of plain text"
            ) from None
    snap = ops.create_snapshot(state.home, label=label, keep=keep, url=state.url)
    if as_json:
        echo_json(snap.as_dict())
        return
    echo(f"snapshot {snap.id}: {_counts_text(snap.counts)}, revision {snap.revision}")
    echo(f"  file: {snap.path} ({_size_text(snap.size)}, sha256 {snap.sha256})")


@snapshot.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_obj
def list_command(state: CliState, as_json: bool) -> None:
    """List snapshots, newest first, with origin, revision, counts and label.

    Origin is `operator` (made by `snapshot create`) or `automatic` (taken by a repair,
    an upgrade or a restore as its restore point). Each has its own retention:
    automatic ones keep the newest 5 within 2 GiB and never push out an operator's.

    A snapshot whose manifest is damaged (or whose file is missing) is shown as such;
    it cannot be restored. Half-made snapshots (no manifest) are not shown.

    \b
    Example:
      hermes-repo snapshot list --json
    """
    from ..maintenance import snapshots as ops
    from ..maintenance.sqlite_only import refuse_on_server
    from ..schema import migrate

    refuse_on_server("snapshot list", "snapshot", state.url)
    snaps = ops.list_snapshots(state.home)
    if as_json:
        echo_json([s.as_dict() for s in snaps])
        return
    if not snaps:
        # Plain echo: rich would fold the line at the terminal width, mid-command.
        folder = ops.snapshots_dir(state.home)
        create = hints.command(state.db_path.parent, "snapshot create")
        echo(f"no snapshots in {folder}; take one with `{create}`")
        return
    # Two plain lines a snapshot rather than a table: a table folds the ids (which
    # people copy into `snapshot restore`) or drops columns on a narrow terminal.
    head = migrate.head_revision()
    echo(f"{len(snaps)} snapshot(s) in {ops.snapshots_dir(state.home)}, newest first")
    for s in snaps:
        if not s.ok:
            echo(f"{s.id}  DAMAGED: {s.error} (cannot be restored)")
            continue
        label = f"  {s.label}" if s.label else ""
        echo(f"{s.id}  {format_time(_epoch(s.created_at))}  {s.origin}{label}")
        note = "" if s.revision == head else f" (not this code's head {head}: cannot be restored)"
        echo(f"    revision {s.revision}{note}, {_counts_text(s.counts)}, {_size_text(s.size)}")


@snapshot.command("restore")
@click.argument("snapshot_id", metavar="ID")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_obj
def restore(state: CliState, snapshot_id: str, yes: bool, as_json: bool) -> None:
    """Replace state.db with snapshot ID (stop the agents and gateways first).

    The current store is kept: as a `pre-restore` snapshot when it is readable,
    otherwise its files are moved aside as state.db.damaged-<time> (+ -wal, -shm).
    Refused, with nothing changed, for a snapshot of another schema revision, one
    whose bytes changed or that fails integrity_check, or while another process has
    the store open. Asks for confirmation unless --yes; without a terminal to ask on,
    --yes is required.

    \b
    Example:
      hermes-repo snapshot restore 20260101T093000Z-3fa9c1 --yes
    """
    from ..maintenance import snapshots as ops

    home = state.db_path.parent
    if not yes:
        if not sys.stdin.isatty():
            raise CliError(
                "refusing to restore without confirmation: stdin is not a terminal; "
                f"re-run as `{hints.command(home, f'snapshot restore {snapshot_id} --yes')}`"
            )
        snaps = {s.id: s for s in ops.list_snapshots(state.home)}
        chosen = snaps.get(snapshot_id)
        what = (
            f"snapshot {snapshot_id} ({_counts_text(chosen.counts)}, "
            f"made {format_time(_epoch(chosen.created_at))})"
            if chosen is not None and chosen.ok
            else f"snapshot {snapshot_id}"
        )
        prompt = (
            f"Replace {state.db_path} with {what}? "
            "The current store is kept as a pre-restore snapshot (or moved aside if damaged)"
        )
        if not click.confirm(prompt, default=False):
            raise CliError("restore cancelled at the prompt; nothing changed")
    result = ops.restore_snapshot(state.home, snapshot_id, url=state.url)
    if as_json:
        echo_json(result.as_dict())
        return
    echo(
        f"restored snapshot {result.snapshot.id} into {result.db_path}: "
        f"{_counts_text(result.counts)}"
    )
    echo(f"  previous store: {result.previous}")
