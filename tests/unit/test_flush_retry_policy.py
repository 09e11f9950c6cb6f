"""Error classification and the retry loop (fake clock; real SQLite errors are in
tests/faults/test_flush_faults.py)."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable

import pytest

from hermes_repo.driver_errors import classify, transient_cause, translate
from hermes_repo.errors import (
    DatabaseBusyError,
    ErrorKind,
    IntegrityViolation,
    StateDbCorruptError,
    StorageFullError,
    WriteFailedError,
)
from hermes_repo.retry import RetryPolicy, run_with_retry


def sqlite_error(code: int, name: str, msg: str) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(msg)
    exc.sqlite_errorcode = code
    exc.sqlite_errorname = name
    return exc


BUSY = sqlite_error(5, "SQLITE_BUSY", "database is locked")
BUSY_SNAPSHOT = sqlite_error(517, "SQLITE_BUSY_SNAPSHOT", "database is locked")
LOCKED = sqlite_error(262, "SQLITE_LOCKED_SHAREDCACHE", "database table is locked: sessions")
READONLY = sqlite_error(8, "SQLITE_READONLY", "attempt to write a readonly database")
DBMOVED = sqlite_error(1032, "SQLITE_READONLY_DBMOVED", "attempt to write a readonly database")
FULL = sqlite_error(13, "SQLITE_FULL", "database or disk is full")
IOERR = sqlite_error(778, "SQLITE_IOERR_WRITE", "disk I/O error")
CORRUPT = sqlite_error(11, "SQLITE_CORRUPT", "database disk image is malformed")
VTAB = sqlite_error(267, "SQLITE_CORRUPT_VTAB", "database disk image is malformed")
FTS_CONSTRAINT = sqlite_error(19, "SQLITE_CONSTRAINT", "constraint failed")
UNIQUE = sqlite_error(
    2067, "SQLITE_CONSTRAINT_UNIQUE", "UNIQUE constraint failed: messages.session_id"
)


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (BUSY, ErrorKind.TRANSIENT),
        (BUSY_SNAPSHOT, ErrorKind.TRANSIENT),
        (LOCKED, ErrorKind.TRANSIENT),
        (READONLY, ErrorKind.TRANSIENT),
        (DBMOVED, ErrorKind.REPLACED),
        (FULL, ErrorKind.DISK),
        (IOERR, ErrorKind.DISK),
        (CORRUPT, ErrorKind.CORRUPT),
        (VTAB, ErrorKind.FTS),
        (FTS_CONSTRAINT, ErrorKind.FTS),
        (UNIQUE, ErrorKind.CONSTRAINT),
        (sqlite3.OperationalError("database disk image is malformed"), ErrorKind.CORRUPT),
        (sqlite3.OperationalError("database or disk is full"), ErrorKind.DISK),
        (OSError(errno.ENOSPC, "No space left on device"), ErrorKind.DISK),
        (OSError(errno.EACCES, "Permission denied"), ErrorKind.OTHER),
        (StorageFullError("x"), ErrorKind.DISK),
        (IntegrityViolation("x"), ErrorKind.CONSTRAINT),
    ],
)
def test_classify(err: BaseException, kind: ErrorKind) -> None:
    assert classify(err) is kind


def test_translated_errors_keep_their_kind_and_name_the_cause() -> None:
    busy = translate(BUSY)
    assert isinstance(busy, DatabaseBusyError) and classify(busy) is ErrorKind.TRANSIENT
    assert "locked by another process" in str(busy)
    assert "read-only" in str(translate(READONLY))
    assert isinstance(translate(FULL), StorageFullError)
    assert isinstance(translate(CORRUPT), StateDbCorruptError)
    moved = translate(DBMOVED)
    assert classify(moved) is ErrorKind.REPLACED and "moved or deleted" in str(moved)
    assert transient_cause(BUSY_SNAPSHOT).startswith("changed by another process")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(
    err: BaseException, clock: FakeClock, cost: float = 0.0, succeed_after: int = -1
) -> tuple[Callable[[], str], dict[str, int]]:
    calls = {"n": 0}

    def attempt() -> str:
        calls["n"] += 1
        clock.now += cost
        if calls["n"] == succeed_after:
            return "done"
        raise translate(err) from err

    return attempt, calls


def test_transient_errors_are_retried_until_success() -> None:
    clock = FakeClock()
    attempt, calls = failing(BUSY, clock, succeed_after=4)
    assert (
        run_with_retry(attempt, RetryPolicy(budget_s=5), clock=clock, sleep=clock.sleep) == "done"
    )
    assert calls["n"] == 4 and len(clock.sleeps) == 3


def test_exhaustion_names_the_cause_and_how_long() -> None:
    clock = FakeClock()
    attempt, _ = failing(BUSY, clock, cost=1.0)
    with pytest.raises(DatabaseBusyError) as info:
        run_with_retry(attempt, RetryPolicy(budget_s=20), clock=clock, sleep=clock.sleep)
    msg = str(info.value)
    assert "database is locked by another process for 2" in msg  # e.g. "for 20.1 s"
    assert "unknown" not in msg.lower()
    assert info.value.elapsed_s is not None and info.value.elapsed_s >= 20
    assert clock.now < 20 + 1.0 + 0.01  # the last attempt starts within the budget
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    # Sleeps are jittered, never beyond what is left of the budget.
    assert len(set(clock.sleeps)) > 1


def test_read_only_exhaustion_says_read_only() -> None:
    clock = FakeClock()
    attempt, _ = failing(READONLY, clock, cost=0.1)
    with pytest.raises(DatabaseBusyError, match=r"database is read-only for \d+\.\d s"):
        run_with_retry(attempt, RetryPolicy(budget_s=1), clock=clock, sleep=clock.sleep)


@pytest.mark.parametrize("err", [FULL, CORRUPT, UNIQUE, DBMOVED])
def test_non_transient_errors_leave_at_once(err: BaseException) -> None:
    clock = FakeClock()
    attempt, calls = failing(err, clock)
    with pytest.raises((WriteFailedError, IntegrityViolation)):
        run_with_retry(attempt, RetryPolicy(budget_s=5), clock=clock, sleep=clock.sleep)
    assert calls["n"] == 1 and not clock.sleeps


def test_an_exhausted_inner_loop_is_not_retried_again() -> None:
    clock = FakeClock()

    def inner() -> None:
        raise DatabaseBusyError("database is locked by another process for 20.0 s", elapsed_s=20)

    with pytest.raises(DatabaseBusyError):
        run_with_retry(inner, RetryPolicy(budget_s=60), clock=clock, sleep=clock.sleep)
    assert not clock.sleeps


def test_budget_must_be_a_non_negative_number() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(budget_s=-1)
    with pytest.raises(ValueError):
        RetryPolicy(budget_s=float("nan"))
