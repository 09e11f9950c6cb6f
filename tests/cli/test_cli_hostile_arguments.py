"""Every command answers hostile arguments with one ``error:`` line or a usage error.

Hypothesis picks values a user really sends (empty, negative, huge and non-finite
numbers, text where a number belongs, a lone surrogate from a non-UTF-8 argv, 5,000
characters, odd paths and URLs) for each option and argument of each command. The
command runs in-process through click's runner (a traceback would surface as
``result.exception``): it may succeed, fail with exit 1 (one ``error:`` line) or refuse its
usage with exit 2, and nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_repo import StateStore
from hermes_repo.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "sample_sessions.jsonl"

VALUES = st.sampled_from(
    [
        "",
        "-1",
        "0",
        "2",
        "99999999999999999999999",
        "nan",
        "inf",
        "1e400",
        "\udcff",  # what os.fsdecode gives for a non-UTF-8 byte of argv
        "x" * 5000,
        "../../..",
        "/",
        "s1",
        "-",
        "sqlite:///",
        "postgresql+psycopg://u:p@host:notaport/db",
        "café 服务器 \x1b[2J",
    ]
)

# Each command with one "{}" where the hostile value goes. Servers on closed ports are
# left out: a refused connection is an outage, waited out for the store's budget.
COMMANDS = [
    ["search", "{}"],
    ["search", "hello", "--limit", "{}"],
    ["search", "hello", "--page", "{}"],
    ["search", "hello", "--cursor", "{}"],
    ["search", "hello", "--session", "{}"],
    ["search", "hello", "--role", "{}"],
    ["sessions", "list", "--limit", "{}"],
    ["sessions", "list", "--source", "{}"],
    ["sessions", "show", "{}"],
    ["sessions", "export", "{}"],
    ["sessions", "export", "s1", "--format", "{}"],
    ["sessions", "export", "s1", "--output", "{}"],
    ["sessions", "salvage", "--source", "{}", "--inspect-only"],
    ["import", "{}"],
    ["import", str(SAMPLES), "--format", "{}"],
    ["db", "copy", "--to", "{}"],
    ["db", "copy", "--to", "copy-target", "--batch-size", "{}"],
    ["db", "replace", "{}"],
    ["snapshot", "restore", "{}"],
    ["pending", "replay", "--adopt", "{}"],
    ["--home", "{}", "sessions", "list"],
    ["--url", "{}", "sessions", "list"],
]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    folder = tmp_path / "home"
    with StateStore.open(folder) as store, store.unit_of_work() as uow:
        sid = uow.sessions.create(id="s1")
        uow.messages.append(sid, {"role": "user", "content": "hello world"})
        uow.commit()
    return folder


@pytest.mark.parametrize("template", COMMANDS, ids=lambda c: " ".join(c).replace("{}", "V"))
def test_a_command_given_a_hostile_value_fails_cleanly(
    home: Path, tmp_path: Path, template: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative path a value names lands in the test's folder
    monkeypatch.delenv("HERMES_REPO_URL", raising=False)
    runner = CliRunner()

    @settings(max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(value=VALUES)
    def run(value: str) -> None:
        args = ["--home", str(home), *[value if a == "{}" else a for a in template]]
        result = runner.invoke(main, args, catch_exceptions=True, env={"COLUMNS": "120"})
        unexpected = result.exception is not None and not isinstance(result.exception, SystemExit)
        assert not unexpected, (args, repr(result.exception), result.output[-2000:])
        assert result.exit_code in (0, 1, 2), (args, result.exit_code, result.output[-2000:])
        if result.exit_code == 1:
            assert "error:" in result.output, (args, result.output[-2000:])

    run()
    assert os.getcwd() == str(tmp_path)
