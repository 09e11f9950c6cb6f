"""On a machine where Hermes Agent keeps its own store in its home, every command leaves
Hermes' folder as it was, byte for byte, and says what to do.

Hermes' ``state.db`` is built by Hermes Agent's own code (``hermes_state.SessionDB``,
pip-installed as ``hermes-agent``). The default home of hermes_repo is the
``hermes-repo`` folder inside Hermes' home; an explicit ``--home`` at Hermes' folder is
refused before anything opens the file or writes beside it.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from hermes_repo import HermesAgentFileError, StateStore
from tests.cli.conftest import SAMPLES, Cli, Result

hermes_state = pytest.importorskip(
    "hermes_state",
    reason="hermes-agent is not installed: pip install --no-deps hermes-agent==0.19.0",
)

SID = "20260401_090000_aaaaaa"


def _hermes_session(db: object) -> None:
    db.create_session(SID, "cli", model="claude-sonnet-4")  # type: ignore[attr-defined]
    db.set_session_title(SID, "Deploy the gateway")  # type: ignore[attr-defined]
    db.append_message(SID, "user", "deploy the checkpoint please")  # type: ignore[attr-defined]
    db.append_message(SID, "assistant", "the checkpoint is deployed")  # type: ignore[attr-defined]


def _build_hermes(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "state.db"
    db = hermes_state.SessionDB(db_path=path)
    try:
        _hermes_session(db)
    finally:
        db.close()
    return path


def _tree(folder: Path) -> dict[str, str | None]:
    """Every name under ``folder`` with the sha256 of each file (None for a folder)."""
    seen: dict[str, str | None] = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        seen[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return seen


def _outside_our_folder(tree: dict[str, str | None]) -> dict[str, str | None]:
    return {k: v for k, v in tree.items() if k.split("/")[0] != "hermes-repo"}


def _refused_as_hermes(result: Result, db_path: Path) -> None:
    assert result.code == 1, result.stdout + result.stderr
    assert "is Hermes Agent's own store" in result.stderr, result.stderr
    assert f"hermes-repo import {db_path}" in result.stderr, result.stderr


def test_every_command_leaves_hermes_folder_byte_for_byte_and_the_readme_import_works(
    tmp_path: Path, cli: Cli
) -> None:
    hermes_home = tmp_path / ".hermes"
    hermes_db = _build_hermes(hermes_home)
    env = {"HERMES_HOME": str(hermes_home)}
    before = _tree(hermes_home)

    # Nothing exists yet: reads say so and create nothing, a dry run writes nothing.
    listed = cli("sessions", "list", env=env)
    assert listed.code == 1 and "no store at" in listed.stderr, listed.stderr
    dry = cli("import", hermes_db, "--dry-run", env=env)
    assert dry.code == 0, dry.stderr
    assert "would import" in dry.stdout and "sessions 1 new" in dry.stdout, dry.stdout
    assert _tree(hermes_home) == before

    # The README's command, as written.
    imported = cli("import", hermes_db, env=env)
    assert imported.code == 0, imported.stderr
    assert "sessions 1 new" in imported.stdout, imported.stdout
    for args in (
        ("sessions", "list", "--json"),
        ("search", "checkpoint", "--json"),
        ("doctor",),
        ("snapshot", "create"),
        ("import", hermes_db),
    ):
        done = cli(*args, env=env)
        assert done.code == 0, (args, done.stdout, done.stderr)
    assert SID in cli("sessions", "list", "--json", env=env).stdout

    # Pointed at Hermes' folder itself: refused with the import command, file untouched.
    for args in (
        ("sessions", "list"),
        ("search", "checkpoint"),
        ("doctor",),
        ("snapshot", "create"),
        ("sessions", "repair", "--check-only"),
        ("db", "upgrade"),
        ("import", SAMPLES),
    ):
        _refused_as_hermes(cli("--home", hermes_home, *args, env=env), hermes_db)

    after = _tree(hermes_home)
    # Every byte of Hermes' files as it was; the only new name is our own folder.
    assert _outside_our_folder(after) == before
    assert set(after) - set(before) >= {"hermes-repo", "hermes-repo/state.db"}


def test_hermes_file_whose_tables_are_still_only_in_its_wal_is_recognised(
    tmp_path: Path, cli: Cli
) -> None:
    # A copy taken while Hermes runs (or of a Hermes that left its -wal at close): the
    # main file's own pages hold no table yet, only the -wal does.
    live = tmp_path / "live"
    live.mkdir()
    db = hermes_state.SessionDB(db_path=live / "state.db")
    try:
        _hermes_session(db)
        folder = tmp_path / "copied"
        folder.mkdir()
        shutil.copyfile(live / "state.db", folder / "state.db")
        shutil.copyfile(live / "state.db-wal", folder / "state.db-wal")
    finally:
        db.close()
    immutable = sqlite3.connect((folder / "state.db").as_uri() + "?mode=ro&immutable=1", uri=True)
    try:
        tables = immutable.execute("SELECT name FROM sqlite_master").fetchall()
    finally:
        immutable.close()
    assert tables == [], "the scenario needs a file whose tables are only in its -wal"
    before = _tree(folder)

    _refused_as_hermes(cli("--home", folder, "sessions", "list"), folder / "state.db")
    _refused_as_hermes(cli("--home", folder, "db", "upgrade"), folder / "state.db")

    assert _tree(folder) == before


def test_the_library_refuses_to_open_hermes_file_as_its_store(tmp_path: Path) -> None:
    hermes_db = _build_hermes(tmp_path / "hh")
    before = _tree(tmp_path / "hh")

    with pytest.raises(HermesAgentFileError, match="hermes-repo import"):
        StateStore.open(tmp_path / "hh")

    assert _tree(tmp_path / "hh") == before
    assert hermes_db.exists()


def test_a_store_of_ours_at_the_old_default_place_keeps_being_the_default(
    tmp_path: Path, cli: Cli
) -> None:
    base = tmp_path / "old-home"
    made = cli("--home", base, "import", SAMPLES)
    assert made.code == 0, made.stderr

    listed = cli("sessions", "list", "--json", env={"HERMES_HOME": str(base)})

    assert listed.code == 0, listed.stderr
    assert "sample-wal-locked" in listed.stdout
    assert not (base / "hermes-repo").exists()


def test_a_new_machine_gets_the_store_in_a_folder_of_its_own(tmp_path: Path, cli: Cli) -> None:
    base = tmp_path / "fresh"

    made = cli("import", SAMPLES, env={"HERMES_HOME": str(base)})

    assert made.code == 0, made.stderr
    assert (base / "hermes-repo" / "state.db").is_file()
    assert sorted(p.name for p in base.iterdir()) == ["hermes-repo"]


def test_home_with_hermes_repo_url_from_the_environment_is_refused_as_ambiguous(
    home: Path, cli: Cli
) -> None:
    env = {"HERMES_REPO_URL": "postgresql+psycopg://agent:secret@db.invalid:5432/hermes"}

    refused = cli("--home", home, "sessions", "list", env=env)
    chosen = cli("--home", home, "--url", "sqlite", "sessions", "list", "--json", env=env)

    assert refused.code == 2, refused.stdout + refused.stderr
    assert "HERMES_REPO_URL" in refused.stderr and "--url sqlite" in refused.stderr
    assert "secret" not in refused.stderr
    assert chosen.code == 0, chosen.stderr
