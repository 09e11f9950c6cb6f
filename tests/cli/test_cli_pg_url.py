"""``--url`` / ``HERMES_REPO_URL``: the schema commands and the open gate on a server.

A store created on either backend ends at the same head revision; ``db upgrade`` brings
an empty or older PostgreSQL database there; the open refuses one behind head with the
command that fixes it; no output ever shows the password (the server trusts local
connections, so any password is accepted and must still be masked).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.pool import NullPool

from hermes_repo import SchemaMismatchError, StateStore
from hermes_repo.engine_pg import create_pg_engine, resolve_url
from hermes_repo.schema import migrate
from tests.cli.conftest import Cli
from tests.support.pg import PgServer

PASSWORD = "pw-never-shown"


@pytest.fixture
def empty_url(pg_server: PgServer) -> Iterator[str]:
    name = pg_server.new_name("empty")
    url = pg_server.create(name).set(password=PASSWORD)
    yield url.render_as_string(hide_password=False)
    pg_server.drop(name)


@pytest.mark.usefixtures("backend")
def test_a_store_on_either_backend_opens_at_the_same_head(home: Path) -> None:
    with StateStore.open(home) as store:
        health = store.health()
    assert health.revision == health.head == migrate.head_revision()


def test_db_upgrade_on_a_server_migrates_without_printing_the_password(
    cli: Cli, tmp_path: Path, empty_url: str
) -> None:
    home = tmp_path / "home"
    up = cli("--home", home, "--url", empty_url, "db", "upgrade")
    assert up.code == 0, up.stderr
    assert f"empty -> {migrate.head_revision()}" in up.stdout and "***" in up.stdout
    current = cli(
        "db", "current", "--json", env={"HERMES_REPO_URL": empty_url, "HERMES_HOME": str(home)}
    )
    assert json.loads(current.stdout)["status"] == "at-head"
    check = cli("--home", home, "--url", empty_url, "db", "check")
    assert check.code == 0 and "no drift" in check.stdout
    again = cli("--home", home, "--url", empty_url, "db", "upgrade")
    assert "already at head" in again.stdout
    for result in (up, current, check, again):
        assert PASSWORD not in result.stdout + result.stderr
    assert not (home / "state.db").exists()  # the server holds the data, not the folder


def test_a_server_store_behind_head_is_refused_with_the_url_upgrade_command(
    tmp_path: Path, empty_url: str, cli: Cli
) -> None:
    target = resolve_url(empty_url)
    assert target is not None
    engine = create_pg_engine(target, poolclass=NullPool)
    try:
        migrate.upgrade(engine, "0002_search_caps")
    finally:
        engine.dispose()
    with pytest.raises(SchemaMismatchError, match=r"hermes-repo --url URL db upgrade") as caught:
        StateStore.open(tmp_path / "home", url=empty_url)
    assert PASSWORD not in str(caught.value)
    listed = cli("--url", empty_url, "sessions", "list")
    assert listed.code == 1 and "db upgrade" in listed.stderr and PASSWORD not in listed.stderr
    with StateStore.open(tmp_path / "home", url=empty_url, upgrade=True) as store:
        assert store.health().revision == migrate.head_revision()


def test_an_unsupported_url_is_refused_naming_the_accepted_form(cli: Cli) -> None:
    result = cli("--url", "mysql://root:topsecret@db/x", "sessions", "list")
    assert result.code == 1
    assert "postgresql+psycopg://" in result.stderr and "topsecret" not in result.stderr
