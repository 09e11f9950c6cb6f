"""The codec at any nesting depth (refused past MAX_DEPTH, never RecursionError) and on
rows it did not write (kept under ``$invalid``, never an exception)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_repo.codec import (
    INVALID_KEY,
    MAX_DEPTH,
    MESSAGE_COLUMNS,
    dumps,
    loads,
    message_to_row,
    nesting_depth,
    row_to_message,
)
from hermes_repo.errors import IntegrityViolation
from tests.support.odd_values import nested


@settings(max_examples=60, deadline=None)
@given(
    depth=st.integers(0, 2000),
    dicts=st.booleans(),
    field=st.sampled_from(["content", "tool_calls", "reasoning_details", "metadata", "name"]),
)
def test_a_value_is_stored_up_to_the_limit_and_refused_past_it_naming_field_and_depth(
    depth: int, dicts: bool, field: str
) -> None:
    message = {"role": "assistant", "content": "x", field: nested(depth, dicts=dicts)}
    if depth <= MAX_DEPTH:
        row = message_to_row("s", message)
        values = {**row, "id": 1, "active": 1, "archived_at": None, "archive_reason": None}
        back = row_to_message(tuple(values.get(c) for c in MESSAGE_COLUMNS))
        assert back[field] == message[field]
        return
    with pytest.raises(IntegrityViolation) as info:
        message_to_row("s", message)
    text = str(info.value)
    assert repr(field) in text and f"nested {depth} levels" in text and str(MAX_DEPTH) in text


def test_a_value_a_hundred_thousand_levels_deep_is_refused_not_a_recursion_error() -> None:
    for dicts in (False, True):
        with pytest.raises(IntegrityViolation, match="nested 100000 levels deep"):
            message_to_row("s", {"role": "user", "content": nested(100_000, dicts=dicts)})


def test_a_structure_that_contains_itself_is_named_as_circular_at_any_depth() -> None:
    loop: list[Any] = []
    loop.append({"k": nested(500, dicts=True), "back": loop})
    with pytest.raises(IntegrityViolation, match="does not contain itself"):
        message_to_row("s", {"role": "user", "content": "x", "meta": loop})
    assert nesting_depth(loop) is None


def test_a_shared_subtree_counts_at_its_deepest_place() -> None:
    shared = nested(MAX_DEPTH - 1)
    assert nesting_depth([shared, shared]) == MAX_DEPTH
    assert nesting_depth([shared, [shared]]) == MAX_DEPTH + 1
    with pytest.raises(IntegrityViolation, match=f"nested {MAX_DEPTH + 1} levels"):
        message_to_row("s", {"role": "user", "content": [shared, [shared]]})


def test_json_helpers_raise_value_error_not_recursion_error_at_any_depth() -> None:
    with pytest.raises(ValueError, match="nested too deeply"):
        dumps(nested(100_000))
    with pytest.raises(ValueError, match="nested too deeply"):
        loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deeply"):  # the surrogate-escape path
        loads("[" * 100_000 + '"\\ud83d\\ude00"' + "]" * 100_000)


def row(**columns: Any) -> tuple[Any, ...]:
    base: dict[str, Any] = {
        "id": 7,
        "uid": "u1",
        "role": "assistant",
        "content": "hello",
        "timestamp": 1_772_713_800.0,
        "display_only": 0,
        "active": 1,
    }
    base.update(columns)
    return tuple(base.get(c) for c in MESSAGE_COLUMNS)


@pytest.mark.parametrize(
    ("column", "stored", "field", "raw"),
    [
        ("tool_calls", "[{bad", "tool_calls", "[{bad"),
        ("content_parts", "{oops", "content", "{oops"),
        ("reasoning_details", "nope", "reasoning_details", "nope"),
        ("extra", "{x", "extra", "{x"),
        ("extra", "[1, 2]", "extra", "[1, 2]"),
        ("timestamp", "2024-01-01", "timestamp", "2024-01-01"),
        ("timestamp", "abc", "timestamp", "abc"),
        ("token_count", "abc", "token_count", "abc"),
        ("token_count", 1.5, "token_count", 1.5),
        ("content", b"\xff\x00", "content", repr(b"\xff\x00")),
        ("reasoning", b"blob", "reasoning", repr(b"blob")),
        ("tool_calls", "[" * 5000 + "]" * 5000, "tool_calls", "[" * 5000 + "]" * 5000),
    ],
)
def test_a_value_the_store_did_not_write_is_kept_under_invalid_never_raised(
    column: str, stored: Any, field: str, raw: Any
) -> None:
    message = row_to_message(row(**{column: stored}))
    kept = message[INVALID_KEY][field]
    assert kept["raw"] == raw and kept["reason"]
    assert field not in message or (field == "content" and column == "content_parts")
    assert message["uid"] == "u1" and message["role"] == "assistant"
    assert loads(dumps(message, strict=True)) == message  # the export keeps it exactly


@pytest.mark.parametrize("stamp", [1e300, -5.0, math.inf, 1_772_713_800_000.0])
def test_an_implausible_but_numeric_time_is_returned_as_stored(stamp: float) -> None:
    message = row_to_message(row(timestamp=stamp))
    assert message["timestamp"] == stamp and INVALID_KEY not in message


def test_rows_the_store_wrote_have_no_invalid_key_and_odd_but_valid_json_is_returned() -> None:
    assert INVALID_KEY not in row_to_message(row())
    assert row_to_message(row(tool_calls='"\\ud800"'))["tool_calls"] == "\ud800"
    assert row_to_message(row(content="a\x00b"))["content"] == "a\x00b"


def test_a_callers_own_invalid_key_never_mixes_with_the_layers() -> None:
    mine = message_to_row("s", {"role": "user", "content": "x", "$invalid": "mine"})
    values = {**mine, "id": 1, "active": 1}
    plain = row_to_message(tuple(values.get(c) for c in MESSAGE_COLUMNS))
    assert plain["$invalid"] == "mine"
    values["tool_calls"] = "{bad"
    damaged = row_to_message(tuple(values.get(c) for c in MESSAGE_COLUMNS))
    assert damaged[INVALID_KEY] == {
        "tool_calls": {"raw": "{bad", "reason": damaged[INVALID_KEY]["tool_calls"]["reason"]}
    }
    assert damaged["\ufdd0$invalid"] == "mine"
