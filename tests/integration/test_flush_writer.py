"""TranscriptWriter.flush on a healthy store, without a store, and on unsafe paths."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import (
    FlushResult,
    IntegrityViolation,
    StateStore,
    TranscriptWriter,
)
from hermes_repo.transcript import spool
from tests.support.spooling import check_store, pending_files, stored

# The public API these tests prove runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("backend")

Msg = dict[str, Any]


def convo(n: int, start: int = 0) -> list[Msg]:
    return [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
        for i in range(start, start + n)
    ]


def test_flush_writes_each_message_once_and_stamps_uid_and_timestamp(store: StateStore) -> None:
    writer = store.transcript_writer("s1")
    messages = convo(3)
    result = writer.flush(messages)
    assert (result.written, result.spooled, result.error, result.ok) == (3, 0, None, True)
    assert all(isinstance(m["uid"], str) and isinstance(m["timestamp"], float) for m in messages)
    rows = stored(store.home, "s1")
    assert [(r["uid"], r["timestamp"]) for r in rows] == [
        (m["uid"], m["timestamp"]) for m in messages
    ]
    stamped = [(m["uid"], m["timestamp"]) for m in messages]
    messages += convo(2, start=3)
    again = writer.flush(messages)
    assert (again.written, again.spooled) == (2, 0)
    assert [(m["uid"], m["timestamp"]) for m in messages[:3]] == stamped  # assigned once
    assert writer.flush(messages) == FlushResult(0, 0)
    assert [r["content"] for r in stored(store.home, "s1")] == [f"message {i}" for i in range(5)]
    assert store.health().counts["sessions"] == 1  # the session row was created
    check_store(store.home)


def test_caller_supplied_uid_and_timestamp_are_kept(store: StateStore) -> None:
    message = {"role": "user", "content": "x", "uid": "my-uid", "timestamp": 1234.5}
    store.transcript_writer("s1").flush([message])
    (row,) = stored(store.home, "s1")
    assert (row["uid"], row["timestamp"]) == ("my-uid", 1234.5)


def test_the_cursor_survives_repair_and_compaction_of_the_list(store: StateStore) -> None:
    writer = store.transcript_writer("s1")
    messages = convo(4)
    writer.flush(messages)
    # The caller's repair drops one message and merges two others in place; then the
    # turn goes on. Position-based cursors skip or repeat here; uids do not.
    del messages[1]
    messages[1]["content"] += " (merged)"
    messages += convo(2, start=10)
    result = writer.flush(messages)
    assert (result.written, result.spooled) == (2, 0)
    assert [r["content"] for r in stored(store.home, "s1")] == [
        "message 0",
        "message 1",
        "message 2",
        "message 3",
        "message 10",
        "message 11",
    ]
    # Reordered, duplicated within the list: still nothing twice.
    messages.reverse()
    assert writer.flush(messages + messages[:2]) == FlushResult(0, 0)


def test_a_new_writer_learns_what_is_durable_from_the_database(store: StateStore) -> None:
    store.transcript_writer("s1").flush(convo(3))
    loaded = store.load_conversation("s1").messages  # carries uid and timestamp
    loaded += convo(1, start=3)
    result = store.transcript_writer("s1").flush(loaded)
    assert (result.written, result.spooled) == (1, 0)
    assert len(stored(store.home, "s1")) == 4


def test_an_invalid_message_is_rejected_and_the_valid_ones_are_written(
    store: StateStore,
) -> None:
    writer = store.transcript_writer("s1")
    result = writer.flush([{"role": "user", "content": "ok"}, {"role": "wizard", "content": "x"}])
    assert (result.written, result.spooled, result.rejected) == (1, 0, 1)
    assert "role" in result.rejections[0].reason and not result.ok
    result = writer.flush(["not a message"])  # type: ignore[list-item]
    assert result.rejected == 1 and "dict" in result.rejections[0].reason
    result = writer.flush([{"role": "user", "content": "x", "uid": 42}])
    assert result.rejected == 1 and "uids are strings" in result.rejections[0].reason
    assert [m["content"] for m in stored(store.home, "s1")] == ["ok"]
    assert pending_files(store.home) == []


def test_without_a_store_everything_is_spooled_and_recovered_once(home: Path) -> None:
    writer = TranscriptWriter(home, "offline")
    messages = convo(3)
    first = writer.flush(messages)
    assert (first.written, first.spooled, first.unsaved) == (0, 3, 0)
    assert first.error is not None and "no store" in first.error
    messages += convo(1, start=3)
    second = writer.flush(messages)
    assert (second.written, second.spooled) == (0, 4)
    path = writer.pending_path
    lines = path.read_bytes().splitlines()
    assert len(lines) == 4  # each message appended once, not the whole list again
    record = json.loads(lines[0])
    # Without a store the record names the store the writer would have opened (the
    # URL in the environment, else the home's file), never a password.
    assert set(record) == {"_fallback_timestamp", "session_id", "source", "target", "message"}
    assert record["target"].startswith(("sqlite:", "postgresql"))
    assert ":***@" not in record["target"]
    assert record["session_id"] == "offline"
    assert record["source"] == "cli"  # the writer's: a replay creating the session uses it
    assert record["message"]["uid"] == messages[0]["uid"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700

    with StateStore.open(home) as store:  # recovery runs at open
        report = store.last_replay
        assert report is not None
        assert (report.files, report.inserted, report.duplicates, report.kept) == (1, 4, 0, 0)
        rows = stored(home, "offline")
        assert [r["uid"] for r in rows] == [m["uid"] for m in messages]
        assert [r["timestamp"] for r in rows] == [m["timestamp"] for m in messages]
        assert not path.exists()
        assert store.replay_pending().inserted == 0
    check_store(home)


@pytest.mark.parametrize(
    "bad", ["../x", "a/b", "", "x" * 200, "a\0b", "..", ".hidden", "/abs", "a\\b", "a b"]
)
def test_hostile_session_ids_are_refused(home: Path, store: StateStore, bad: str) -> None:
    with pytest.raises(IntegrityViolation):
        TranscriptWriter(home, bad)
    with pytest.raises(IntegrityViolation):
        store.transcript_writer(bad)
    with pytest.raises(IntegrityViolation):
        store.replay_pending(bad)
    assert sorted(os.listdir(home.parent)) == ["home"]  # nothing created beside the store


def test_a_symlinked_sessions_folder_is_refused(home: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (home / "sessions").symlink_to(elsewhere)
    result = TranscriptWriter(home, "s1").flush(convo(2))
    assert (result.spooled, result.unsaved) == (0, 2)
    assert result.error is not None and "symlink" in result.error
    assert list(elsewhere.iterdir()) == []


def test_a_symlinked_spool_file_is_refused_and_its_target_untouched(
    home: Path, tmp_path: Path
) -> None:
    target = tmp_path / "victim.txt"
    target.write_text("precious\n")
    folder = home / "sessions"
    folder.mkdir(mode=0o700)
    (folder / "s1.pending.jsonl").symlink_to(target)
    result = TranscriptWriter(home, "s1").flush(convo(1))
    assert result.unsaved == 1 and result.error is not None and "symlink" in result.error
    with StateStore.open(home) as store:
        report = store.replay_pending()
        assert report.inserted == 0 and report.errors and "symlink" in report.errors[0]
    assert target.read_text() == "precious\n"


def test_an_existing_spool_file_with_loose_permissions_is_tightened(home: Path) -> None:
    folder = home / "sessions"
    folder.mkdir(mode=0o700)
    path = folder / "s1.pending.jsonl"
    path.write_bytes(b"")
    path.chmod(0o644)
    TranscriptWriter(home, "s1").flush(convo(1))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_torn_tail_left_by_a_crash_never_fuses_with_new_records(home: Path) -> None:
    folder = home / "sessions"
    folder.mkdir(mode=0o700)
    (folder / "s1.pending.jsonl").write_bytes(b'{"_fallback_timestamp": 1, "message": {"ro')
    messages = convo(2)
    TranscriptWriter(home, "s1").flush(messages)
    with StateStore.open(home) as store:
        report = store.last_replay
        assert report is not None and (report.inserted, report.kept) == (2, 1)
    assert [r["uid"] for r in stored(home, "s1")] == [m["uid"] for m in messages]


RICH: list[Msg] = [
    {"role": "system", "content": "你是一个简洁的助手。日本語も話せます。한국어도."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "这张图里有什么？ \u2028 (line separator kept)"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ],
        "api_content": '[{"type":"text","text":"这张图里有什么？"}]',
    },
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "搜索", "arguments": '{"q": "猫 🐱", "n": 3}'},
            }
        ],
        "reasoning": "需要先搜索",
        "reasoning_details": [{"type": "summary", "text": "思考…"}],
        "finish_reason": "tool_calls",
    },
    {
        "role": "tool",
        "content": '{"result": "一只猫 \\u0000 escaped NUL, tab\\t"}',
        "tool_call_id": "call_1",
        "name": "搜索",
    },
    {
        "role": "assistant",
        "content": "是一只猫。",
        "display_only": True,
        "custom_key": {"x": [1, 2.5]},
    },
]


def canonical(messages: list[Msg]) -> list[str]:
    return [json.dumps(m, ensure_ascii=False, sort_keys=True) for m in messages]


def test_cjk_multimodal_and_tool_calls_round_trip_byte_for_byte(home: Path) -> None:
    messages = [dict(m) for m in RICH]
    TranscriptWriter(home, "rich").flush(messages)
    raw = (home / "sessions" / "rich.pending.jsonl").read_bytes()
    assert "你是一个简洁的助手".encode() in raw  # UTF-8 as is, not \\u escapes
    with StateStore.open(home) as store:
        loaded = store.load_conversation("rich").messages
        direct = [dict(m) for m in RICH]
        store.transcript_writer("direct").flush(direct)
        loaded_direct = store.load_conversation("direct").messages
    assert canonical(loaded) == canonical(messages)
    # The spooled path and the direct path store the same bytes.
    strip = [{k: v for k, v in m.items() if k not in ("uid", "timestamp")} for m in loaded]
    strip_direct = [
        {k: v for k, v in m.items() if k not in ("uid", "timestamp")} for m in loaded_direct
    ]
    assert canonical(strip) == canonical(strip_direct)


def test_spool_layout_is_recognised_by_name(home: Path) -> None:
    assert spool.session_id_from_name("abc.pending.jsonl") == "abc"
    assert spool.session_id_from_name("a.b.pending.jsonl") == "a.b"
    assert spool.session_id_from_name("..pending.jsonl") is None
    assert spool.session_id_from_name("abc.jsonl") is None
