"""A side file in the way: the CLI says which file and what to do, in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Cli


@pytest.mark.parametrize("name", ["state.db.holders", "state.db-wal"])
def test_cli_names_an_unusable_side_file_in_one_line(home: Path, cli: Cli, name: str) -> None:
    (home / name).mkdir()
    result = cli("--home", home, "sessions", "list")
    assert result.code == 1
    assert len(result.error_lines) == 1, result.stderr
    line = result.error_lines[0]
    assert line.startswith("error: ") and str(home / name) in line
    assert "unable to open database file" not in line and "Traceback" not in result.stderr
