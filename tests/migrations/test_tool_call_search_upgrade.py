"""Revision 0007: a store written before it finds the words of its tool calls after the
upgrade, on SQLite and PostgreSQL; the downgrade restores 0005's definitions."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, inspect, text
from sqlalchemy.pool import NullPool

from hermes_repo import StateStore
from hermes_repo.engine import WRITE_OPTION, create_store_engine
from hermes_repo.repositories.search import PostgresDialect, SearchQuery, SearchRouter
from hermes_repo.schema import fts, migrate, pg_search
from tests.support import damage
from tests.support.fts_checks import MODULE
from tests.support.pg_search_db import pg_database

BEFORE = "0006_langgraph_checkpoints"


def _call(name: str, arguments: str) -> str:
    return json.dumps(
        [{"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]
    )


# (uid, role, content, content_text, tool_calls): rows as revision 0005's code wrote
# them. u2 is the importer's turn without text, whose call text it kept in content_text.
ROWS: list[tuple[str, str, str | None, str | None, str | None]] = [
    ("u0", "user", "why does the deploy fail?", None, None),
    (
        "u1",
        "assistant",
        "Let me read the config.",
        None,
        _call("read_file", '{"path": "/etc/frobnicator.yaml"}'),
    ),
    (
        "u2",
        "assistant",
        None,
        'grep_logs {"pattern": "quokka"}',
        _call("grep_logs", '{"pattern": "quokka"}'),
    ),
    ("u3", "tool", "key: value", None, None),
]


def _revision_0007() -> Any:
    path = migrate.migrations_dir() / "versions" / "0007_tool_call_search.py"
    spec = importlib.util.spec_from_file_location("rev_0007", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_rows(engine: Engine) -> None:
    with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        conn.execute(text("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)"))
        for i, (uid, role, content, content_text, calls) in enumerate(ROWS):
            conn.execute(
                text(
                    "INSERT INTO messages (session_id, uid, role, content, content_text,"
                    " tool_calls, timestamp) VALUES ('s', :uid, :role, :content, :ct, :calls, :ts)"
                ),
                {
                    "uid": uid,
                    "role": role,
                    "content": content,
                    "ct": content_text,
                    "calls": calls,
                    "ts": float(i),
                },
            )


def _store_at_0005(tmp_path: Path) -> tuple[Path, Engine]:
    home = tmp_path / "old"
    home.mkdir()
    engine = create_store_engine(home / "state.db", poolclass=NullPool)
    migrate.upgrade(engine, BEFORE)
    _write_rows(engine)
    return home, engine


def _by_uid(engine: Engine, column: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(text(f"SELECT uid, {column} FROM messages")).all())


def _fts_ids(engine: Engine, term: str) -> list[int]:
    with engine.connect() as conn:
        return [
            r[0]
            for r in conn.execute(
                text("SELECT rowid FROM messages_fts WHERE messages_fts MATCH :t"), {"t": term}
            )
        ]


def test_a_0005_store_finds_words_of_its_tool_calls_after_the_upgrade(tmp_path: Path) -> None:
    home, engine = _store_at_0005(tmp_path)
    assert _fts_ids(engine, "frobnicator") == []  # 0005 indexed the text alone

    migrate.upgrade(engine)

    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
        assert fts.integrity_errors(conn) == {}
        assert fts.coverage_check(conn) == []
        stored = {
            r[0] for r in conn.execute(text("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
        }
    assert set(fts.create_statements()) | set(fts.LONG_ROW_INDEXES) <= stored
    assert migrate.check(engine) is None
    # The importer's copy moved out of content_text: each word is indexed once.
    assert _by_uid(engine, "content_text")["u2"] is None
    assert _by_uid(engine, "calls_text") == {
        "u0": None,
        "u1": "read_file path /etc/frobnicator.yaml",
        "u2": "grep_logs pattern quokka",
        "u3": None,
    }
    engine.dispose()
    with StateStore.open(home) as store:
        assert [h.role for h in store.search("frobnicator")] == ["assistant"]
        assert [h.role for h in store.search("quokka")] == ["assistant"]
        assert [h.role for h in store.search("grep_logs")] == ["assistant"]
        # Writes after the upgrade are indexed by the new triggers.
        store.append_message(
            "s",
            {
                "role": "assistant",
                "content": "again",
                "tool_calls": json.loads(_call("sh", '{"cmd": "wombat"}')),
            },
        )
        assert [h.role for h in store.search("wombat")] == ["assistant"]


def test_the_downgrade_restores_0005s_index_and_the_importers_text(tmp_path: Path) -> None:
    _, engine = _store_at_0005(tmp_path)
    with engine.connect() as conn:
        before = {
            r[0] for r in conn.execute(text("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
        }
    migrate.upgrade(engine)

    migrate.downgrade(engine, BEFORE)

    with engine.connect() as conn:
        assert migrate.current_revision(conn) == BEFORE
        after = {
            r[0] for r in conn.execute(text("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL"))
        }
        assert fts.integrity_errors(conn) == {}
        columns = {c["name"] for c in inspect(conn).get_columns("messages")}
    assert after == before and "calls_text" not in columns
    assert _by_uid(engine, "content_text")["u2"] == "grep_logs pattern quokka"
    assert _fts_ids(engine, "quokka") != [] and _fts_ids(engine, "frobnicator") == []
    migrate.upgrade(engine)
    with engine.connect() as conn:
        assert fts.integrity_errors(conn) == {}
        assert fts.coverage_check(conn) == []
    assert _fts_ids(engine, "frobnicator") != []


def test_the_upgrade_rebuilds_an_index_damaged_before_it(tmp_path: Path) -> None:
    home, engine = _store_at_0005(tmp_path)
    engine.dispose()
    damage.fts_delete_structure(home / "state.db", "messages_fts", module=MODULE)

    migrate.upgrade(engine)

    with engine.connect() as conn:
        assert fts.integrity_errors(conn) == {}
        assert fts.coverage_check(conn) == []
    assert len(_fts_ids(engine, "frobnicator")) == 1


@pytest.mark.pg
def test_a_0005_postgresql_store_finds_words_of_its_tool_calls_after_the_upgrade() -> None:
    rev = _revision_0007()
    with pg_database(revision=BEFORE) as engine:
        _write_rows(engine)

        migrate.upgrade(engine)

        with engine.connect() as conn:
            assert migrate.current_revision(conn) == migrate.head_revision()
            router = SearchRouter(PostgresDialect(conn))
            for word in ("frobnicator", "quokka", "grep_logs", "frob"):
                hits = router.search(SearchQuery(word, limit=10))
                assert [h.role for h in hits] == ["assistant"], word
        assert _by_uid(engine, "content_text")["u2"] is None
        assert migrate.check(engine) is None

        migrate.downgrade(engine, BEFORE)

        with engine.connect() as conn:
            columns = {c["name"] for c in inspect(conn).get_columns("messages")}
            vector = conn.execute(
                text(
                    "SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d JOIN pg_attribute a"
                    " ON a.attrelid = d.adrelid AND a.attnum = d.adnum"
                    " WHERE a.attname = :col AND d.adrelid = 'messages'::regclass"
                ),
                {"col": pg_search.VECTOR_COLUMN},
            ).scalar_one()
        assert "calls_text" not in columns and "calls_text" not in vector
        assert pg_search.VECTOR_COLUMN in rev.PG_CREATE_0005[0]
        assert _by_uid(engine, "content_text")["u2"] == "grep_logs pattern quokka"
        migrate.upgrade(engine)
        with engine.connect() as conn:
            hits = SearchRouter(PostgresDialect(conn)).search(SearchQuery("frobnicator", limit=10))
        assert [h.role for h in hits] == ["assistant"]


def test_the_upgrade_leaves_tool_calls_that_are_not_json_text_as_they_are(tmp_path: Path) -> None:
    _, engine = _store_at_0005(tmp_path)
    with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        # Values another tool wrote: a number, text that is not JSON, a JSON string.
        for uid, calls in (("odd1", 42), ("odd2", "[{not json"), ("odd3", '"just text"')):
            conn.execute(
                text(
                    "INSERT INTO messages (session_id, uid, role, tool_calls, timestamp)"
                    " VALUES ('s', :uid, 'assistant', :calls, 9)"
                ),
                {"uid": uid, "calls": calls},
            )

    migrate.upgrade(engine)

    calls = _by_uid(engine, "calls_text")
    assert [calls[u] for u in ("odd1", "odd2", "odd3")] == [None, None, None]
    assert calls["u1"] == "read_file path /etc/frobnicator.yaml"
    with engine.connect() as conn:
        assert fts.integrity_errors(conn) == {}
