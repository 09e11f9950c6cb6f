"""``hermes-repo pending list|recover`` through the installed console script."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_repo import TranscriptWriter
from tests.support.spooling import pending_files, stored

Cli = Callable[..., Any]


def spool_some(home: Path, sid: str, n: int) -> list[str]:
    messages = [{"role": "user", "content": f"{sid} 消息 {i}"} for i in range(n)]
    TranscriptWriter(home, sid).flush(messages)  # no store: everything is spooled
    return [m["uid"] for m in messages]


def test_pending_list_shows_each_file_and_json_for_scripts(home: Path, cli: Cli) -> None:
    empty = cli("--home", home, "pending", "list", "--json")
    assert empty.code == 0 and json.loads(empty.stdout) == []
    before = time.time()
    spool_some(home, "alpha", 3)
    spool_some(home, "beta", 1)
    with (home / "sessions" / "beta.pending.jsonl").open("ab") as f:
        f.write(b'{"torn')
    result = cli("--home", home, "pending", "list", "--json")
    listed = time.time()
    assert result.code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [(r["kind"], r["session_id"], r["records"], r["bad_lines"]) for r in rows] == [
        ("pending", "alpha", 3, 0),
        ("pending", "beta", 1, 1),
    ]
    # Written between `before` and `listed`: the age is bounded by those clock readings,
    # not by a guess at how fast the machine is.
    for r in rows:
        assert before <= r["oldest_at"] <= listed
        assert 0 <= r["oldest_age_s"] <= listed - before
    human = cli("--home", home, "pending", "list")
    assert human.code == 0 and "alpha" in human.stdout and "beta" in human.stdout


def test_pending_recover_replays_and_reports(home: Path, cli: Cli) -> None:
    uids = spool_some(home, "alpha", 3)
    result = cli("--home", home, "pending", "replay", "--json")
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "files": 1,
        "inserted": 3,
        "duplicates": 0,
        "kept": 0,
        "conflicts": 0,
        "foreign": 0,
        "foreign_notes": [],
        "errors": [],
    }
    assert [r["uid"] for r in stored(home, "alpha")] == uids
    assert pending_files(home) == []
    again = cli("--home", home, "pending", "replay")
    assert again.code == 0 and "0 file(s)" in again.stdout


def test_pending_recover_fails_with_one_line_when_a_file_cannot_be_replayed(
    home: Path, cli: Cli
) -> None:
    folder = home / "sessions"
    folder.mkdir(mode=0o700)
    (folder / "bad name.pending.jsonl").write_text('{"role": "user", "content": "x"}\n')
    result = cli("--home", home, "pending", "replay")
    assert result.code == 1
    assert len(result.error_lines) == 1 and result.error_lines[0].startswith("error: ")
    assert "not a valid session id" in result.error_lines[0]
