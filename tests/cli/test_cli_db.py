"""`hermes-repo db upgrade|current|check` through the installed console script."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_repo import StateStore
from hermes_repo.engine import create_store_engine, select_driver
from hermes_repo.schema import migrate

# The store's own SQLite: a standard `sqlite3` connection next to a pysqlite3 store in
# this process would be a second copy of SQLite, blind to the store's locks.
DRIVER = select_driver().module

Cli = Callable[..., Any]
FUTURE_REVISION = "9999_from_the_future"


def sql(db: Path, statement: str) -> list[tuple[object, ...]]:
    conn = DRIVER.connect(db)
    try:
        rows = conn.execute(statement).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


def revision_of(db: Path) -> str:
    return str(sql(db, "SELECT version_num FROM alembic_version")[0][0])


def assert_one_error_line(result: Any, *needles: str) -> str:
    assert result.code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.error_lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0]
    return str(lines[0])


def test_db_upgrade_builds_a_new_folder_at_head(tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "fresh" / "home"

    result = cli("--home", home, "db", "upgrade")

    assert result.code == 0, result.stderr
    assert revision_of(home / "state.db") == migrate.head_revision()
    assert "backup" not in result.stdout  # nothing to back up in a new file
    assert not list(home.glob("*.bak"))


def _behind_head(home: Path) -> None:
    """Take the store back to the first revision: what an older install left behind."""
    engine = create_store_engine(home / "state.db")
    try:
        migrate.downgrade(engine, "0001_initial")
    finally:
        engine.dispose()


def test_db_upgrade_snapshots_a_store_behind_head_first_and_prints_the_id(
    imported_home: Path,
    cli: Cli,
) -> None:
    _behind_head(imported_home)
    result = cli("--home", imported_home, "db", "upgrade")

    assert result.code == 0, result.stderr
    listed = cli("--home", imported_home, "snapshot", "list", "--json")
    assert listed.code == 0, listed.stderr
    [snap] = json.loads(listed.stdout)
    assert snap["ok"] and snap["label"] == "pre-upgrade"
    assert snap["revision"] == "0001_initial"  # the store as it was before the upgrade
    assert snap["counts"]["messages"] == 50  # a verified copy of the store, not a stub
    assert f"snapshot: {snap['id']}" in result.stdout
    assert f"snapshot restore {snap['id']}" in result.stdout  # how to undo
    assert not list(imported_home.glob("*.bak"))  # the snapshot replaces the raw backup
    assert revision_of(imported_home / "state.db") == migrate.head_revision()


def test_db_upgrade_at_head_takes_no_snapshot(home: Path, cli: Cli) -> None:
    first = cli("--home", home, "db", "upgrade")
    second = cli("--home", home, "db", "upgrade")

    assert first.code == second.code == 0, (first.stderr, second.stderr)
    assert "already at head" in first.stdout and "already at head" in second.stdout
    assert json.loads(cli("--home", home, "snapshot", "list", "--json").stdout) == []
    assert not list(home.glob("*.bak"))


def test_db_upgrade_of_a_store_failing_integrity_check_keeps_a_raw_backup(
    home: Path, cli: Cli
) -> None:
    # A snapshot must pass integrity_check, so a store that fails it gets the backup-API
    # copy instead. The damage: an index whose entries no longer match its table (its
    # definition edited behind SQLite's back), on a table of its own so the store opens.
    _behind_head(home)
    db = home / "state.db"
    sql(db, "CREATE TABLE scratch (x INTEGER PRIMARY KEY, y TEXT)")
    sql(db, "CREATE INDEX ix_scratch ON scratch (y)")
    sql(db, "INSERT INTO scratch (y) VALUES ('a'), ('b')")
    conn = DRIVER.connect(db)
    try:
        conn.execute("PRAGMA writable_schema = ON")
        # The index now claims to index another column: its entries no longer match.
        conn.execute(
            "UPDATE sqlite_master SET sql = 'CREATE INDEX ix_scratch ON scratch (x)' "
            "WHERE name = 'ix_scratch'"
        )
        conn.commit()
    finally:
        conn.close()

    result = cli("--home", home, "db", "upgrade")

    assert result.code == 0, result.stderr
    assert "no snapshot:" in result.stdout and "integrity_check" in result.stdout
    [backup] = home.glob("state.db.pre-upgrade-*.bak")
    assert f"backup: {backup}" in result.stdout
    assert sql(backup, "SELECT count(*) FROM scratch") == [(2,)]
    assert json.loads(cli("--home", home, "snapshot", "list", "--json").stdout) == []


def test_db_current_reports_revision_head_and_sqlite_as_json(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "db", "current", "--json")

    assert result.code == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["revision"] == info["head"] == migrate.head_revision()
    assert info["status"] == "at-head"
    assert info["driver"] in ("pysqlite3", "stdlib")
    assert info["sqlite_version"].count(".") == 2


def test_db_current_in_human_form_names_the_sqlite_in_use(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "db", "current")

    assert result.code == 0, result.stderr
    assert f"revision: {migrate.head_revision()}" in result.stdout
    assert "SQLite" in result.stdout and "WAL-reset fix" in result.stdout


def test_db_current_on_a_missing_store_creates_nothing(tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "absent"

    result = cli("--home", home, "db", "current", "--json")

    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "missing"
    assert not home.exists()


def test_db_check_passes_on_a_migrated_store(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "db", "check")

    assert result.code == 0, result.stderr
    assert "no drift" in result.stdout


def test_db_check_fails_with_the_drift_when_the_schema_differs(home: Path, cli: Cli) -> None:
    sql(home / "state.db", "ALTER TABLE sessions ADD COLUMN nickname TEXT")

    result = cli("--home", home, "db", "check")

    assert_one_error_line(result, "differs from the models")
    assert "nickname" in result.stdout


def test_db_check_on_a_missing_store_says_how_to_create_it(tmp_path: Path, cli: Cli) -> None:
    result = cli("--home", tmp_path / "absent", "db", "check")

    assert_one_error_line(result, "no store", "db upgrade")


def test_a_store_ahead_of_the_code_is_refused_naming_the_cause(home: Path, cli: Cli) -> None:
    sql(home / "state.db", f"UPDATE alembic_version SET version_num = '{FUTURE_REVISION}'")

    listing = cli("--home", home, "sessions", "list")
    upgrade = cli("--home", home, "db", "upgrade")
    check = cli("--home", home, "db", "check")

    for result in (listing, upgrade, check):
        assert_one_error_line(result, FUTURE_REVISION, "upgrade the hermes_repo package")
    assert not list(home.glob("*.bak"))  # refused before any backup or migration
    assert revision_of(home / "state.db") == FUTURE_REVISION


def test_db_upgrade_refuses_a_database_that_is_not_a_hermes_store(tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "other"
    home.mkdir()
    sql(home / "state.db", "CREATE TABLE invoices (id INTEGER PRIMARY KEY)")

    result = cli("--home", home, "db", "upgrade")

    assert_one_error_line(result, "not a hermes_repo store")
    assert sql(home / "state.db", "SELECT name FROM sqlite_master WHERE type='table'") == [
        ("invoices",)
    ]


def test_home_defaults_to_a_folder_of_ours_in_the_hermes_home_variable(
    tmp_path: Path, cli: Cli
) -> None:
    home = tmp_path / "from-env"

    result = cli("db", "upgrade", env={"HERMES_HOME": str(home)})

    assert result.code == 0, result.stderr
    assert sorted(p.name for p in home.iterdir()) == ["hermes-repo"]
    with StateStore.open(home / "hermes-repo") as store:
        assert store.health().at_head


def test_a_damaged_database_file_fails_with_one_error_line_and_no_backup(
    home: Path, cli: Cli
) -> None:
    db = home / "state.db"
    data = bytearray(db.read_bytes())
    data[:16] = b"not a database!!"  # the SQLite header magic
    db.write_bytes(bytes(data))

    listing = cli("--home", home, "sessions", "list")
    upgrade = cli("--home", home, "db", "upgrade")

    # The library also logs the quarantine; the CLI still prints only the error line.
    assert_one_error_line(listing, "damaged", "sessions salvage")
    assert_one_error_line(upgrade, "damaged")
    assert not list(home.glob("*.bak"))
