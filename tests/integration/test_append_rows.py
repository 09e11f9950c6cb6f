"""The write core's group of rows a caller converted already (``append_rows``, what a
transcript flush hands over): one transaction, the same rows read back; rows not made
for the session refused before anything is written."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.codec import message_to_row, new_uid, tool_call_count
from hermes_repo.errors import InvalidArgumentError
from tests.support.sqltrace import traced, write_commits


def _messages() -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    return [
        {"role": "user", "content": "list the files", "uid": new_uid(), "timestamp": 10.0},
        {"role": "assistant", "content": None, "tool_calls": [call], "uid": new_uid(),
         "timestamp": 11.0},
        {"role": "tool", "content": "a.txt", "tool_call_id": "c1", "name": "ls",
         "uid": new_uid(), "timestamp": 12.0},
    ]  # fmt: skip


def _session(store: StateStore, sid: str) -> None:
    with store.unit_of_work() as uow:
        uow.sessions.create(id=sid)
        uow.commit()


def test_rows_made_by_the_codec_are_written_in_one_transaction_and_read_back_as_given(
    store: StateStore,
) -> None:
    _session(store, "s")
    messages = _messages()
    rows = [message_to_row("s", m) for m in messages]
    calls = sum(tool_call_count(m) for m in messages)
    with traced(store.engine) as seen:
        assert store.append_rows("s", rows, calls) == 3
    assert write_commits(seen) == 1
    loaded = store.load_conversation("s").messages
    assert [m["uid"] for m in loaded] == [m["uid"] for m in messages]
    assert [m.get("content") for m in loaded] == [m["content"] for m in messages]
    assert loaded[1]["tool_calls"] == messages[1]["tool_calls"]
    session = store.get_session("s")
    assert (session.message_count, session.tool_call_count) == (3, 1)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(lambda rows: [*rows[:1], message_to_row("other", _messages()[0])], id="other"),
        pytest.param(lambda rows: [*rows[:1], {"role": "user"}], id="not-a-row"),
        pytest.param(lambda rows: [*rows[:1], ("s", "x")], id="not-a-dict"),
    ],
)
def test_rows_not_made_for_the_session_are_refused_and_nothing_is_written(
    store: StateStore, bad: Any
) -> None:
    _session(store, "s")
    rows = [message_to_row("s", m) for m in _messages()]
    with pytest.raises(InvalidArgumentError, match="rows must be made by message_to_row"):
        store.append_rows("s", bad(rows), 0)
    assert store.load_conversation("s").messages == []
    assert store.get_session("s").message_count == 0
