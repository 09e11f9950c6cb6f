"""`pending list` and `pending replay` with encoded spool names and the previous
version's names side by side."""

from __future__ import annotations

import json
from pathlib import Path

from hermes_repo.transcript import spool
from tests.cli.conftest import Cli
from tests.support.spooling import stored


def _record(text: str, uid: str) -> str:
    message = {"role": "user", "content": text, "timestamp": 1_772_000_000.0, "uid": uid}
    return json.dumps({"_fallback_timestamp": 1.0, "message": message}) + "\n"


def test_pending_list_and_recover_read_old_and_new_names(home: Path, cli: Cli) -> None:
    folder = spool.sessions_dir(home)
    folder.mkdir(mode=0o700)
    (folder / "Chat-1.pending.jsonl").write_text(_record("old name", "o-1"))
    spool.append_messages(home, "chat.pending", [{"role": "user", "content": "s"}], suffix=".jsonl")
    spool.append_messages(home, "Chat-1", [{"role": "user", "content": "new name", "uid": "n-1"}])
    spool.append_messages(home, "chat", [{"role": "user", "content": "plain", "uid": "p-1"}])
    listed = cli("--home", home, "pending", "list", "--json")
    assert listed.code == 0, listed.stderr
    rows = sorted((r["kind"], r["session_id"], r["records"]) for r in json.loads(listed.stdout))
    assert rows == [
        ("pending", "Chat-1", 1),
        ("pending", "Chat-1", 1),
        ("pending", "chat", 1),
        ("salvage", "chat.pending", 1),
    ]
    recovered = cli("--home", home, "pending", "replay", "--json")
    assert recovered.code == 0, recovered.stderr
    assert sorted(r["content"] for r in stored(home, "Chat-1")) == ["new name", "old name"]
    assert [r["content"] for r in stored(home, "chat")] == ["plain"]
    assert stored(home, "chat.pending") == []
    after = json.loads(cli("--home", home, "pending", "list", "--json").stdout)
    assert [(r["kind"], r["session_id"]) for r in after] == [("salvage", "chat.pending")]
