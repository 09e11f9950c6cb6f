"""The schema is built only by Alembic, in one transaction, and matches the models."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, inspect, text
from sqlalchemy.pool import NullPool

from hermes_repo import SchemaMismatchError, StateStore
from hermes_repo.engine import WRITE_OPTION, create_store_engine
from hermes_repo.schema import fts, migrate

ROOT = Path(__file__).resolve().parents[2]

EXPECTED_TABLES = {
    "alembic_version",
    "sessions",
    "messages",
    "state_meta",
    "langgraph_checkpoints",
    "langgraph_blobs",
    "langgraph_writes",
}
EXPECTED_INDEXES = {
    "ix_sessions_started_at",
    "ix_sessions_parent_session_id",
    "ix_messages_session_id_id",
    "ix_messages_session_id_active_id",
    "ix_messages_over_fts_cap",
    "ix_messages_over_fts_trigram_cap",
}
EXPECTED_TRIGGERS = {
    "messages_fts_insert",
    "messages_fts_update",
    "messages_fts_delete",
    "messages_fts_trigram_insert",
    "messages_fts_trigram_update",
    "messages_fts_trigram_delete",
}


def _engine(path: Path) -> Engine:
    return create_store_engine(path, poolclass=NullPool)


def _objects(engine: Engine) -> dict[str, set[str]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
        ).all()
    out: dict[str, set[str]] = {}
    for type_, name in rows:
        out.setdefault(type_, set()).add(name)
    return out


def test_empty_file_upgrades_to_exactly_the_expected_schema(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "state.db")
    migrate.upgrade(engine)
    objs = _objects(engine)
    fts_tables = {n for ix in fts.INDEXES for n in (ix.name, *ix.shadow_tables)}
    assert objs["table"] == EXPECTED_TABLES | fts_tables
    assert objs["trigger"] == EXPECTED_TRIGGERS
    assert objs["view"] == {"messages_fts_src", "messages_fts_trigram_src"}
    assert objs["index"] >= EXPECTED_INDEXES
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
        uniques = inspect(conn).get_unique_constraints("messages")
    assert [u["column_names"] for u in uniques] == [["session_id", "uid"]]


def test_head_to_base_to_head_round_trips(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "state.db")
    migrate.upgrade(engine)
    migrate.downgrade(engine, "base")
    assert _objects(engine) == {"table": {"alembic_version"}}
    migrate.upgrade(engine)
    assert _objects(engine)["trigger"] == EXPECTED_TRIGGERS


def test_models_and_migrations_have_no_drift(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "state.db")
    migrate.upgrade(engine)
    assert migrate.check(engine) is None


def test_runtime_fts_ddl_equals_what_the_migration_created(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "state.db")
    migrate.upgrade(engine)
    with engine.connect() as conn:
        stored = dict(
            conn.execute(text("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")).all()
        )
    for ix in fts.INDEXES:
        view, table, *triggers = (ix.view_ddl(), ix.table_ddl(), *ix.trigger_ddl())
        assert stored[ix.source_view] == view
        assert stored[ix.name] == table
        for name, ddl in zip(ix.trigger_names, triggers, strict=True):
            assert stored[name] == ddl


def _revision_module(filename: str) -> Any:
    path = migrate.migrations_dir() / "versions" / filename
    spec = importlib.util.spec_from_file_location(f"rev_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_head_revision_ddl_is_what_the_runtime_creates_and_drops() -> None:
    head = _revision_module("0007_tool_call_search.py")
    runtime = fts.create_statements()
    assert list(head.FTS_TABLES) == [s for s in runtime if not s.startswith("CREATE TRIGGER")]
    assert list(head.FTS_TRIGGERS) == [s for s in runtime if s.startswith("CREATE TRIGGER")]
    assert list(head.FTS_DROP) == fts.drop_statements()
    assert list(head.LONG_ROW_INDEXES) == list(fts.LONG_ROW_INDEXES)


def test_downgrade_to_0005_recreates_exactly_the_frozen_0002_ddl() -> None:
    caps, head = (
        _revision_module("0002_search_caps.py"),
        _revision_module("0007_tool_call_search.py"),
    )
    assert head.down_revision == "0006_langgraph_checkpoints"
    assert head.FTS_TABLES_0005 == caps.FTS_TABLES
    assert head.FTS_TRIGGERS_0005 == caps.FTS_TRIGGERS
    assert head.LONG_ROW_INDEXES_0005 == caps.LONG_ROW_INDEXES
    assert head.FTS_DROP == caps.FTS_DROP


def test_downgrade_to_0001_recreates_exactly_the_frozen_0001_ddl() -> None:
    initial, head = _revision_module("0001_initial.py"), _revision_module("0002_search_caps.py")
    assert [*head.FTS_TABLES_0001, *head.FTS_TRIGGERS_0001] == sorted(
        initial.FTS_CREATE, key=lambda s: s.startswith("CREATE TRIGGER")
    )
    assert list(head.FTS_DROP) == list(initial.FTS_DROP)


def _store_at_0001_with_rows(tmp_path: Path) -> Path:
    """A store left at revision 0001 holding rows the new DDL treats differently: a tool
    row with CJK, a row longer than both caps, and an fts_stale marker."""
    home = tmp_path / "old"
    home.mkdir()
    engine = _engine(home / "state.db")
    migrate.upgrade(engine, "0001_initial")
    rows = [
        ("tool", "错误：连接超时，请稍后重试"),
        ("assistant", "short answer about zebracorn"),
        ("user", "x " * (fts.WORD_CAP // 2) + " tailneedle"),
    ]
    with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        conn.execute(text("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)"))
        for i, (role, content) in enumerate(rows):
            conn.execute(
                text(
                    "INSERT INTO messages (session_id, uid, role, content, timestamp) "
                    "VALUES ('s', :uid, :role, :content, :ts)"
                ),
                {"uid": f"u{i}", "role": role, "content": content, "ts": float(i)},
            )
        conn.execute(
            text("INSERT INTO state_meta (key, value, updated_at) VALUES ('fts_stale', '{}', 0)")
        )
    engine.dispose()
    return home


def test_db_upgrade_brings_a_0001_store_to_head_with_current_indexes(tmp_path: Path) -> None:
    home = _store_at_0001_with_rows(tmp_path)
    with pytest.raises(SchemaMismatchError, match="db upgrade"):
        StateStore.open(home)
    script = Path(sys.executable).parent / "hermes-repo"
    done = subprocess.run(
        [str(script), "--home", str(home), "db", "upgrade"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    engine = _engine(home / "state.db")
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()
        stored = dict(
            conn.execute(text("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")).all()
        )
        assert fts.integrity_errors(conn) == {}
        assert fts.coverage_check(conn) == []
        assert fts.stale_marker(conn) is None
    for statement in (*fts.create_statements(), *fts.LONG_ROW_INDEXES):
        assert statement in stored.values()
    assert migrate.check(engine) is None
    with StateStore.open(home) as store:
        assert [h.role for h in store.search("连接超时")] == ["tool"]
        assert [h.role for h in store.search("tailneedle")] == ["user"]


def test_head_to_0001_and_back_keeps_every_index_sound(tmp_path: Path) -> None:
    home = _store_at_0001_with_rows(tmp_path)
    engine = _engine(home / "state.db")
    migrate.upgrade(engine)
    migrate.downgrade(engine, "0001_initial")
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == "0001_initial"
        names = {r[0] for r in conn.execute(text("SELECT name FROM sqlite_master"))}
        assert not {"ix_messages_over_fts_cap", "ix_messages_over_fts_trigram_cap"} & names
        assert fts.integrity_errors(conn) == {}
    migrate.upgrade(engine)
    with engine.connect() as conn:
        assert fts.integrity_errors(conn) == {}
        assert fts.coverage_check(conn) == []


def test_failing_migration_leaves_no_half_applied_schema(tmp_path: Path) -> None:
    scripts = tmp_path / "migrations"
    shutil.copytree(migrate.migrations_dir(), scripts)
    (scripts / "versions" / "0002_broken.py").write_text(
        '"""A revision that fails halfway."""\n'
        "from alembic import op\n"
        'revision = "0002_broken"\n'
        f'down_revision = "{migrate.head_revision()}"\n'
        "branch_labels = None\n"
        "depends_on = None\n"
        "def upgrade():\n"
        '    op.execute("CREATE TABLE half_applied (x INTEGER)")\n'
        '    op.execute("CREATE INDEX ix_half ON half_applied (x)")\n'
        '    op.execute("INSERT INTO no_such_table VALUES (1)")\n'
        "def downgrade():\n"
        "    pass\n"
    )
    engine = _engine(tmp_path / "state.db")
    migrate.upgrade(engine)
    cfg_conn = engine.execution_options(**{WRITE_OPTION: True}).connect()
    try:
        cfg = migrate.alembic_config(cfg_conn)
        cfg.set_main_option("script_location", str(scripts))
        with pytest.raises(Exception, match="no_such_table"):
            command.upgrade(cfg, "head")
    finally:
        cfg_conn.close()
    objs = _objects(engine)
    assert "half_applied" not in objs["table"]
    with engine.connect() as conn:
        assert migrate.current_revision(conn) == migrate.head_revision()


def test_alembic_command_line_upgrades_downgrades_and_checks(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    alembic = [sys.executable, "-m", "alembic", "-x", f"url={url}"]
    for args in (["upgrade", "head"], ["check"], ["downgrade", "base"], ["upgrade", "head"]):
        done = subprocess.run(
            [*alembic, *args], cwd=ROOT, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
    done = subprocess.run(
        [*alembic, "current"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert migrate.head_revision() in done.stdout


def test_alembic_without_url_uses_the_default_home_inside_hermes_home(tmp_path: Path) -> None:
    home = tmp_path / "hh"
    env = {"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Our store's folder inside Hermes' home: Hermes' own state.db lives beside it.
    assert (home / "hermes-repo" / "state.db").is_file()
    assert not (home / "state.db").exists()
