"""Messages round-trip byte for byte, keep replay order, and keep the counters right."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from hermes_repo import StateStore
from tests.support.stores import new_session

# The public API these tests prove runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("backend")

# Any text SQLite can hold as TEXT except NUL (C strings end there) and lone surrogates
# (not encodable as UTF-8): CJK, emoji, control characters, combining marks.
texts = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))


def test_rich_messages_round_trip_exactly(store: StateStore) -> None:
    sid = new_session(store)
    sent = [
        {"role": "system", "content": "You are terse.", "timestamp": 1.5, "uid": "s1"},
        {"role": "user", "content": "你好，世界 🌍\t\x01\x1f end", "timestamp": 2.0, "uid": "u1"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "look: 图片"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path": "a.txt", "n": 1}'},
                }
            ],
            "reasoning": "think",
            "reasoning_details": [{"type": "summary", "text": "s"}],
            "finish_reason": "tool_calls",
            "token_count": 12,
            "timestamp": 3.0,
            "uid": "a1",
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "name": "read",
            "content": "file body",
            "timestamp": 4.0,
            "uid": "t1",
        },
        {
            "role": "user",
            "content": "shown",
            "api_content": "sent differently",
            "display_only": True,
            "custom_key": {"kept": [1, 2, 3]},
            "timestamp": 5.0,
            "uid": "u2",
        },
    ]
    for msg in sent:
        store.append_message(sid, msg)
    got = store.load_conversation(sid).messages
    assert json.dumps(got, sort_keys=True) == json.dumps(sent, sort_keys=True)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(content=texts, args=texts)
def test_any_text_round_trips(store: StateStore, content: str, args: str) -> None:
    sid = new_session(store)
    msg = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": args}}
        ],
        "timestamp": 1.0,
        "uid": "x",
    }
    store.append_message(sid, msg)
    assert store.load_conversation(sid).messages == [msg]


def test_replay_order_is_insertion_order_not_timestamp(store: StateStore) -> None:
    sid = new_session(store)
    for i, ts in enumerate([30.0, 10.0, 20.0]):
        store.append_message(sid, {"role": "user", "content": f"m{i}", "timestamp": ts})
    got = store.load_conversation(sid).messages
    assert [m["content"] for m in got] == ["m0", "m1", "m2"]


def test_missing_uid_and_timestamp_are_assigned(store: StateStore) -> None:
    sid = new_session(store)
    store.append_message(sid, {"role": "user", "content": "hi"})
    (msg,) = store.load_conversation(sid).messages
    assert isinstance(msg["uid"], str) and len(msg["uid"]) == 32
    assert msg["timestamp"] > 1e9


def test_pagination_by_id(store: StateStore) -> None:
    sid = new_session(store)
    with store.unit_of_work() as uow:
        uow.messages.append_many(sid, [{"role": "user", "content": str(i)} for i in range(10)])
        uow.commit()
    with store.unit_of_work() as uow:
        first = uow.messages.list(sid, with_ids=True, limit=4)
        rest = uow.messages.list(sid, with_ids=True, after_id=first[-1]["id"])
    assert [m["content"] for m in first + rest] == [str(i) for i in range(10)]
    assert "id" not in store.load_conversation(sid).messages[0]


def test_counters_follow_appends_and_tool_calls(store: StateStore) -> None:
    sid = new_session(store)
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    store.append_message(sid, {"role": "user", "content": "a"})
    store.append_message(sid, {"role": "assistant", "tool_calls": [call, {**call, "id": "d"}]})
    with store.unit_of_work() as uow:
        uow.messages.append_many(sid, [{"role": "tool", "tool_call_id": "c", "content": "r"}] * 1)
        uow.commit()
    with store.unit_of_work() as uow:
        row = uow.sessions.require(sid)
        assert (row.message_count, row.tool_call_count) == (3, 2)
        actual = uow.orm.execute(
            text("SELECT count(*) FROM messages WHERE session_id = :s AND active = 1"), {"s": sid}
        ).scalar_one()
    assert actual == 3


def test_sessions_list_most_recent_first(store: StateStore) -> None:
    old = new_session(store, started_at=100.0, title="old")
    new = new_session(store, started_at=200.0, title="new")
    with store.unit_of_work() as uow:
        assert [s.id for s in uow.sessions.list()] == [new, old]
        assert uow.sessions.count() == 2


def test_driver_level_insert_names_every_column_the_codec_fills() -> None:
    from hermes_repo.codec import ROW_COLUMNS, message_to_row
    from hermes_repo.repositories.messages import INSERT_MESSAGE_SQL

    row = message_to_row("s", {"role": "user", "content": "x"})
    assert tuple(row) == ROW_COLUMNS
    assert all(f":{column}" in INSERT_MESSAGE_SQL for column in row)
