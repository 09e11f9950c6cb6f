"""The message reads and the bulk insert give the same answers on a driver cursor as
through SQLAlchemy (the load path runs on the cursor; the repository runs on both)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.codec import new_uid
from hermes_repo.repositories import MessageRepository


def _conversation(store: StateStore, n: int) -> str:
    msgs: list[dict[str, Any]] = []
    for i in range(n):
        m: dict[str, Any] = {"role": "user" if i % 2 == 0 else "assistant", "timestamp": i}
        m["content"] = f"message {i} 数据 \ufdd0 mark"
        if i % 5 == 1:
            m["tool_calls"] = [{"id": f"c{i}", "type": "function", "function": {"name": "t"}}]
        if i % 7 == 3:
            m["id"] = f"caller-{i}"  # a caller key named like a layer key
        msgs.append(m)
    with store.unit_of_work() as uow:
        sid = uow.sessions.create("cli")
        uow.messages.append_many(sid, msgs)
        uow.commit()
    return sid


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"with_ids": True},
        {"include_inactive": True},
        {"after_id": 5},
        {"limit": 4},
        {"after_id": 3, "limit": 6, "with_ids": True},
    ],
)
def test_list_on_a_cursor_equals_list_through_sqlalchemy(
    store: StateStore, kwargs: dict[str, Any]
) -> None:
    sid = _conversation(store, 30)
    with store.unit_of_work() as uow:
        uid = store.load_conversation(sid).messages[2]["uid"]
        uow.messages.set_active(sid, uid, False, reason="test")
        uow.messages.recount(sid)
        uow.commit()

    def both(conn: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        through = MessageRepository(conn).list(sid, **kwargs)
        cursor = conn.connection.dbapi_connection.cursor()
        try:
            on_cursor = MessageRepository(cursor).list(sid, **kwargs)
        finally:
            cursor.close()
        return through, on_cursor

    through, on_cursor = store.read(both)
    assert on_cursor == through
    assert through  # the case reads something
    if "limit" in kwargs:
        assert len(through) == kwargs["limit"]
    if kwargs.get("include_inactive"):
        assert any(m.get("active") is False for m in through)
    else:
        assert all("active" not in m for m in through)


def test_load_conversation_returns_what_was_appended_with_the_callers_keys(
    store: StateStore,
) -> None:
    sid = _conversation(store, 12)
    loaded = store.load_conversation(sid).messages
    assert [m["content"] for m in loaded] == [f"message {i} 数据 \ufdd0 mark" for i in range(12)]
    assert loaded[3]["id"] == "caller-3"  # the caller's key, not the row id
    with_ids = store.load_conversation(sid, with_ids=True).messages
    assert all(isinstance(m["id"], int) for m in with_ids)
    assert with_ids[3]["\ufdd0id"] == "caller-3"


def test_bulk_insert_keeps_the_counters_and_every_row(store: StateStore) -> None:
    sid = _conversation(store, 25)
    meta = store.get_session(sid)
    assert meta.message_count == 25
    assert meta.tool_call_count == 5
    assert len(store.load_conversation(sid).messages) == 25


def test_new_uids_are_32_hex_digits_and_distinct() -> None:
    uids = {new_uid() for _ in range(2000)}
    assert len(uids) == 2000
    assert all(re.fullmatch(r"[0-9a-f]{32}", u) for u in uids)
