"""Every command's --help teaches: a summary, what it does, and an example."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

Cli = Callable[..., Any]

COMMANDS = [
    [],
    ["db"],
    ["db", "upgrade"],
    ["db", "current"],
    ["db", "check"],
    ["sessions"],
    ["sessions", "list"],
    ["sessions", "show"],
    ["sessions", "export"],
    ["import"],
    ["search"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "main")
def test_every_command_help_has_a_summary_and_an_example(command: list[str], cli: Cli) -> None:
    result = cli(*command, "--help")

    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Usage: hermes-repo")
    assert lines[2].strip(), "a one-line summary follows the usage line"
    assert "Example:" in result.stdout
    assert "hermes-repo " in result.stdout.split("Example:", 1)[1]


def test_version_reports_which_sqlite_the_store_uses(cli: Cli) -> None:
    result = cli("--version")

    assert result.code == 0
    assert "SQLite" in result.stdout and "WAL-reset fix" in result.stdout


def test_an_unknown_command_is_a_usage_error_with_exit_code_2(cli: Cli) -> None:
    result = cli("frobnicate")

    assert result.code == 2
    assert "No such command" in result.stderr
