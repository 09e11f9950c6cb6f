"""U+0000 in a message's text: kept as it is by SQLite, refused by name on PostgreSQL
(its text type cannot hold the character, so such a write could never succeed)."""

from __future__ import annotations

import json

import pytest

from hermes_repo import StateStore
from hermes_repo.errors import IntegrityViolation
from tests.support.stores import new_session

NUL_FIELDS = [
    ("content", {"role": "user", "content": "before\x00after"}),
    ("reasoning", {"role": "assistant", "content": "ok", "reasoning": "think\x00ing"}),
    ("tool_name", {"role": "tool", "content": "ok", "tool_name": "gr\x00ep"}),
]


@pytest.mark.parametrize(("field", "message"), NUL_FIELDS, ids=[f for f, _ in NUL_FIELDS])
def test_append_of_nul_text_is_kept_on_sqlite_and_refused_naming_the_field_on_postgresql(
    backend: str, store: StateStore, field: str, message: dict[str, str]
) -> None:
    sid = new_session(store)
    if backend == "sqlite":
        store.append_message(sid, message)
        (loaded,) = store.load_conversation(sid).messages
        assert loaded[field] == message[field]
        return
    with pytest.raises(IntegrityViolation) as info:
        store.append_message(sid, message)
    assert repr(field) in str(info.value) and "U+0000" in str(info.value)
    with pytest.raises(IntegrityViolation), store.unit_of_work() as uow:
        uow.messages.append(sid, message)
    assert store.load_conversation(sid).messages == []
    assert store.get_session(sid).message_count == 0


def test_nul_inside_json_values_is_stored_on_both_backends(backend: str, store: StateStore) -> None:
    sid = new_session(store)
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": "a\x00b"}],  # its search copy gets U+FFFD
        "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "\x00"}}],
        "custom": "x\x00y",
    }
    store.append_message(sid, message)
    (loaded,) = store.load_conversation(sid).messages
    assert {k: loaded[k] for k in message} == message


def test_a_flush_rejects_nul_text_on_postgresql_and_writes_the_rest(
    backend: str, store: StateStore
) -> None:
    sid = new_session(store)
    writer = store.transcript_writer(sid)
    good = {"role": "user", "content": "fine", "uid": "u-good"}
    bad = {"role": "assistant", "content": "bro\x00ken", "uid": "u-nul"}
    result = writer.flush([good, bad])
    stored = [m["uid"] for m in store.load_conversation(sid).messages]
    rejected_file = store.home / "sessions" / f"{sid}.rejected.jsonl"
    if backend == "sqlite":
        assert result.ok and stored == ["u-good", "u-nul"]
        assert not rejected_file.exists()
        return
    assert (result.written, result.spooled, result.rejected) == (1, 0, 1)
    (rejection,) = result.rejections
    assert rejection.index == 1 and rejection.uid == "u-nul"
    assert "'content'" in rejection.reason and "U+0000" in rejection.reason
    assert stored == ["u-good"]
    assert not writer.pending_path.exists()  # nothing spooled that could never replay
    (line,) = rejected_file.read_text(encoding="utf-8").splitlines()
    kept = json.loads(line)
    assert kept["message"]["uid"] == "u-nul" and "U+0000" in kept["_rejected"]
