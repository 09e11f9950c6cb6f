"""Another process with the store open, as a running gateway would have it.

The holder is a real subprocess: the holder registry is a ``flock`` that the kernel
keeps per open file, and ``holder_pids`` reads ``/proc/locks``, so only another process
shows the behaviour an operator meets. It opens :class:`StateStore`, creates a *ready*
file, and keeps the store open until the test creates a *stop* file (or a minute
passes, so a failed test never leaves it behind).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["held_by_another_process"]

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
def held_by_another_process(home: Path, signals: Path) -> Iterator[subprocess.Popen[bytes]]:
    """Yield a subprocess that has the store in ``home`` open until the block ends.

    ``signals`` is a folder for the ready and stop files (created if missing).
    """
    signals.mkdir(parents=True, exist_ok=True)
    ready, stop = signals / "holder.ready", signals / "holder.stop"
    ready.unlink(missing_ok=True)
    stop.unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(home), str(ready), str(stop)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise RuntimeError(f"the holder process exited before opening the store: {err}")
            if time.monotonic() > deadline:
                raise RuntimeError("the holder process did not open the store within 30 s")
            time.sleep(0.02)
        yield proc
    finally:
        stop.touch()
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
