"""Every process a test starts is gone when the test ends, on failure too.

A failed assertion, a timeout or an interrupt between ``start`` and ``wait`` must not
leave a worker running (holding locks on a store, or looping forever).
"""

from __future__ import annotations

import multiprocessing.process
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

__all__ = ["reaped"]

Proc = subprocess.Popen[str] | subprocess.Popen[bytes] | multiprocessing.process.BaseProcess


@contextmanager
def reaped(procs: Iterable[Proc]) -> Iterator[None]:
    """Kill (SIGKILL) and reap every process of ``procs`` still alive when the block ends.

    ``procs`` may be a list the block is still appending to.
    """
    try:
        yield
    finally:
        for proc in list(procs):
            if isinstance(proc, subprocess.Popen):
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
            else:
                if proc.is_alive():
                    proc.kill()
                proc.join()
