"""Replaying a whole unit of work on transient SQLite errors, within a time budget.

Retrying one statement cannot help: after SQLITE_BUSY_SNAPSHOT only a new transaction
does, and after FULL or IOERR SQLite has already rolled the transaction back. So a write
that must survive contention is a function of a unit of work, replayed whole.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import DatabaseBusyError, ErrorKind, WriteFailedError

__all__ = ["DEFAULT_POLICY", "TRANSCRIPT_POLICY", "RetryPolicy", "run_with_retry"]

log = logging.getLogger("hermes_repo.retry")
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep replaying a unit that fails with a transient error.

    The budget is time, not attempts: a lock held for 20 s means the same whether the
    sleeps were short or long. Sleeps are jittered (short at first, when a lock is likely
    to be released soon, longer later) so competing writers do not retry in step.
    """

    budget_s: float = 20.0
    early_window_s: float = 2.0
    early_sleep_s: tuple[float, float] = (0.02, 0.15)
    late_sleep_s: tuple[float, float] = (0.25, 1.0)

    def sleep_for(self, elapsed: float) -> float:
        lo, hi = self.early_sleep_s if elapsed < self.early_window_s else self.late_sleep_s
        return random.uniform(lo, hi)


DEFAULT_POLICY = RetryPolicy()
# Transcripts are the user's conversation: worth waiting longer for than routine writes.
TRANSCRIPT_POLICY = RetryPolicy(budget_s=60.0)


def run_with_retry(
    attempt: Callable[[], T],
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``attempt`` (a whole unit of work) until it succeeds or the budget runs out.

    Only :attr:`ErrorKind.TRANSIENT` failures are retried. When the budget is spent the
    error says for how long the database stayed locked, and chains the last failure.
    """
    start = clock()
    tries = 0
    while True:
        tries += 1
        try:
            return attempt()
        except WriteFailedError as exc:
            if exc.kind is not ErrorKind.TRANSIENT:
                raise
            elapsed = clock() - start
            pause = policy.sleep_for(elapsed)
            if elapsed + pause > policy.budget_s:
                cause = exc.__cause__ if exc.__cause__ is not None else exc
                raise DatabaseBusyError(
                    f"database is locked or read-only for {elapsed:.1f} s "
                    f"({tries} attempts): {cause}; another process holds the write lock "
                    "or the file is read-only: stop that process or check permissions"
                ) from cause
            log.debug("transient write failure (attempt %d), retrying: %s", tries, exc)
            sleep(pause)
