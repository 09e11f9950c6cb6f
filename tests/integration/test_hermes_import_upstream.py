"""A store built by Hermes Agent's own current code (hermes-agent 0.19.0, schema 22),
imported: the layout between the fixtures (6, 16) and today's.

hermes-agent is an optional test dependency (`pip install --no-deps hermes-agent==0.19.0`,
as CI does); without it these tests are skipped with that reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_repo import StateStore
from tests.support.stores import read_only_rows

hermes_state = pytest.importorskip(
    "hermes_state",
    reason="hermes-agent is not installed: pip install --no-deps hermes-agent==0.19.0",
)

JSON_PREFIX = "\x00json:"
ROOT, CHILD = "20260401_090000_aaaaaa", "20260401_093000_bbbbbb"
IMAGE = [
    {"type": "text", "text": "这张截图是什么错误？"},
    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
]


def _build(path: Path) -> None:
    db = hermes_state.SessionDB(db_path=path)
    try:
        db.create_session(ROOT, "cli", model="claude-sonnet-4")
        db.set_session_title(ROOT, "Deploy the gateway")
        db.update_system_prompt(ROOT, "You are Hermes.")
        db.update_session_cwd(ROOT, "/srv/app", git_branch="main")
        db.append_message(ROOT, "user", "deploy it please")
        db.append_message(
            ROOT,
            "assistant",
            None,
            tool_calls=[
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": '{"cmd": "make deploy"}'},
                }
            ],
            reasoning="run the deploy",
            reasoning_details=[{"type": "thinking", "thinking": "deploy"}],
            finish_reason="tool_calls",
        )
        db.append_message(ROOT, "tool", "x" * 50_000, tool_call_id="call_1", tool_name="terminal")
        db.append_message(ROOT, "assistant", "done", reasoning_content="kimi thoughts")
        undo_from = db.append_message(ROOT, "user", "actually, undo that")
        db.append_message(ROOT, "assistant", "undone")
        db.rewind_to_message(ROOT, undo_from)
        db.update_token_counts(ROOT, input_tokens=1200, output_tokens=340, api_call_count=3)
        db.end_session(ROOT, "compression")
        db.create_session(CHILD, "telegram", user_id="7712345678", parent_session_id=ROOT)
        db.append_message(CHILD, "user", IMAGE, platform_message_id="tg-1")  # type: ignore[arg-type]
        db.append_message(CHILD, "user", "群里聊天", observed=True)
        db.append_message(CHILD, "assistant", "好的 ✅", finish_reason="stop")
    finally:
        db.close()


def test_a_store_written_by_hermes_own_code_imports_with_every_value(
    store: StateStore, tmp_path: Path
) -> None:
    src = tmp_path / "hermes" / "state.db"
    src.parent.mkdir()
    _build(src)

    report = store.import_hermes_db(src)

    messages = read_only_rows(src, "SELECT * FROM messages ORDER BY id")
    sessions = read_only_rows(src, "SELECT * FROM sessions")
    assert report.schema_version == hermes_state.SCHEMA_VERSION
    assert report.messages.imported == len(messages) and report.sessions.imported == 2
    assert any(m["content"] and m["content"].startswith(JSON_PREFIX) for m in messages)
    assert [m["id"] for m in messages if not m["active"]]  # the rewind left inactive rows

    for row in messages:
        sid = row["session_id"]
        loaded = store.load_conversation(sid, include_inactive=True).messages
        (msg,) = [m for m in loaded if m["uid"] == f"hermes:{sid}:{row['id']}"]
        for key, value in row.items():
            if value is None or key in ("id", "session_id"):
                continue
            if key == "active":
                assert msg.get("active", True) is bool(value)
            elif key == "content" and value.startswith(JSON_PREFIX):
                assert msg["content"] == json.loads(value[len(JSON_PREFIX) :]) == IMAGE
            elif key in ("tool_calls", "reasoning_details"):
                assert msg[key] == json.loads(value), key
            else:
                assert msg[key] == value, (row["id"], key)
    for row in sessions:
        with store.unit_of_work() as uow:
            mine = uow.sessions.require(row["id"])
            extra = json.loads(mine.extra) if mine.extra else {}
        for key, value in row.items():
            if value is not None:
                assert getattr(mine, key, None) == value or extra.get(key) == value, key

    replay = store.load_conversation(ROOT).messages
    live = [m["id"] for m in messages if m["session_id"] == ROOT and m["active"]]
    assert len(live) < len([m for m in messages if m["session_id"] == ROOT])
    assert [m["uid"] for m in replay] == [f"hermes:{ROOT}:{i}" for i in live]
    assert store.import_hermes_db(src).messages.imported == 0
