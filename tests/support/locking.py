"""A write lock held by another process until the test releases it.

Two SQLite libraries in one process do not see each other's POSIX locks, and a lock
held by a thread of the test process is released on the test's own schedule; a
separate process holding ``BEGIN IMMEDIATE`` is what a second agent would be.
"""

from __future__ import annotations

import subprocess
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.holding import signalled_process

__all__ = ["HeldLock", "write_lock_held_by_another_process"]

_HOLDER = textwrap.dedent(
    """
    import pathlib, sys, time
    from hermes_repo.engine import select_driver

    db, ready, release = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    con = select_driver().module.connect(db, isolation_level=None, timeout=0)
    con.execute("BEGIN IMMEDIATE")
    con.execute(
        "INSERT OR REPLACE INTO state_meta(key, value, updated_at) VALUES ('held', 'x', 0)"
    )
    ready.touch()
    deadline = time.monotonic() + 120  # never outlive a failed test for long
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    con.execute("COMMIT")
    con.close()
    """
)


@dataclass
class HeldLock:
    """The holding process; :meth:`release` makes it commit and exit."""

    proc: subprocess.Popen[bytes]
    release_file: Path

    def release(self) -> None:
        self.release_file.touch()


@contextmanager
def write_lock_held_by_another_process(db: Path, signals: Path) -> Iterator[HeldLock]:
    """Yield once another process holds the write lock on ``db`` (``BEGIN IMMEDIATE``).

    The lock is released by :meth:`HeldLock.release` or when the block ends; the
    process is always waited for (killed if it hangs).
    """
    ready, release = signals / "lock.ready", signals / "lock.release"
    with signalled_process(
        _HOLDER,
        [str(db), str(ready), str(release)],
        ready,
        release,
        "the lock holder",
        stop_wait_s=60,
    ) as proc:
        yield HeldLock(proc, release)
