"""``hermes-repo db copy --to TARGET`` through the installed console script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import create_store_engine
from hermes_repo.schema import migrate
from tests.cli.conftest import Cli
from tests.support.copying import fill_odd_store, pg_target, store_rows


@pytest.fixture
def source(tmp_path: Path) -> Path:
    home = tmp_path / "source"
    with StateStore.open(home) as store:
        fill_odd_store(store)
    return home


def _rows(home: Path) -> dict[str, list[tuple[object, ...]]]:
    with StateStore.open(home, replay=False) as store:
        return store_rows(store)


def test_copy_into_a_new_folder_then_again_writes_nothing(
    tmp_path: Path, cli: Cli, source: Path
) -> None:
    target = tmp_path / "new" / "copy"

    first = cli("--home", source, "db", "copy", "--to", target, "--batch-size", "4")
    again = cli("--home", source, "db", "copy", "--to", target, "--json")

    assert first.code == 0, first.stderr
    assert "messages: 38 new, 0 updated, 0 already there" in first.stdout
    assert "verified: 3 sessions, 38 messages (max id 38)" in first.stdout
    assert again.code == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["written"] == 0
    assert summary["messages"] == {"inserted": 0, "updated": 0, "unchanged": 38}
    assert summary["verified"]["messages"]["count"] == 38
    assert _rows(target) == _rows(source)


def test_an_sqlite_url_names_the_target_store_file(tmp_path: Path, cli: Cli, source: Path) -> None:
    target = tmp_path / "by-url"

    result = cli("--home", source, "db", "copy", "--to", f"sqlite:///{target}/state.db")

    assert result.code == 0, result.stderr
    assert _rows(target) == _rows(source)


def test_an_sqlite_url_to_a_file_not_named_state_db_is_refused(
    tmp_path: Path, cli: Cli, source: Path
) -> None:
    result = cli("--home", source, "db", "copy", "--to", f"sqlite:///{tmp_path}/other.db")

    assert result.code == 1
    assert f"give sqlite:///{tmp_path}/state.db or the folder {tmp_path}" in result.stderr
    assert not (tmp_path / "other.db").exists()


def test_a_target_behind_head_is_refused_with_the_upgrade_command(
    tmp_path: Path, cli: Cli, source: Path
) -> None:
    target = tmp_path / "old"
    StateStore.open(target).close()
    engine = create_store_engine(target / "state.db")
    try:
        migrate.downgrade(engine, "0001_initial")
    finally:
        engine.dispose()

    result = cli("--home", source, "db", "copy", "--to", target)

    assert result.code == 1
    assert f"hermes-repo --home {target} db upgrade" in result.stderr


def test_a_target_holding_another_stores_rows_is_refused(
    tmp_path: Path, cli: Cli, source: Path
) -> None:
    other = tmp_path / "other"
    with StateStore.open(other) as store:
        fill_odd_store(store)
    before = _rows(other)

    result = cli("--home", source, "db", "copy", "--to", other)

    assert result.code == 1
    [line] = result.error_lines
    assert line.startswith("error: ") and "another store" in line
    assert _rows(other) == before


def test_the_store_itself_is_refused_as_target(cli: Cli, source: Path) -> None:
    result = cli("--home", source, "db", "copy", "--to", source)

    assert result.code == 1
    assert "is the store being copied" in result.stderr


def test_the_password_of_a_url_never_appears_in_the_output(cli: Cli, source: Path) -> None:
    # A port that is not a port: refused at once (a port nothing listens on is an outage,
    # waited out for the store's 20 s budget: tests/cli/test_cli_secrets.py has those).
    url = "postgresql+psycopg://hermes:s3cr3t-pw@127.0.0.1:99999/hermes"

    result = cli("--home", source, "db", "copy", "--to", url)

    assert result.code == 1
    assert "s3cr3t-pw" not in result.stdout + result.stderr
    assert "hermes:***@127.0.0.1:99999/hermes" in result.stderr


def test_help_shows_the_target_forms_with_examples(cli: Cli) -> None:
    result = cli("db", "copy", "--help")

    assert result.code == 0
    for needle in ("postgresql+psycopg://", "sqlite:///", "--batch-size", "Example:"):
        assert needle in result.stdout


@pytest.mark.pg
def test_copy_to_postgresql_and_back_through_the_cli(
    tmp_path: Path, cli: Cli, source: Path
) -> None:
    with pg_target() as pg:
        to_pg = cli("--home", source, "db", "copy", "--to", pg.url, "--json")
        back = cli("--url", pg.url, "db", "copy", "--to", tmp_path / "back")

        assert to_pg.code == 0, to_pg.stderr
        assert back.code == 0, back.stderr
        assert _rows(tmp_path / "back") == _rows(source)


def test_copy_to_a_folder_named_by_bytes_that_are_not_utf8(
    tmp_path: Path, cli: Cli, source: Path
) -> None:
    # What os.fsdecode makes of argv byte 0xFF: a lone surrogate, which URL quoting and
    # SQLite's UTF-8 text refused with a traceback.
    target = tmp_path / "copy-\udcff"
    result = cli("--home", source, "db", "copy", "--to", target)
    assert result.code == 0, result.stderr
    assert "copy-\\xff" in result.stdout  # shown escaped
    assert (target / "state.db").is_file()
    assert _rows(target) == _rows(source)
