"""Undecodable bytes in a session id or snapshot label: one `error:` line, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Cli

# Undecodable argv bytes arrive as lone surrogates (surrogateescape).
BAD_ID = "P\udcff"


def _one_error_line(result: object, *words: str) -> None:
    code, stderr = result.code, result.stderr  # type: ignore[attr-defined]
    assert code != 0
    assert "Traceback" not in stderr and "UnicodeEncodeError" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize("command", [("sessions", "show"), ("sessions", "export")])
def test_an_undecodable_session_id_argument_gives_one_error_line(
    home: Path, cli: Cli, command: tuple[str, str]
) -> None:
    _one_error_line(cli("--home", home, *command, BAD_ID), "session id", "not valid Unicode")


def test_import_of_an_undecodable_parent_session_id_gives_one_error_line(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    file = tmp_path / "parent.jsonl"
    file.write_text('{"session": {"id": "C1", "parent_session_id": "P\\ud83d"}}\n')
    _one_error_line(cli("--home", home, "import", file), "session id", "not valid Unicode")


def test_an_undecodable_snapshot_label_gives_one_error_line(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "snapshot", "create", "--label", "nightly\udcff")
    _one_error_line(result, "label", "plain text")
    snapshots = home / "snapshots"
    assert not snapshots.exists() or not any(snapshots.iterdir())
