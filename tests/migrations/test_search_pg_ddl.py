"""Revision 0004: frozen PostgreSQL search DDL, a no-op on SQLite, clean on PostgreSQL."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, text
from sqlalchemy.pool import NullPool

from hermes_repo.engine import create_store_engine
from hermes_repo.models import Base
from hermes_repo.schema import fts, migrate, pg_search
from tests.support.pg_search_db import pg_database


def _revision(filename: str = "0004_postgresql_search.py") -> Any:
    path = migrate.migrations_dir() / "versions" / filename
    spec = importlib.util.spec_from_file_location(f"rev_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_revision_ddl_is_what_the_runtime_holds() -> None:
    # 0004 made the configuration the runtime still holds; 0007 remade what reads the
    # projection (the generated vector and the indexes), and its downgrade restores 0004's.
    rev, head = _revision(), _revision("0007_tool_call_search.py")
    assert rev.down_revision == "0003_session_extra"
    assert tuple(rev.SEARCH_CREATE[:2]) == pg_search.CREATE_STATEMENTS[:2]
    assert tuple(head.PG_CREATE) == pg_search.CREATE_STATEMENTS[2:]
    assert tuple(head.PG_CREATE_0005) == tuple(rev.SEARCH_CREATE[2:])
    assert rev.EXTENSIONS == head.EXTENSIONS == pg_search.EXTENSIONS
    assert rev.EXTENSION_SCHEMA_SQL == head.EXTENSION_SCHEMA_SQL == pg_search.EXTENSION_SCHEMA_SQL
    assert rev.EXTENSION_HOME_SQL == pg_search.EXTENSION_HOME_SQL
    assert tuple(rev.SEARCH_DROP) == pg_search.DROP_STATEMENTS
    assert tuple(head.PG_DROP) == pg_search.DROP_STATEMENTS[:4]


def test_sqlite_store_at_head_has_no_postgresql_search_objects(tmp_path: Path) -> None:
    engine = create_store_engine(tmp_path / "state.db", poolclass=NullPool)
    migrate.upgrade(engine)
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
        columns = {c["name"] for c in inspect(conn).get_columns("messages")}
        indexes = {i["name"] for i in inspect(conn).get_indexes("messages")}
    assert pg_search.VECTOR_COLUMN not in columns
    assert not indexes & pg_search.DERIVED_NAMES
    migrate.downgrade(engine, "0003_session_extra")
    migrate.upgrade(engine)


def _shape(engine: Engine) -> tuple[set[str], set[str]]:
    with engine.connect() as conn:
        insp = inspect(conn)
        columns = {c["name"] for c in insp.get_columns("messages")}
        indexes = {i["name"] or "" for i in insp.get_indexes("messages")}
    return columns, indexes


@pytest.mark.pg
def test_postgresql_search_objects_are_all_derived_names_and_drop_cleanly() -> None:
    with pg_database() as engine:
        with engine.begin() as conn:  # the store's tables at head, without the search objects
            for statement in pg_search.DROP_STATEMENTS:
                conn.execute(text(statement))
        before = _shape(engine)
        for _ in range(2):  # created, dropped, and created again
            with engine.begin() as conn:
                schemas = pg_search.extension_schemas(conn)
                for statement in pg_search.render(pg_search.CREATE_STATEMENTS, schemas):
                    conn.execute(text(statement))
            columns, indexes = _shape(engine)
            added = (columns - before[0]) | (indexes - before[1])
            assert added == set(pg_search.DERIVED_NAMES)
            assert added <= fts.DERIVED_NAMES  # autogenerate leaves them alone
            model_columns = {c.name for c in Base.metadata.tables["messages"].columns}
            assert columns - model_columns == {pg_search.VECTOR_COLUMN}
            with engine.begin() as conn:
                for statement in pg_search.DROP_STATEMENTS:
                    conn.execute(text(statement))
            assert _shape(engine) == before


@pytest.mark.pg
def test_postgresql_vector_follows_updates_of_the_row() -> None:
    # The database keeps the generated column: an edit of the text or the tool name is
    # searchable at once, with no trigger that could be detached or drift.
    with pg_database() as engine, engine.begin() as conn:
        conn.execute(text("INSERT INTO sessions (id, started_at) VALUES ('s', 0)"))
        conn.execute(
            text(
                "INSERT INTO messages (session_id, uid, role, content, timestamp)"
                " VALUES ('s', 'u', 'tool', 'before text', 0)"
            )
        )
        conn.execute(text("UPDATE messages SET content = 'after text', tool_name = 'grep_tool'"))
        found = conn.execute(
            text(
                f"SELECT count(*) FROM messages WHERE {pg_search.VECTOR_COLUMN}"
                f" @@ to_tsquery('{pg_search.CONFIG}', 'after & grep & tool & !before')"
            )
        ).scalar_one()
    assert found == 1
