"""A real full disk: a small tmpfs mounted for the length of a block.

A fault injector can fake ENOSPC on chosen calls; a full filesystem also fails the
calls nobody thought of (the spool, a journal, a temporary file), which is the point.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

__all__ = ["small_tmpfs"]


@contextmanager
def small_tmpfs(folder: Path, kib: int) -> Iterator[Path]:
    """Mount a ``kib`` KiB tmpfs (mode 0700) at ``folder`` (created) and yield it; the test
    is skipped where mounting is not allowed. Unmounted lazily when the block ends."""
    folder.mkdir(mode=0o700)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=0700", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
