"""Replaying a whole unit of work on transient errors, within a time budget.

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

from .driver_errors import describe, is_server_error, transient_cause, transient_fix
from .errors import DatabaseBusyError, ErrorKind, WriteFailedError

__all__ = [
    "DEFAULT_POLICY",
    "STORE_WRITE_BUDGET_S",
    "TRANSCRIPT_POLICY",
    "TRANSCRIPT_WRITE_BUDGET_S",
    "RetryPolicy",
    "run_with_retry",
]

log = logging.getLogger("hermes_repo.retry")
T = TypeVar("T")

STORE_WRITE_BUDGET_S = 20.0
# Transcripts are the user's conversation: worth waiting longer for than routine writes.
TRANSCRIPT_WRITE_BUDGET_S = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    """How long to keep replaying a unit that fails with a transient error.

    The budget is time, not attempts: a lock held for 20 s means the same whether the
    sleeps were short or long. Sleeps are jittered (short at first, when a lock is likely
    to be released soon, longer later) so competing writers do not retry in step. The
    last attempt starts before the budget ends, and one attempt can itself wait up to the
    connection's ``busy_timeout`` (1 s) inside SQLite, so a call that gives up returns
    at most about that much after the budget.
    """

    budget_s: float = STORE_WRITE_BUDGET_S
    early_window_s: float = 2.0
    early_sleep_s: tuple[float, float] = (0.02, 0.15)
    late_sleep_s: tuple[float, float] = (0.25, 1.0)

    def __post_init__(self) -> None:
        if not self.budget_s >= 0:  # also refuses NaN
            raise ValueError(f"retry budget must be >= 0 seconds, got {self.budget_s!r}")

    def sleep_for(self, elapsed: float) -> float:
        """A jittered pause before the next attempt, ``elapsed`` seconds into the loop."""
        lo, hi = self.early_sleep_s if elapsed < self.early_window_s else self.late_sleep_s
        return random.uniform(lo, hi)


DEFAULT_POLICY = RetryPolicy()
TRANSCRIPT_POLICY = RetryPolicy(budget_s=TRANSCRIPT_WRITE_BUDGET_S)


def _exhausted(
    exc: WriteFailedError, elapsed: float, tries: int, budget: float
) -> DatabaseBusyError:
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    what = transient_cause(cause)
    if what == "read-only" or is_server_error(cause):
        fix = transient_fix(what)
    else:
        fix = "find the process holding the write lock and stop it, or raise the write budget"
    return DatabaseBusyError(
        f"database is {what} for {elapsed:.1f} s ({tries} attempt{'s' * (tries != 1)} within a "
        f"{budget:g} s budget; last error: {describe(cause)}); {fix}",
        elapsed_s=elapsed,
    )


def run_with_retry(
    attempt: Callable[[], T],
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``attempt`` (a whole unit of work) until it succeeds or the budget runs out.

    Only :attr:`ErrorKind.TRANSIENT` failures are retried; any other error leaves at
    once. When the budget is spent, :class:`DatabaseBusyError` names the cause and for
    how long it lasted ("database is locked by another process for 20.1 s"), with
    ``elapsed_s`` set, and chains the last SQLite error.
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
            if isinstance(exc, DatabaseBusyError) and exc.elapsed_s is not None:
                raise  # an inner loop already spent its budget: do not multiply it
            elapsed = clock() - start
            remaining = policy.budget_s - elapsed
            if remaining <= 0:
                raise _exhausted(exc, elapsed, tries, policy.budget_s) from (
                    exc.__cause__ if exc.__cause__ is not None else exc
                )
            pause = min(policy.sleep_for(elapsed), remaining)
            log.debug("transient write failure (attempt %d), retrying: %s", tries, exc)
            sleep(pause)
