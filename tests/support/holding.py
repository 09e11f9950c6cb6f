"""Another process with the store open, as a running gateway would have it.

The holder is a real subprocess: the holder registry is a ``flock`` that the kernel
keeps per open file, and ``holder_pids`` reads ``/proc/locks``, so only another process
shows the behaviour an operator meets. It opens :class:`StateStore`, creates a *ready*
file, and keeps the store open until the test creates a *stop* file (or a minute
passes, so a failed test never leaves it behind).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = [
    "LockingProcess",
    "held_alone_by_another_process",
    "held_by_another_process",
    "locked_by_another_process",
    "opened_by_plain_sqlite",
]

_HOLDER = textwrap.dedent(
    """
    import pathlib, sys, time
    from hermes_repo import StateStore

    home, ready, stop = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    store = StateStore.open(home)
    ready.touch()
    deadline = time.monotonic() + 60
    while not stop.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    store.close()
    """
)


@contextmanager
def signalled_process(
    script: str, args: list[str], ready: Path, stop: Path, what: str, *, stop_wait_s: float = 30
) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``python -c script *args``; yield once it has created ``ready``; on leaving,
    create ``stop`` and reap it (killed if it hangs), whether the block failed or not.

    ``what`` names the process in the errors (e.g. "the holder process").
    """
    ready.parent.mkdir(parents=True, exist_ok=True)
    ready.unlink(missing_ok=True)
    stop.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"{what} exited before it was ready: {err}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} was not ready within 30 s")
            time.sleep(0.01)
        yield proc
    finally:
        _stop_and_reap(proc, stop, stop_wait_s)


def _stop_and_reap(proc: subprocess.Popen[bytes], stop: Path, wait_s: float) -> None:
    """Create ``stop``, give the process ``wait_s`` to end, then kill and reap it."""
    stop.touch()
    try:
        proc.wait(timeout=wait_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


@contextmanager
def held_by_another_process(home: Path, signals: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Yield a subprocess that has the store in ``home`` open until the block ends.

    ``signals`` is a folder for the ready and stop files (created if missing).
    """
    ready, stop = signals / "holder.ready", signals / "holder.stop"
    with signalled_process(
        _HOLDER, [str(home), str(ready), str(stop)], ready, stop, "the holder process"
    ) as proc:
        yield proc


_LOCKER = textwrap.dedent(
    """
    import pathlib, sys, time
    from hermes_repo.engine import select_driver

    db, signals, hold_s = sys.argv[1], pathlib.Path(sys.argv[2]), float(sys.argv[3])
    stop = signals / "locker.stop"
    con = select_driver().module.connect(db, isolation_level=None, timeout=30)
    # A rollback journal: the writer's lock blocks readers (in WAL it would not).
    mode = con.execute("PRAGMA journal_mode = DELETE").fetchone()[0]
    assert mode == "delete", mode
    holds = 0
    deadline = time.monotonic() + 120
    while not stop.exists() and time.monotonic() < deadline:
        con.execute("BEGIN EXCLUSIVE")
        con.execute("UPDATE state_meta SET updated_at = updated_at")
        holds += 1
        (signals / "locker.holds").write_text(str(holds))
        until = time.monotonic() + hold_s
        while time.monotonic() < until and not stop.exists():
            time.sleep(0.02)
        con.execute("COMMIT")
        # A gap a retrying reader can land in on a loaded machine (50 ms was missed by
        # every attempt of a 20 s budget there): the holds still outlast busy_timeout.
        time.sleep(0.25)
    con.close()
    """
)


class LockingProcess:
    """A subprocess that commits in a loop, holding the write lock ``hold_s`` each time."""

    def __init__(self, proc: subprocess.Popen[bytes], signals: Path) -> None:
        self.proc = proc
        self._holds = signals / "locker.holds"
        self._seen = 0

    def _count(self) -> int:
        try:
            return int(self._holds.read_text() or 0)
        except (OSError, ValueError):
            return 0

    def wait_for_next_hold(self) -> None:
        """Return once the process has taken the lock again since the last call."""
        deadline = time.monotonic() + 60
        while self._count() <= self._seen:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise RuntimeError(f"the locking process exited: {err}")
            if time.monotonic() > deadline:
                raise RuntimeError("the locking process took no lock within 60 s")
            time.sleep(0.005)
        self._seen = self._count()


@contextmanager
def locked_by_another_process(
    db_path: Path, signals: Path, *, hold_s: float, driver: str
) -> Iterator[LockingProcess]:
    """Yield a subprocess that holds ``BEGIN EXCLUSIVE`` on ``db_path`` for ``hold_s``
    seconds at a time (committing in between) until the block ends.

    The file is switched to a rollback journal first. ``driver`` (``stdlib`` or
    ``pysqlite3``) is the SQLite the subprocess uses: its own copy, in its own process.
    """
    signals.mkdir(parents=True, exist_ok=True)
    for name in ("locker.stop", "locker.holds"):
        (signals / name).unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", _LOCKER, str(db_path), str(signals), str(hold_s)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "HERMES_REPO_DRIVER": driver},
    )
    try:
        yield LockingProcess(proc, signals)
    finally:
        _stop_and_reap(proc, signals / "locker.stop", 30)


_ALONE = textwrap.dedent(
    """
    import pathlib, sys, time
    from hermes_repo.holders import HolderLock

    db, ready, stop = (pathlib.Path(a) for a in sys.argv[1:4])
    with HolderLock(db).exclusive():  # what a repair or a snapshot restore holds
        ready.touch()
        deadline = time.monotonic() + 20
        while not stop.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    """
)


@contextmanager
def held_alone_by_another_process(
    db_path: Path, signals: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """Yield a subprocess holding the store *exclusively* (as a repair does) until the
    block ends, or 20 s pass."""
    ready, stop = signals / "alone.ready", signals / "alone.stop"
    with signalled_process(
        _ALONE, [str(db_path), str(ready), str(stop)], ready, stop, "the exclusive holder"
    ) as proc:
        yield proc


_PLAIN = textwrap.dedent(
    """
    import pathlib, sys, time
    from hermes_repo.engine import select_driver

    db, ready, stop = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
    con = select_driver().module.connect(db)
    con.execute("SELECT count(*) FROM sessions").fetchone()
    ready.touch()
    deadline = time.monotonic() + 60
    while not stop.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    con.close()
    """
)


@contextmanager
def opened_by_plain_sqlite(db_path: Path, signals: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Yield a subprocess with a plain SQLite connection on ``db_path`` (a program that
    does not use this library: a shell, a script), after one read, until the block ends."""
    ready, stop = signals / "plain.ready", signals / "plain.stop"
    with signalled_process(
        _PLAIN, [str(db_path), str(ready), str(stop)], ready, stop, "the plain SQLite process"
    ) as proc:
        yield proc
