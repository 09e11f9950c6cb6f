"""Stores in schemas of their own, in one PostgreSQL database.

``?hermes_schema=NAME`` puts a store's tables (and its search configuration) in schema
NAME; the search extensions are found wherever the database has them installed (a
missing one goes to ``public``), so a second store never trips over the first one's.
Two stores in two schemas see only their own rows, and a store whose configured schema
does not exist is refused at open: the server would otherwise quietly work in the next
schema of the search_path, maybe another store's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql
from sqlalchemy.pool import NullPool

from hermes_repo import ConfigurationError, StateStore
from hermes_repo.engine_pg import create_pg_engine, resolve_url
from hermes_repo.maintenance.sqlite_only import libpq_url
from hermes_repo.schema import migrate
from hermes_repo.schema.server import check_database
from tests.support.pg import REQUIRE_ENV, PgServer, RawPg


@pytest.fixture
def empty_db(pg_server: PgServer) -> Iterator[str]:
    """A database without any store, with schemas tenant_a and tenant_b."""
    name = pg_server.new_name("schemas")
    url = pg_server.create(name).render_as_string(hide_password=False)
    raw = RawPg(url)
    try:
        raw.execute("CREATE SCHEMA tenant_a")
        raw.execute("CREATE SCHEMA tenant_b")
    finally:
        raw.close()
    yield url
    pg_server.drop(name)


def _in(url: str, schema: str) -> str:
    return f"{url}?hermes_schema={schema}"


def _write(store: StateStore, sid: str, text: str) -> None:
    store.write(lambda uow: uow.sessions.ensure(sid))
    store.append_message(sid, {"role": "user", "content": text})


def _tables(url: str) -> set[tuple[str, str]]:
    raw = RawPg(url)
    try:
        rows = raw.execute(
            "SELECT schemaname, tablename FROM pg_tables WHERE tablename IN "
            "('sessions', 'messages', 'state_meta', 'alembic_version')"
        ).fetchall()
    finally:
        raw.close()
    return {(str(s), str(t)) for s, t in rows}


def test_two_stores_in_two_schemas_each_keep_and_search_their_own_rows(
    empty_db: str, tmp_path: Path
) -> None:
    with StateStore.open(tmp_path / "a", url=_in(empty_db, "tenant_a")) as a:
        _write(a, "s-a", "alpha café deployment")
    with StateStore.open(tmp_path / "b", url=_in(empty_db, "tenant_b")) as b:
        _write(b, "s-b", "beta naïve rollout")
    names = ("sessions", "messages", "state_meta", "alembic_version")
    assert _tables(empty_db) == {(s, t) for s in ("tenant_a", "tenant_b") for t in names}
    for schema, mine, theirs, word, part in (
        ("tenant_a", "s-a", "s-b", "cafe", "ploym"),
        ("tenant_b", "s-b", "s-a", "naive", "ollou"),
    ):
        with StateStore.open(tmp_path / schema, url=_in(empty_db, schema)) as store:
            assert [s.id for s in store.list_sessions()] == [mine]
            assert store.load_conversation(theirs).messages == []
            # Words through the unaccent dictionary, substrings through pg_trgm: both
            # extensions' objects are found although neither is in this search_path.
            assert [h.session_id for h in store.search(word)] == [mine]
            assert [h.session_id for h in store.search(part)] == [mine]
            assert store.search("alpha" if schema == "tenant_b" else "beta") == []


def test_extensions_installed_in_another_stores_schema_are_found(
    empty_db: str, tmp_path: Path
) -> None:
    # What an older version left behind: the extensions inside the first store's schema.
    raw = RawPg(empty_db)
    try:
        raw.execute("CREATE EXTENSION pg_trgm SCHEMA tenant_a")
        raw.execute("CREATE EXTENSION unaccent SCHEMA tenant_a")
    finally:
        raw.close()
    with StateStore.open(tmp_path / "b", url=_in(empty_db, "tenant_b")) as b:
        _write(b, "s-b", "un café serré")
        assert [h.session_id for h in b.search("cafe serre")] == ["s-b"]


def test_a_schema_that_does_not_exist_is_refused_not_replaced_by_the_next_one(
    empty_db: str, tmp_path: Path
) -> None:
    with StateStore.open(tmp_path / "public", url=empty_db) as public:
        _write(public, "s-public", "the public store")
    before = _tables(empty_db)
    # The obvious workaround: a search_path whose first schema is missing. The server
    # would work in public, the other store's schema.
    for url in (
        _in(empty_db, "tenant_x"),
        f"{empty_db}?options=-csearch_path%3Dtenant_x,public",
    ):
        with pytest.raises(ConfigurationError) as caught:
            StateStore.open(tmp_path / "x", url=url)
        message = str(caught.value)
        assert "tenant_x does not exist" in message and "CREATE SCHEMA tenant_x" in message
    assert _tables(empty_db) == before


def test_a_search_path_reaching_another_stores_tables_is_refused(
    empty_db: str, tmp_path: Path
) -> None:
    with StateStore.open(tmp_path / "public", url=empty_db) as public:
        _write(public, "s-public", "the public store")
    before = _tables(empty_db)
    # tenant_a exists but is empty: its unqualified table names reach public's store.
    with pytest.raises(ConfigurationError) as caught:
        StateStore.open(tmp_path / "a", url=f"{empty_db}?options=-csearch_path%3Dtenant_a,public")
    message = str(caught.value)
    assert "lacks store tables" in message and "in schema public" in message
    assert "hermes_schema=tenant_a" in message
    assert _tables(empty_db) == before
    # Named alone, the same schema becomes a store of its own.
    with StateStore.open(tmp_path / "a", url=_in(empty_db, "tenant_a")) as a:
        assert a.list_sessions() == []


@pytest.mark.parametrize("schema", ["Tenant_A", "a-b", "x;drop", "1abc", "x" * 64])
def test_a_schema_name_that_is_not_a_plain_name_is_refused(
    empty_db: str, tmp_path: Path, schema: str
) -> None:
    with pytest.raises(ConfigurationError, match="hermes_schema"):
        StateStore.open(tmp_path / "home", url=_in(empty_db, schema))


def test_missing_extensions_are_installed_once_in_public_for_every_schema(
    empty_db: str, tmp_path: Path
) -> None:
    # In public, not in the first store's schema: dropping that schema must not take
    # the other stores' search indexes along.
    for schema in ("tenant_a", "tenant_b"):
        StateStore.open(tmp_path / schema, url=_in(empty_db, schema)).close()
    raw = RawPg(empty_db)
    try:
        versions = {
            schema: raw.execute(
                sql.SQL("SELECT version_num FROM {}.alembic_version")
                .format(sql.Identifier(schema))
                .as_string(None)
            ).fetchall()
            for schema in ("tenant_a", "tenant_b")
        }
        where = raw.execute(
            "SELECT e.extname, n.nspname FROM pg_extension e JOIN pg_namespace n "
            "ON n.oid = e.extnamespace WHERE e.extname IN ('pg_trgm', 'unaccent')"
        ).fetchall()
        raw.execute("DROP SCHEMA tenant_a CASCADE")
    finally:
        raw.close()
    head = [(migrate.head_revision(),)]
    assert versions == {"tenant_a": head, "tenant_b": head}
    assert sorted(where) == [("pg_trgm", "public"), ("unaccent", "public")]
    with StateStore.open(tmp_path / "b", url=_in(empty_db, "tenant_b")) as b:
        _write(b, "s-b", "still searchable")
        assert [h.session_id for h in b.search("searchable")] == ["s-b"]


def test_the_psql_commands_the_store_hands_out_reach_its_schema(
    empty_db: str, tmp_path: Path
) -> None:
    url = _in(empty_db, "tenant_a")
    with StateStore.open(tmp_path / "a", url=url) as a:
        _write(a, "s-a", "one row in tenant_a")
    target = resolve_url(url)
    assert target is not None
    shown = libpq_url(target)
    assert "hermes_schema" not in shown  # libpq would refuse an unknown parameter
    psql = shutil.which("psql")
    if psql is None:
        why = "psql (PostgreSQL's client, installed with the server) is not on PATH"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {why}")
        pytest.skip(why)
    out = subprocess.run(
        [psql, shown, "-Atc", "SELECT current_schema(), count(*) FROM messages"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert out.strip() == "tenant_a|1"


def test_a_schema_option_dropped_on_the_way_is_refused_naming_the_role_setting(
    empty_db: str,
) -> None:
    # What a pooler that drops startup options leaves: a connection asked for tenant_a
    # working in the default search_path. Checked on a connection made without it.
    target = resolve_url(empty_db)
    assert target is not None
    engine = create_pg_engine(target, poolclass=NullPool)
    try:
        with engine.connect() as conn, pytest.raises(ConfigurationError) as caught:
            check_database(conn, "the store", schema="tenant_a")
    finally:
        engine.dispose()
    message = str(caught.value)
    assert "dropped the startup option" in message
    assert "SET search_path = tenant_a" in message
