"""What a newcomer meets in the first hour: no store made by a read, settings refused
when mistyped, `python -m hermes_repo`, tables that drop nothing, a session's tail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_repo import ConfigurationError, StateStore
from tests.cli.conftest import SAMPLES, Cli, run_cli

SID = "20260101_093000_5f2a0000aaaa"
SOURCE = "telegram-private-chat"
TITLE = (
    "A rather long title that explains how the write lock and the checkpoint interact "
    "under load, with 中文字符 too"
)


@pytest.mark.parametrize(
    "args",
    [
        ("sessions", "list"),
        ("sessions", "show", "s1"),
        ("sessions", "show", "s1", "--last", "3"),
        ("search", "checkpoint"),
        ("sessions", "export", "s1"),
        ("db", "copy", "--to", "sqlite"),
    ],
    ids=lambda a: " ".join(a),
)
def test_a_read_on_a_mistyped_home_says_there_is_no_store_and_creates_none(
    tmp_path: Path, cli: Cli, args: tuple[str, ...]
) -> None:
    mistyped = tmp_path / "hermse"

    result = cli("--home", mistyped, *args)

    assert result.code == 1, result.stdout + result.stderr
    assert f"no store at {mistyped / 'state.db'}" in result.stderr, result.stderr
    assert f"hermes-repo --home {mistyped} db upgrade" in result.stderr
    assert not mistyped.exists()


def test_a_read_without_home_names_the_default_store_folder(tmp_path: Path, cli: Cli) -> None:
    base = tmp_path / "hermes-home"

    result = cli("sessions", "list", env={"HERMES_HOME": str(base)})

    assert result.code == 1
    assert f"no store at {base / 'hermes-repo' / 'state.db'}" in result.stderr
    assert "--home was left out" in result.stderr
    assert not base.exists()


def test_a_jsonl_dry_run_is_refused_before_any_store_is_made(tmp_path: Path, cli: Cli) -> None:
    mistyped = tmp_path / "nowhere"

    result = cli("--home", mistyped, "import", SAMPLES, "--dry-run")

    assert result.code == 1 and "--dry-run" in result.stderr
    assert not mistyped.exists()


@pytest.mark.parametrize(
    ("variable", "value", "allowed"),
    [
        ("HERMES_REPO_JOURNAL_MODE", "wall", "wal or delete"),
        ("HERMES_REPO_DRIVER", "pysqlite", "auto, pysqlite3 or stdlib"),
    ],
)
def test_a_mistyped_setting_is_refused_with_the_allowed_values(
    home: Path, cli: Cli, variable: str, value: str, allowed: str
) -> None:
    result = cli("--home", home, "sessions", "list", env={variable: value})

    assert result.code == 1, result.stdout
    assert variable in result.stderr and repr(value) in result.stderr
    assert allowed in result.stderr


def test_the_library_refuses_a_mistyped_journal_mode(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_REPO_JOURNAL_MODE", "wal2")

    with pytest.raises(ConfigurationError, match="HERMES_REPO_JOURNAL_MODE"):
        StateStore.open(home)


def test_the_journal_mode_setting_is_read_in_any_case(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "--version", env={"HERMES_REPO_JOURNAL_MODE": "delete"})

    assert result.code == 0, result.stderr
    assert "journal_mode delete" in result.stdout


def test_an_unknown_hermes_repo_variable_is_named_in_a_warning(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "sessions", "list", env={"HERMES_REPO_JORNAL_MODE": "wal"})

    assert result.code == 0, result.stderr
    assert "HERMES_REPO_JORNAL_MODE" in result.stderr
    assert "HERMES_REPO_JOURNAL_MODE" in result.stderr  # the known names are listed


def test_python_dash_m_runs_the_command(imported_home: Path, tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)

    def module(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "hermes_repo", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            check=False,
        )

    version = module("--version")
    listed = module("--home", str(imported_home), "sessions", "list", "--json")
    helped = module("--help")

    assert version.returncode == 0 and version.stdout.startswith("hermes-repo "), version.stderr
    assert listed.returncode == 0 and json.loads(listed.stdout), listed.stderr
    assert "Usage: hermes-repo" in helped.stdout


@pytest.fixture
def long_title_home(home: Path) -> Path:
    with StateStore.open(home) as store:
        with store.unit_of_work() as uow:
            uow.sessions.create(id=SID, source=SOURCE, title=TITLE)
            uow.sessions.create(id="s2", source="cli", title="short")
            uow.commit()
        store.append_message(SID, {"role": "user", "content": "hi"})
    return home


def _squeezed(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("columns", [200, 80, 60, 40])
def test_sessions_list_drops_no_character_at_any_width(
    long_title_home: Path, tmp_path: Path, columns: int
) -> None:
    result = run_cli(
        "--home",
        long_title_home,
        "sessions",
        "list",
        cwd=tmp_path,
        env={"COLUMNS": str(columns)},
    )

    assert result.code == 0, result.stderr
    out = _squeezed(result.stdout)
    # Every character of the title and the id, in order (wrapping moves them onto
    # other lines, never away); the source whole, or cut visibly with an ellipsis.
    assert _squeezed(TITLE) in out, result.stdout
    assert SID in out
    cut_visibly = any(SOURCE[:n] + "…" in out for n in range(1, len(SOURCE)))
    assert SOURCE in out or cut_visibly, result.stdout


def test_sessions_list_json_has_every_field_whole(long_title_home: Path, cli: Cli) -> None:
    rows = json.loads(cli("--home", long_title_home, "sessions", "list", "--json").stdout)

    assert {(r["id"], r["source"], r["title"]) for r in rows} >= {(SID, SOURCE, TITLE)}


def test_sessions_show_last_shows_the_tail_numbered_by_its_place(home: Path, cli: Cli) -> None:
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        sid = uow.sessions.create(source="cli")
        for i in range(1, 13):
            role = "user" if i % 2 else "assistant"
            uow.messages.append(sid, {"role": role, "content": f"turn number {i}"})
        uow.commit()

    shown = cli("--home", home, "sessions", "show", sid, "--last", "3")
    as_json = cli("--home", home, "sessions", "show", sid, "--last", "3", "--json")
    whole = cli("--home", home, "sessions", "show", sid)

    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "last 3 message(s)" in lines
    rows = [line.split() for line in lines if line.split()[:1] in (["10"], ["11"], ["12"])]
    assert [r[0] for r in rows] == ["10", "11", "12"]
    assert [r[-1] for r in rows] == ["10", "11", "12"]  # "turn number N"
    assert "turn number 9" not in shown.stdout
    messages = json.loads(as_json.stdout)["messages"]
    assert [m["content"] for m in messages] == [f"turn number {i}" for i in (10, 11, 12)]
    # Without --last: every message, a line each, in replay order.
    assert "12 message(s)" in whole.stdout.splitlines()
    numbered = [line.split()[0] for line in whole.stdout.splitlines() if "turn number" in line]
    assert numbered == [str(i) for i in range(1, 13)]
