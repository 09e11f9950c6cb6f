"""Where a salvage writes: a new file only, built under a temporary name and linked in.

The output is built beside its final name as ``.<name>.recover-<pid>.partial`` and gets
its name only once it is whole and verified, so an interrupted run never leaves a store
at the output path, and a file that appears there meanwhile is never clobbered.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..schema.files import fsync_dir, fsync_file, side_file, side_files
from .copy import remove_stale
from .report import SalvageError

__all__ = ["PARTIAL_SUFFIX", "check_output", "install", "partial_files", "partial_path"]

PARTIAL_SUFFIX = ".partial"
"""An output under construction: ``.<name>.recover-<pid>.partial`` beside the target."""


def partial_path(output: Path) -> Path:
    """The temporary name this process builds ``output`` under."""
    return output.with_name(f".{output.name}.recover-{os.getpid()}{PARTIAL_SUFFIX}")


def partial_files(output: Path) -> list[Path]:
    """Every file building ``output`` may create: the partial store and its side files."""
    partial = partial_path(output)
    return [partial, *side_files(partial)]


def check_output(source: Path, output: Path) -> None:
    """Refuse an ``output`` that exists or names one of the source's files; make its
    folder (0700) if needed and remove what killed runs left there."""
    if output.exists() or output.is_symlink() or any(p.exists() for p in side_files(output)):
        what = "is the source" if output.resolve() == source.resolve() else "already exists"
        raise SalvageError(
            f"{output} {what}; recover writes only to a new file. "
            "Choose another --output path (the source is never overwritten)"
        )
    # A name SQLite would take for one of the source's own files (its -wal, say) would
    # be read as part of the source by the next open of it.
    own = [source, *side_files(source)]
    if output.absolute() in [p.absolute() for p in own]:
        raise SalvageError(
            f"{output} is a name of the source's own files; choose another --output path"
        )
    if not output.parent.exists():
        output.parent.mkdir(mode=0o700, parents=True)
    # Leftovers of a run that was killed (SIGKILL runs no cleanup) are removed now.
    remove_stale(output.parent, f".{output.name}.recover-*{PARTIAL_SUFFIX}*")


def install(partial: Path, output: Path) -> None:
    """Give the finished, verified store its name; never over a file that appeared since.

    The engine is closed: SQLite checkpointed and removed the ``-wal``. A link is
    refused if ``output`` exists (a rename would replace it), so a database written
    there meanwhile is never clobbered.
    """
    for suffix in ("-wal", "-journal"):
        side = side_file(partial, suffix)
        if side.exists() and side.stat().st_size > 0:
            raise SalvageError(
                f"the recovered store still has a non-empty {suffix} after closing; it was "
                "removed. Run the command again"
            )
    fsync_file(partial)
    appeared = SalvageError(
        f"{output} appeared while the salvage ran; it was left as it is. "
        "Choose another --output path"
    )
    try:
        os.link(partial, output)
    except FileExistsError as exc:
        raise appeared from exc
    except OSError:
        # A file system without hard links: a rename, right after one more check.
        if output.exists() or output.is_symlink():
            raise appeared from None
        os.rename(partial, output)
    else:
        partial.unlink()
    fsync_dir(output.parent)
