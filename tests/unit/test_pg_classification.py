"""PostgreSQL's SQLSTATEs and store URLs, decided without a server.

The faults a server can be made to produce for real are proved in
tests/faults/test_pg_faults.py; a full disk or an exhausted memory on the server cannot
be produced here, so their SQLSTATEs are checked on psycopg's own error classes.
"""

from __future__ import annotations

import sys

import psycopg
import pytest
from psycopg import errors as pg

from hermes_repo import ConfigurationError, DatabaseBusyError, StateStore, StorageFullError
from hermes_repo.driver_errors import classify, translate
from hermes_repo.engine_pg import resolve_url
from hermes_repo.errors import ErrorKind, IntegrityViolation, QueryTimeoutError


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (pg.SerializationFailure("x"), ErrorKind.TRANSIENT),
        (pg.DeadlockDetected("x"), ErrorKind.TRANSIENT),
        (pg.LockNotAvailable("x"), ErrorKind.TRANSIENT),
        (pg.AdminShutdown("x"), ErrorKind.TRANSIENT),
        (pg.ConnectionFailure("x"), ErrorKind.TRANSIENT),  # class 08
        (pg.TooManyConnections("x"), ErrorKind.TRANSIENT),
        (psycopg.OperationalError("connection refused"), ErrorKind.TRANSIENT),  # no SQLSTATE
        (pg.DiskFull("x"), ErrorKind.DISK),
        (pg.OutOfMemory("x"), ErrorKind.DISK),
        (pg.QueryCanceled("x"), ErrorKind.TIMEOUT),
        (pg.UniqueViolation("x"), ErrorKind.CONSTRAINT),
        (pg.CheckViolation("x"), ErrorKind.CONSTRAINT),
        (pg.SyntaxError("x"), ErrorKind.OTHER),
        (psycopg.DataError("NUL"), ErrorKind.OTHER),
    ],
)
def test_each_sqlstate_maps_to_the_kind_the_write_core_acts_on(
    error: Exception, kind: ErrorKind
) -> None:
    assert classify(error) is kind


@pytest.mark.parametrize(
    ("error", "cls", "words"),
    [
        (pg.DiskFull("no space"), StorageFullError, "out of disk space"),
        (pg.DeadlockDetected("deadlock"), DatabaseBusyError, "deadlocked"),
        (pg.QueryCanceled("canceling"), QueryTimeoutError, "statement_timeout"),
        (pg.UniqueViolation("dup"), IntegrityViolation, "SQLSTATE 23505"),
    ],
)
def test_translation_names_the_cause_and_sqlstate(
    error: Exception, cls: type[Exception], words: str
) -> None:
    translated = translate(error)
    assert isinstance(translated, cls) and words in str(translated)


def test_no_url_and_no_environment_is_the_sqlite_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HERMES_REPO_URL", raising=False)
    assert resolve_url(None) is None


def test_the_environment_names_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_REPO_URL", "postgresql+psycopg://u:pw@h:5/db")
    target = resolve_url(None)
    assert target is not None and target.url.database == "db"
    assert "pw" not in repr(target) and "pw" not in str(target)


@pytest.mark.parametrize(
    "url",
    [
        "mysql://u:topsecret@h/db",
        "postgresql://u:topsecret@h/db",  # psycopg2's URL: not the driver we ship
        "sqlite:///tmp/x.db",
        "not a url topsecret",
        "postgresql+psycopg://u:topsecret@h",  # no database
    ],
)
def test_other_urls_are_refused_with_the_accepted_form_and_no_password(url: str) -> None:
    with pytest.raises(ConfigurationError, match=r"postgresql\+psycopg://") as caught:
        resolve_url(url)
    assert "topsecret" not in str(caught.value)
    assert caught.value.__cause__ is None or "topsecret" not in str(caught.value.__cause__)


def test_sqlite_by_name_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERMES_REPO_URL", "postgresql+psycopg://u@h/db")
    assert resolve_url("sqlite") is None


def test_a_server_url_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # what an install without it sees
    # The command works in any venv (the package itself is not on a package index).
    with pytest.raises(ConfigurationError, match=r"pip install 'psycopg\[binary\]>=3.2'"):
        StateStore.open(url="postgresql+psycopg://u:pw@127.0.0.1:1/db")
