"""An empty ``--home`` is a usage error; the damaged -wal advice quotes its commands whole.

Before: ``--home ""`` silently made a store in the current folder, and the
``wal-header-damaged`` finding had unbalanced backticks (the first command's closing
one was missing), so the two commands ran together when copied.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from hermes_repo.ops.doctor import diagnose
from tests.cli.conftest import Cli
from tests.support import damage
from tests.support.stores import store_with_wal_only_session


def test_an_empty_home_is_a_usage_error_naming_the_option(cli: Cli, tmp_path: Path) -> None:
    workdir = tmp_path / "cwd"
    before = sorted(p.name for p in workdir.iterdir()) if workdir.exists() else []
    result = cli("--home", "", "sessions", "list")
    assert result.code == 2, result
    assert "--home" in result.stderr and "empty" in result.stderr
    assert "Traceback" not in result.stderr
    after = sorted(p.name for p in workdir.iterdir()) if workdir.exists() else []
    assert after == before and "state.db" not in after


def test_the_damaged_wal_advice_has_each_command_in_its_own_backticks(home: Path) -> None:
    db = store_with_wal_only_session(home)
    damage.zero_wal_header(db)
    [finding] = [f for f in diagnose(home).findings if f.code == "wal-header-damaged"]
    for text in (finding.summary, finding.fix):
        assert text.count("`") % 2 == 0, text
        commands = re.findall(r"`([^`]+)`", text)
        assert commands and all(c.startswith("hermes-repo --home ") for c in commands), text
        for cmd in commands:
            words = shlex.split(cmd)
            assert words[1:3] == ["--home", str(home)], cmd
            assert words.count("salvage") <= 1, cmd  # never two commands in one quote
