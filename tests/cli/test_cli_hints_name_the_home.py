"""Every operator hint that names a command names the store with ``--home`` (quoted).

Before: the quarantine line (printed by search/show), the ``snapshot restore``
confirmation hint and the ``pending replay`` retry hint said ``hermes-repo ...``
without ``--home``: an operator whose HERMES_HOME points at another store who follows
them literally installs a salvage into, or restores a snapshot over, the wrong store.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from hermes_repo.quarantine import QuarantineInfo
from tests.cli.conftest import Cli


def _commands(text: str) -> list[str]:
    found = re.findall(r"`(hermes-repo [^`]+)`", text)
    assert found, text
    return found


def _all_name(home: Path, text: str) -> None:
    for cmd in _commands(text):
        words = shlex.split(cmd)
        assert words[1:3] == ["--home", str(home)], cmd


def test_the_quarantine_message_names_the_home_in_every_command(tmp_path: Path) -> None:
    home = tmp_path / "a store; with spaces"
    info = QuarantineInfo(str(home / "state.db"), 0.0, "database disk image is malformed")
    message = info.message()
    _all_name(home, message)
    assert message.count("`") % 2 == 0
    assert any(shlex.split(c)[-3:] == ["db", "replace", "NEW.db"] for c in _commands(message))


def test_snapshot_restore_hint_names_the_home(tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "odd home"
    home.mkdir()
    result = cli("--home", home, "snapshot", "restore", "20260101T093000Z-3fa9c1")
    assert result.code != 0
    [line] = result.error_lines
    _all_name(home, line)


def test_pending_recover_retry_hint_names_the_home(home: Path, cli: Cli) -> None:
    folder = home / "sessions"
    folder.mkdir(mode=0o700)
    (folder / "bad name.pending.jsonl").write_text('{"role": "user", "content": "x"}\n')
    result = cli("--home", home, "pending", "replay")
    assert result.code == 1
    [line] = result.error_lines
    _all_name(home, line)
    assert (folder / "bad name.pending.jsonl").exists()
