"""Refusals waiting cannot fix, told apart from outages without a server.

The server's refusals (a wrong password included: the test cluster checks the
passwords of one role group) are proved for real in tests/faults/test_pg_refusals.py;
libpq's texts for them and the SQLSTATEs are also checked here on psycopg's own error
classes, so each classification holds without a server.
"""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors as pg

from hermes_repo import ServerConfigError
from hermes_repo.driver_errors import classify, translate
from hermes_repo.errors import ErrorKind

FAILED = 'connection failed: connection to server at "10.0.0.5", port 5432 failed: '


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (pg.InvalidPassword("x"), ErrorKind.CONFIG),  # 28P01
        (pg.InvalidAuthorizationSpecification("x"), ErrorKind.CONFIG),  # 28000
        (pg.InvalidCatalogName("x"), ErrorKind.CONFIG),  # 3D000
        (pg.InvalidSchemaName("x"), ErrorKind.CONFIG),  # 3F000
        (
            psycopg.OperationalError(
                FAILED + 'FATAL:  password authentication failed for user "app"'
            ),
            ErrorKind.CONFIG,
        ),
        (psycopg.OperationalError(FAILED + "fe_sendauth: no password supplied"), ErrorKind.CONFIG),
        (
            psycopg.OperationalError(
                FAILED + 'FATAL:  no pg_hba.conf entry for host "10.0.0.9", user "app"'
            ),
            ErrorKind.CONFIG,
        ),
        (
            psycopg.OperationalError(FAILED + "FATAL:  unsupported startup parameter: options"),
            ErrorKind.CONFIG,  # PgBouncer refusing hermes_schema's search_path option
        ),
        (
            psycopg.OperationalError(
                "failed to resolve host 'db.example': [Errno -3] Temporary failure in name "
                "resolution"
            ),
            ErrorKind.TRANSIENT,  # the resolver is down: an outage, like a refused port
        ),
        (
            psycopg.OperationalError(FAILED + "Connection refused\n\tIs the server running"),
            ErrorKind.TRANSIENT,
        ),
        (
            psycopg.OperationalError(FAILED + "FATAL:  the database system is starting up"),
            ErrorKind.TRANSIENT,
        ),
    ],
)
def test_a_refusal_is_config_and_an_outage_stays_transient(
    error: Exception, kind: ErrorKind
) -> None:
    assert classify(error) is kind


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (pg.InvalidPassword("x"), "refused the password"),
        (
            psycopg.OperationalError(
                FAILED + 'FATAL:  password authentication failed for user "app"'
            ),
            "PGPASSWORD",
        ),
        (pg.InvalidSchemaName("x"), "CREATE SCHEMA"),
    ],
)
def test_a_refusal_translates_to_its_cause_and_fix(error: Exception, words: str) -> None:
    translated = translate(error, action="opening the store")
    assert isinstance(translated, ServerConfigError) and words in str(translated)
    assert translated.kind is ErrorKind.CONFIG
