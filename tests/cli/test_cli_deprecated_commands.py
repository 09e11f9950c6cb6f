"""The commands renamed so that one word names one thing keep their old names for one
release: hidden from ``--help``, they warn on stderr and do exactly what the new ones
do (``pending recover`` is ``pending replay``; ``sessions recover`` is ``sessions
salvage``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_repo import TranscriptWriter

Cli = Callable[..., Any]


def _spool(home: Path, sid: str, n: int) -> None:
    TranscriptWriter(home, sid).flush([{"role": "user", "content": f"m{i}"} for i in range(n)])


def test_pending_recover_replays_like_pending_replay_and_warns(home: Path, cli: Cli) -> None:
    _spool(home, "a", 2)
    old = cli("--home", home, "pending", "recover", "--json")
    assert old.code == 0, old.stderr
    assert "`hermes-repo pending recover` is deprecated" in old.stderr
    assert "use `hermes-repo pending replay`" in old.stderr
    assert json.loads(old.stdout)["inserted"] == 2
    _spool(home, "b", 1)
    new = cli("--home", home, "pending", "replay", "--json")
    assert new.code == 0 and "deprecated" not in new.stderr
    assert json.loads(new.stdout)["inserted"] == 1


def test_sessions_recover_salvages_like_sessions_salvage_and_warns(home: Path, cli: Cli) -> None:
    db = home / "state.db"
    old = cli("--home", home, "sessions", "recover", "--source", db, "--inspect-only", "--json")
    new = cli("--home", home, "sessions", "salvage", "--source", db, "--inspect-only", "--json")
    assert old.code == new.code == 0, (old.stderr, new.stderr)
    assert "use `hermes-repo sessions salvage`" in old.stderr
    assert "deprecated" not in new.stderr
    assert json.loads(old.stdout)["tables"] == json.loads(new.stdout)["tables"]


def test_the_old_names_are_hidden_from_help_and_keep_their_options(cli: Cli) -> None:
    sessions = cli("sessions", "--help")
    assert "salvage" in sessions.stdout and "recover" not in sessions.stdout
    pending = cli("pending", "--help")
    assert "replay" in pending.stdout and "recover" not in pending.stdout
    # Asked for by name, the old command still explains itself and its options.
    old_help = cli("pending", "recover", "--help")
    assert old_help.code == 0
    assert "Deprecated: use `hermes-repo pending replay`" in old_help.stdout
    assert "--adopt" in old_help.stdout
