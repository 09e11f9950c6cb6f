"""No command prints a password, however it was given and whatever goes wrong.

A role with a real password (:mod:`tests.support.secrets`) is reached with the password
in the URL's userinfo, as ``?password=`` and ``?sslpassword=`` query parameters, inside
``?conninfo=``, in ``PGPASSWORD`` and in a pgpass file; every command that can name the
store runs with it (``-v`` too, so log lines are printed), as do the ones that fail to
connect (a database that does not exist, a port nothing listens on) and the refusals of
a malformed URL. stdout and stderr of all of them are searched for the password.

Before: ``?password=`` was printed by `db upgrade`, `db current --json`, `doctor` and
every connection error.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.cli.conftest import Cli, Result
from tests.support.pg import PgServer
from tests.support.secrets import PASSWORD, SecretRole, leaks, secret_role

# Every command that can name the store, read-only or idempotent on a store at head.
NAMING = [
    ["db", "upgrade"],
    ["db", "current"],
    ["db", "current", "--json"],
    ["db", "check"],
    ["doctor"],
    ["doctor", "--json"],
    ["-v", "sessions", "list"],
    ["sessions", "list", "--json"],
    ["search", "anything"],
    ["pending", "list"],
    ["pending", "replay"],
    ["sessions", "repair", "--check-only"],
    ["snapshot", "list"],  # refused on a server: the refusal names the store
]
# Commands that fail to connect quickly (no retry budget of 20 s to wait out).
FAILING = [
    ["db", "current", "--json"],
    ["doctor"],
    ["-v", "pending", "replay", "--budget", "0.3"],
]


@pytest.fixture
def role(pg_server: PgServer, pg_template: str) -> Iterator[SecretRole]:
    with secret_role(pg_server, pg_template) as made:
        yield made


# The runs go two at a time (below), which one process cannot do: Alembic's context
# and the CLI's streams are process-wide. So each is a real console script.
pytestmark = pytest.mark.subprocess_cli


def _run_all(cli: Cli, runs: Sequence[tuple[Sequence[str], dict[str, str] | None]]) -> list[Result]:
    # Independent reads: two at a time halves the wall time of ~20 interpreter starts.
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(lambda run: cli(*run[0], env=run[1]), runs))


def _assert_no_leak(runs: Sequence[tuple[Sequence[str], object]], results: list[Result]) -> None:
    found = {
        " ".join(args): hit
        for (args, _), result in zip(runs, results, strict=True)
        for hit in leaks(result.stdout, result.stderr)
    }
    assert found == {}
    for result in results:
        assert "Traceback" not in result.stderr, result.stderr


def test_no_command_prints_the_password_of_a_working_url(
    cli: Cli, role: SecretRole, tmp_path: Path
) -> None:
    home = str(tmp_path / "home")
    forms = role.forms()
    runs: list[tuple[Sequence[str], dict[str, str] | None]] = [
        (["--home", home, "--url", forms["everywhere"], *args], None) for args in NAMING
    ]
    # The environment variable, and each other form on the commands that print the URL.
    # (Without --home: with it, the variable alone is refused as ambiguous.)
    runs += [(["doctor"], {"HERMES_REPO_URL": forms["everywhere"], "HERMES_HOME": home})]
    runs += [
        (["--home", home, "--url", forms[form], "db", "current", "--json"], None)
        for form in ("query", "conninfo")
    ]
    results = _run_all(cli, runs)
    _assert_no_leak(runs, results)
    by_args = {" ".join(args): r for (args, _), r in zip(runs, results, strict=True)}
    upgrade = by_args[f"--home {home} --url {forms['everywhere']} db upgrade"]
    assert upgrade.code == 0 and "already at head" in upgrade.stdout, upgrade.stderr
    current = by_args[f"--home {home} --url {forms['conninfo']} db current --json"]
    assert current.code == 0 and '"at-head"' in current.stdout, current.stderr
    # -v printed log lines, and they name the store masked.
    verbose = by_args[f"--home {home} --url {forms['everywhere']} -v sessions list"]
    assert verbose.code == 0, verbose.stderr


def test_failed_connections_and_bad_urls_never_print_the_password(
    cli: Cli, role: SecretRole, tmp_path: Path
) -> None:
    home = str(tmp_path / "home")
    runs: list[tuple[Sequence[str], dict[str, str] | None]] = [
        (["--home", home, "--url", url, *args], None)
        for url in (role.unknown_database(), role.closed_port())
        for args in FAILING
    ]
    malformed = [
        f"postgresql+psycopg://u:{PASSWORD}@127.0.0.1:notaport/db",
        f"mysql://u:{PASSWORD}@h/db?password={PASSWORD}",
    ]
    runs += [(["--home", home, "--url", url, "db", "current"], None) for url in malformed]
    # A copy into a server that is not there, and into malformed targets.
    runs += [
        (["--home", home, "--url", "sqlite", "db", "copy", "--to", target], None)
        for target in (role.closed_port(), malformed[0])
    ]
    results = _run_all(cli, runs)
    _assert_no_leak(runs, results)
    for (args, _), result in zip(runs, results, strict=True):
        assert result.code == 1, (args, result.stdout, result.stderr)
        if "doctor" not in args:  # the doctor reports the failure as a finding
            assert result.error_lines[-1].startswith("error: "), (args, result.stderr)


def test_pgpassword_and_pgpass_are_never_echoed(cli: Cli, role: SecretRole, tmp_path: Path) -> None:
    home = str(tmp_path / "home")
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"*:*:*:*:{PASSWORD}\n", encoding="utf-8")
    os.chmod(pgpass, 0o600)  # libpq ignores a pgpass file others can read
    plain = role.plain()
    missing = plain.replace(role.database, f"{role.database}_missing")
    runs: list[tuple[Sequence[str], dict[str, str] | None]] = []
    for env in ({"PGPASSWORD": PASSWORD}, {"PGPASSFILE": str(pgpass)}):
        runs += [
            (["--home", home, "--url", plain, *args], env)
            for args in (["db", "current", "--json"], ["doctor"], ["-v", "sessions", "list"])
        ]
        runs += [(["--home", home, "--url", missing, "db", "current"], env)]
    results = _run_all(cli, runs)
    _assert_no_leak(runs, results)
    assert results[0].code == 0, results[0].stderr  # the store was reached
