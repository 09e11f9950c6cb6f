"""Keys the layer writes itself, sent by a caller: kept losslessly, never mixed with the
layer's own values; keys JSON would silently change are refused."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.codec import TEXT_MARK
from hermes_repo.errors import IntegrityViolation
from tests.support.stores import new_session


def test_layer_keys_sent_by_a_caller_come_back_byte_for_byte(store: StateStore) -> None:
    sid = new_session(store)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "hi",
        "id": "msg_01XYZ",
        "session_id": "upstream-7",
        "active": "yes",
        "archived_at": 12.5,
        "archive_reason": {"why": ["nested"]},
        TEXT_MARK + "id": "a key that starts with the escape mark",
    }
    store.append_message(sid, dict(message))
    (got,) = store.load_conversation(sid).messages
    assert {k: v for k, v in got.items() if k not in ("uid", "timestamp")} == message


def test_with_ids_keeps_the_row_id_and_the_callers_id_apart(store: StateStore) -> None:
    sid = new_session(store)
    row_id = store.append_message(sid, {"role": "user", "content": "q", "id": "msg_1"})
    (got,) = store.load_conversation(sid, with_ids=True).messages
    assert got["id"] == row_id
    assert got[TEXT_MARK + "id"] == "msg_1"
    (plain,) = store.load_conversation(sid).messages
    assert plain["id"] == "msg_1"


@pytest.mark.parametrize("value", ["x", [1], 1, 0, "", {}])
def test_display_only_that_is_not_a_bool_is_refused(store: StateStore, value: Any) -> None:
    sid = new_session(store)
    with pytest.raises(IntegrityViolation, match="display_only"):
        store.append_message(sid, {"role": "user", "content": "c", "display_only": value})
    assert list(store.load_conversation(sid).messages) == []


@pytest.mark.parametrize(
    ("message", "path"),
    [
        ({"extra": {1: "int-one", "1": "str-one"}}, "extra"),
        ({"meta": {"a": [{True: "b"}]}}, "meta['a'][0]"),
        ({"meta": {None: "n"}}, "meta"),
        ({"tool_calls": [{"id": "c", "function": {2.5: "x"}}]}, "tool_calls[0]['function']"),
        ({"content": [{"type": "text", "text": "t", 3: "x"}]}, "content[0]"),
    ],
)
def test_non_string_nested_keys_are_refused_naming_the_path(
    store: StateStore, message: dict[str, Any], path: str
) -> None:
    sid = new_session(store)
    with pytest.raises(IntegrityViolation) as caught:
        store.append_message(sid, {"role": "assistant", "content": "c", **message})
    assert repr(path)[1:-1] in str(caught.value)
    assert "string keys" in str(caught.value)
    assert list(store.load_conversation(sid).messages) == []
