"""Read commands on an empty PostgreSQL database: "no store", nothing created.

As on a file (`--home` naming a folder with no state.db), a read command pointed at a
database that holds no store says so and how to make one, exits 1, and leaves the
database as empty as it found it: no read builds a store where the user only meant to
look.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.cli.conftest import Cli
from tests.support.pg import PgServer

SECRET = "s3cret-pw"

READS = [
    ("sessions", "list"),
    ("sessions", "show", "20260101_093000_5f2a"),
    ("sessions", "export", "20260101_093000_5f2a"),
    ("search", "checkpoint"),
]


@pytest.fixture
def empty_database(pg_server: PgServer) -> Iterator[str]:
    """A fresh database with nothing in it, as `CREATE DATABASE` makes it."""
    name = pg_server.new_name("empty")
    url = pg_server.create(name)
    yield url.set(password=SECRET).render_as_string(hide_password=False)
    pg_server.drop(name)


def _tables(pg_server: PgServer, url: str) -> list[str]:
    """Every table in the database at ``url``, whatever its schema."""
    database = url.rsplit("/", 1)[1]
    plain = pg_server.url_of(database).set(drivername="postgresql")
    with psycopg.connect(plain.render_as_string(hide_password=False)) as conn:
        rows = conn.execute(
            "SELECT table_schema || '.' || table_name FROM information_schema.tables "
            "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
        ).fetchall()
    return sorted(str(r[0]) for r in rows)


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c[:2]))
def test_a_read_on_an_empty_database_says_no_store_and_creates_nothing(
    cli: Cli, pg_server: PgServer, empty_database: str, tmp_path: Path, command: tuple[str, ...]
) -> None:
    result = cli("--home", tmp_path / "home", "--url", empty_database, *command)

    assert result.code == 1, result.stdout + result.stderr
    assert len(result.error_lines) == 1, result.stderr
    line = result.error_lines[0]
    assert line.startswith("error: no store at postgresql+psycopg://"), line
    assert "db upgrade" in line and "import FILE" in line
    assert SECRET not in result.stdout + result.stderr
    assert _tables(pg_server, empty_database) == []


def test_doctor_on_an_empty_database_finds_no_store_and_creates_nothing(
    cli: Cli, pg_server: PgServer, empty_database: str, tmp_path: Path
) -> None:
    result = cli("--home", tmp_path / "home", "--url", empty_database, "doctor", "--json")

    # Exit 1, as the doctor of a missing file: the finding says there is no store.
    assert result.code == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    codes = [f["code"] for f in report["findings"]]
    assert "store-missing" in codes and "schema-behind" not in codes
    missing = report["findings"][codes.index("store-missing")]
    assert "no store" in missing["summary"] and "db upgrade" in missing["fix"]
    assert SECRET not in result.stdout + result.stderr
    assert _tables(pg_server, empty_database) == []


def test_a_read_still_works_once_the_store_is_made_there(
    cli: Cli, pg_server: PgServer, empty_database: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    assert cli("--home", home, "--url", empty_database, "db", "upgrade").code == 0

    listed = cli("--home", home, "--url", empty_database, "sessions", "list", "--json")

    assert listed.code == 0, listed.stderr
    assert json.loads(listed.stdout) == []
