"""Engine hooks, file safety, driver choice, and the schema gate of StateStore.open."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from sqlalchemy import text

from hermes_repo import SchemaMismatchError, StateStore, UnsafePathError
from hermes_repo.engine import create_store_engine, select_driver
from hermes_repo.maintenance.snapshots import list_snapshots
from hermes_repo.schema import migrate
from tests.support.stores import file_mode, new_session


def test_new_store_is_built_at_head_with_private_file_modes(tmp_path: Path) -> None:
    home = tmp_path / "new-home"
    with StateStore.open(home) as store:
        store.append_message(new_session(store), {"role": "user", "content": "x"})
        assert store.health().at_head
        assert file_mode(home) == 0o700
        for name in ("state.db", "state.db-wal", "state.db-shm"):
            if (home / name).exists():
                assert file_mode(home / name) == 0o600, name


def test_symlink_in_place_of_state_db_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "elsewhere.db").write_bytes(b"")
    (home / "state.db").symlink_to(tmp_path / "elsewhere.db")
    with pytest.raises(UnsafePathError, match="symlink"):
        StateStore.open(home)


def test_connections_carry_the_store_pragmas(store: StateStore) -> None:
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 1000
        mode = conn.exec_driver_sql("PRAGMA journal_mode").scalar()
    assert mode == store.driver.journal_mode.lower()


def test_writer_unit_takes_the_write_lock_at_begin(store: StateStore) -> None:
    module = store.driver.module
    with store.unit_of_work() as uow:
        uow.sessions.count()  # starts the transaction: BEGIN IMMEDIATE
        other = module.connect(str(store.path), timeout=0, isolation_level=None)
        try:
            with pytest.raises(module.OperationalError) as caught:
                other.execute("BEGIN IMMEDIATE")
            assert caught.value.sqlite_errorcode & 0xFF == 5  # SQLITE_BUSY
        finally:
            other.close()


def test_health_reports_the_sqlite_in_use_and_the_wal_reset_fix(store: StateStore) -> None:
    health = store.health()
    assert health.sqlite_version == store.driver.sqlite_version
    fixed = tuple(int(p) for p in health.sqlite_version.split(".")) >= (3, 51, 3)
    assert health.sqlite_has_wal_fix is fixed
    assert health.journal_mode == ("wal" if fixed else "delete")


def test_vulnerable_sqlite_gets_a_rollback_journal(tmp_path: Path) -> None:
    driver = select_driver("stdlib")
    if driver.has_wal_reset_fix:
        pytest.skip("the standard sqlite3 here already has the WAL-reset fix")
    with StateStore.open(tmp_path / "home", driver="stdlib") as store:
        health = store.health()
        assert health.driver == "stdlib"
        assert health.journal_mode == "delete"
        assert not health.sqlite_has_wal_fix
        assert any("WAL-reset" in note for note in health.notes)


def _future_scripts(tmp_path: Path) -> Path:
    scripts = tmp_path / "scripts"
    shutil.copytree(migrate.migrations_dir(), scripts)
    (scripts / "versions" / "0002_next.py").write_text(
        '"""A later revision."""\n'
        "from alembic import op\n"
        'revision = "0002_next"\n'
        f'down_revision = "{migrate.head_revision()}"\n'
        "branch_labels = None\n"
        "depends_on = None\n"
        "def upgrade():\n"
        '    op.execute("CREATE INDEX ix_messages_role ON messages (role)")\n'
        "def downgrade():\n"
        '    op.execute("DROP INDEX ix_messages_role")\n'
    )
    return scripts


def test_store_behind_head_is_refused_with_the_upgrade_command(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    scripts = _future_scripts(tmp_path)
    # A newer version of the code: newer migrations, and the head constant that ships
    # with them (the open compares the store's revision with it before loading Alembic).
    monkeypatch.setattr(migrate, "migrations_dir", lambda: scripts)
    monkeypatch.setattr(migrate, "HEAD_REVISION", "0002_next")
    with pytest.raises(SchemaMismatchError, match=r"hermes-repo .*db upgrade"):
        StateStore.open(home)
    with StateStore.open(home, upgrade=True) as store:
        assert store.health().revision == "0002_next"


def _store_at_first_revision(home: Path, messages: int) -> None:
    with StateStore.open(home) as store:
        sid = new_session(store)
        for i in range(messages):
            store.append_message(sid, {"role": "user", "content": f"message {i}"})
    engine = create_store_engine(home / "state.db")
    try:
        migrate.downgrade(engine, "0001_initial")
    finally:
        engine.dispose()


def test_open_with_upgrade_snapshots_a_store_behind_head_before_migrating(home: Path) -> None:
    # The library's upgrade is the CLI's: a verified copy of the store as it was, first.
    _store_at_first_revision(home, messages=7)
    with StateStore.open(home, upgrade=True) as store:
        assert store.health().revision == migrate.head_revision()
        assert store.load_conversation(_only_session(store)).messages[-1]["content"] == (
            "message 6"
        )
    [snap] = list_snapshots(home)
    assert snap.ok and snap.label == "pre-upgrade" and snap.origin == "automatic"
    assert snap.revision == "0001_initial"  # the store before the migrations ran
    assert snap.counts["messages"] == 7
    assert not list(home.glob("*.bak"))  # a verified snapshot, so no raw backup


def test_opens_that_migrate_nothing_take_no_snapshot(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with StateStore.open(home, upgrade=True) as store:  # a new file: built at head
        new_session(store)
    with StateStore.open(home, upgrade=True):  # at head: nothing to protect
        pass
    assert list_snapshots(home) == []


def _only_session(store: StateStore) -> str:
    [info] = store.list_sessions()
    return info.id


def test_store_ahead_of_the_code_is_always_refused(home: Path) -> None:
    with StateStore.open(home) as store, store.engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    for upgrade in (False, True):
        with pytest.raises(SchemaMismatchError, match="newer than this version"):
            StateStore.open(home, upgrade=upgrade)


def test_foreign_database_is_refused_not_migrated(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    module = select_driver().module
    conn = module.connect(str(home / "state.db"))
    conn.execute("CREATE TABLE something (x)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaMismatchError, match="not a hermes_repo store"):
        StateStore.open(home)


def test_zero_byte_state_db_is_built_at_head(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    fd = os.open(home / "state.db", os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    with StateStore.open(home) as store:
        assert store.health().at_head


def test_open_waits_out_a_writer_that_blocks_readers(tmp_path: Path) -> None:
    # In rollback-journal mode (the protection on a SQLite without the WAL-reset fix) an
    # exclusive writer blocks readers too: the open's schema check must retry, not fail.
    import sqlite3
    import threading

    home = tmp_path / "home"
    StateStore.open(home, driver="stdlib").close()
    holder = sqlite3.connect(str(home / "state.db"), isolation_level=None, check_same_thread=False)
    holder.execute("PRAGMA journal_mode = DELETE")
    holder.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(1.5, lambda: holder.execute("ROLLBACK"))
    release.start()
    try:
        with StateStore.open(home, driver="stdlib") as store:
            assert store.health().at_head
    finally:
        release.join()
        holder.close()


def test_a_connection_that_ran_many_statements_keeps_the_flush_compiled(tmp_path: Path) -> None:
    # Once a driver's statement cache is full, pysqlite3's evicts its newest entry: a
    # statement not cached yet was compiled again at every execution (a flush's INSERT
    # with its full-text triggers, at every flush). SQLite compiles a statement, never
    # runs one, under the authorizer: it counts compilations.
    with StateStore.open(tmp_path / "home") as store:
        module = store.driver.module
        sid = new_session(store)
        writer = store.transcript_writer(sid)
        writer.flush([])  # its one read of the session's uids
        compiled: list[str] = []

        def authorizer(action: int, table: str | None, *_: object) -> int:
            if action == module.SQLITE_INSERT and table == "messages":
                compiled.append(table)
            return int(module.SQLITE_OK)

        pooled = store.engine.raw_connection()
        dbapi = pooled.dbapi_connection
        assert dbapi is not None
        try:
            # More distinct statements than the driver's default cache holds (128);
            # opening a new store ran 116 of its own on this connection already.
            for i in range(300):
                dbapi.execute(f"SELECT {i}").fetchall()
            dbapi.set_authorizer(authorizer)
        finally:
            pooled.close()
        try:
            for i in range(4):
                asked = {"role": "user", "content": f"q{i}"}
                result = writer.flush([asked, {"role": "assistant", "content": "a"}])
                assert result.written == 2 and result.error is None, result
        finally:
            dbapi.set_authorizer(None)
        # Compiled once (the authorizer's installation expires every prepared
        # statement), then reused by the three flushes after it.
        assert compiled == ["messages"]
