"""A server's `db upgrade` and `StateStore.open(url, upgrade=True)` are one upgrade.

Both run `maintenance.upgrade.upgrade_server_schema`: the same decision under the same
migration lock, so a database either may migrate refuses both ways with the same words,
and one both may migrate ends at the same head.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from hermes_repo import SchemaMismatchError, StateStore
from hermes_repo.engine_pg import resolve_url
from hermes_repo.ops.server_schema import server_revision, upgrade_server
from hermes_repo.schema.head import HEAD_REVISION
from tests.support.pg import PgServer


@pytest.fixture
def database(pg_server: PgServer) -> Iterator[str]:
    name = pg_server.new_name("oneup")
    url = pg_server.create(name)
    yield url.render_as_string(hide_password=False)
    pg_server.drop(name)


def _execute(pg_server: PgServer, url: str, sql: str) -> None:
    plain = pg_server.url_of(url.rsplit("/", 1)[1]).set(drivername="postgresql")
    with psycopg.connect(plain.render_as_string(hide_password=False)) as conn:
        conn.execute(sql)


def _refusal_of_db_upgrade(url: str) -> str:
    target = resolve_url(url)
    assert target is not None
    with pytest.raises(SchemaMismatchError) as refused:
        upgrade_server(target)
    return str(refused.value)


def _refusal_of_open(url: str, home: Path) -> str:
    with pytest.raises(SchemaMismatchError) as refused:
        StateStore.open(home, url=url, upgrade=True, replay=False).close()
    return str(refused.value)


def test_a_database_of_someone_elses_tables_is_refused_alike_by_both(
    pg_server: PgServer, database: str, tmp_path: Path
) -> None:
    _execute(pg_server, database, "CREATE TABLE invoices (id integer primary key)")

    by_command = _refusal_of_db_upgrade(database)
    by_open = _refusal_of_open(database, tmp_path / "home")

    assert by_command == by_open
    assert "not a hermes_repo store" in by_command
    assert "--url" in by_command


def test_a_store_newer_than_this_code_is_refused_alike_by_both(
    pg_server: PgServer, database: str, tmp_path: Path
) -> None:
    with StateStore.open(tmp_path / "home", url=database, replay=False):
        pass
    _execute(pg_server, database, "UPDATE alembic_version SET version_num = '9999_future'")

    by_command = _refusal_of_db_upgrade(database)
    by_open = _refusal_of_open(database, tmp_path / "home")

    assert by_command == by_open
    assert "newer than this version of hermes_repo" in by_command


def test_an_empty_database_reaches_the_same_head_either_way(
    pg_server: PgServer, database: str, tmp_path: Path
) -> None:
    target = resolve_url(database)
    assert target is not None
    before, after = upgrade_server(target)
    assert (before.status, after.status, after.revision) == ("empty", "at-head", HEAD_REVISION)

    other = pg_server.new_name("oneup_open")
    url = pg_server.create(other).render_as_string(hide_password=False)
    try:
        with StateStore.open(tmp_path / "home2", url=url, upgrade=True, replay=False):
            pass
        opened = resolve_url(url)
        assert opened is not None
        assert server_revision(opened).revision == after.revision
    finally:
        pg_server.drop(other)
