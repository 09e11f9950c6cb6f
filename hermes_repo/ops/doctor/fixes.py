"""The commands a finding names: salvage into a new file, install it, or restore."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ... import walcheck
from ...deprecation import moved_names
from ...maintenance.snapshots.manifest import list_snapshots
from .context import STOP_FIRST, DoctorContext

__all__ = ["damaged_file_fix", "recovered_path", "replace_command", "salvage_commands"]


def recovered_path(db_path: Path) -> Path:
    """Where the salvage commands put the new store: ``<home>/recovered-<stamp>/state.db``.

    One folder per incident: ``db replace`` leaves the salvaged store's folder behind,
    and a fixed name would send the operator of the next incident to the previous
    incident's stale store (or fail on "already exists"). See
    :func:`hermes_repo.walcheck.recovered_path`.
    """
    return walcheck.recovered_path(db_path)


def replace_command(db_path: Path) -> str:
    """The command that installs the recovered store in place of the damaged one."""
    home = shlex.quote(str(db_path.parent))
    return f"hermes-repo --home {home} db replace {shlex.quote(str(recovered_path(db_path)))}"


def salvage_commands(db_path: Path) -> tuple[str, str]:
    """The two salvage commands for a store: inspect, then salvage into a new file.

    The new file goes to ``<home>/recovered/state.db``: ``sessions salvage`` refuses an
    existing path, and a ``state.db`` in a folder of its own opens with ``--home``.
    """
    source = shlex.quote(str(db_path))
    output = shlex.quote(str(recovered_path(db_path)))
    return (
        f"hermes-repo sessions salvage --source {source} --inspect-only",
        f"hermes-repo sessions salvage --source {source} --output {output}",
    )


def damaged_file_fix(ctx: DoctorContext) -> str:
    """The fix of a damaged file: salvage and install, or restore the newest snapshot."""
    inspect, output = salvage_commands(ctx.db_path)
    fix = (
        f"{STOP_FIRST} `{inspect}`, then, if rows are recoverable, `{output}` and put it in "
        f"place of the old file with `{replace_command(ctx.db_path)}`"
    )
    newest = next((s for s in list_snapshots(ctx.home) if s.ok), None)
    if newest is not None:
        restore = ctx.command(f"hermes-repo snapshot restore {newest.id}")
        fix += f"; or restore the newest snapshot ({newest.created_at}) with `{restore}`"
    return fix


#: Names kept for one release from before "salvage" and "recover" were told apart.
_moved = moved_names(
    "hermes_repo.ops.doctor.fixes",
    {"recover_commands": "hermes_repo.ops.doctor.fixes:salvage_commands"},
)


def __getattr__(name: str) -> Any:
    return _moved(name)
