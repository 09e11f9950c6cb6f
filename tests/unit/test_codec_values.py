"""The codec's encodings of odd text, and its refusals of values that cannot be stored."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_repo.codec import (
    MAX_TIMESTAMP,
    MESSAGE_COLUMNS,
    TEXT_MARK,
    check_timestamp,
    content_columns,
    decode_text,
    dumps,
    encode_text,
    loads,
    message_to_row,
    row_to_message,
)
from hermes_repo.codec.rows import _RESERVED as RESERVED
from hermes_repo.errors import IntegrityViolation

# Every code point, lone surrogates (category Cs, which st.characters() leaves out) too.
ANY_TEXT = st.text(st.characters() | st.characters(categories=["Cs"]), max_size=30)
# Text rich in the hard cases: lone high and low surrogates next to each other, the
# text column mark, NUL (the slow decoder's marker), backslashes and astral characters.
ODD_TEXT = st.lists(
    st.sampled_from(
        ["\ud83d", "\ude00", "\udc80", "\ud800", "\udfff", TEXT_MARK, "\x00", "\\", "\\u", "😀"]
    )
    | ANY_TEXT,
    max_size=6,
).map("".join)
TEXT = ODD_TEXT | ANY_TEXT
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)


def utf8(text: str) -> bytes:
    return text.encode("utf-8")  # raises on a lone surrogate: what SQLite would refuse


@settings(max_examples=400)
@given(JSON_VALUES)
def test_json_with_lone_surrogates_round_trips_exactly_as_utf8(value: Any) -> None:
    text = dumps(value)
    utf8(text)
    assert loads(text) == value
    assert loads(utf8(text)) == value
    assert json.loads(text) is not None or value is None  # valid JSON for any reader


def test_an_escaped_surrogate_pair_stays_two_lone_surrogates() -> None:
    # The standard parser would join them into one emoji: a different string.
    value = {"\ud83d\ude00": ["\ud83d\ude00", "a\\ud83d\\ude00", "\x00d83d", "😀"]}
    text = dumps(value)
    assert json.loads(text) != value
    assert loads(text) == value


@settings(max_examples=400)
@given(TEXT)
def test_text_columns_encode_reversibly_as_utf8(value: str) -> None:
    stored = encode_text(value)
    utf8(stored)
    assert decode_text(stored) == value
    assert stored == value or stored.startswith(TEXT_MARK)


@given(TEXT)
def test_text_content_is_stored_exactly_and_searchably(value: str) -> None:
    columns = content_columns(value)
    for column in columns.values():
        if column is not None:
            utf8(column)
    if columns["content_parts"] is None:
        assert columns["content"] == value
    else:
        assert loads(columns["content_parts"]) == value
        assert columns["content_text"] is not None and "\ufffd" in columns["content_text"]


@settings(max_examples=300)
@given(
    content=TEXT | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": TEXT})),
    reasoning=TEXT,
    finish=TEXT,
    tool_call_id=TEXT,
    tool_name=TEXT,
    api_content=TEXT,
    arguments=TEXT,
    extra_key=TEXT.filter(lambda k: k not in RESERVED),
    extra_value=JSON_VALUES.filter(lambda v: v is not None),
)
def test_every_text_field_of_a_message_round_trips_through_a_row(
    content: Any,
    reasoning: str,
    finish: str,
    tool_call_id: str,
    tool_name: str,
    api_content: str,
    arguments: str,
    extra_key: str,
    extra_value: Any,
) -> None:
    message: dict[str, Any] = {
        "role": "tool",
        "content": content,
        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": arguments}}],
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "finish_reason": finish,
        "reasoning": reasoning,
        "reasoning_details": [{"text": reasoning}],
        "api_content": api_content,
        extra_key: extra_value,
    }
    row = message_to_row("s", message, now=1_700_000_000.0)
    for value in row.values():
        if isinstance(value, str):
            utf8(value)
    values = {**row, "id": 1, "active": 1, "archived_at": None, "archive_reason": None}
    back = row_to_message(tuple(values.get(c) for c in MESSAGE_COLUMNS))
    expected = {k: v for k, v in message.items() if v is not None}
    assert {k: v for k, v in back.items() if k not in ("uid", "timestamp")} == expected


def _circular() -> list[Any]:
    items: list[Any] = []
    items.append(items)
    return items


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("token_count", 2**64, "64-bit"),
        ("token_count", -(2**63) - 1, "64-bit"),
        ("token_count", 1.5, "integer"),
        ("token_count", True, "integer"),
        ("finish_reason", {"type": "stop"}, "string"),
        ("reasoning", b"raw bytes", "string"),
        ("tool_call_id", 7, "string"),
        ("api_content", ["x"], "string"),
        ("content", b"raw bytes", "decode bytes"),
        ("content", {"a", "b"}, "list instead of a set"),
        ("content", _circular(), "does not contain itself"),
        ("content", [math.nan], "NaN"),
        ("tool_calls", [{"arguments": math.inf}], "NaN"),
        ("reasoning_details", {"x": object()}, "cannot be stored as JSON"),
        ("metadata", {"when": b"\x00"}, "decode bytes"),
        ("uid", 42, "uid"),
        ("uid", "bad\ud83d", "surrogate"),
        ("timestamp", 1772713800000, "milliseconds: divide by 1000"),
        ("timestamp", 1772713800000000, "microseconds"),
        ("timestamp", 1e400, "not plausible"),
        ("timestamp", math.nan, "NaN"),
        ("timestamp", -1.0, "not plausible"),
        ("timestamp", True, "number of seconds"),
        ("timestamp", "2026-01-01", "number of seconds"),
        ("timestamp", 10**400, "not plausible"),
    ],
)
def test_a_value_that_cannot_be_stored_is_refused_naming_the_field_and_the_fix(
    field: str, value: Any, words: str
) -> None:
    message = {"role": "assistant", "content": "x", field: value}
    with pytest.raises(IntegrityViolation) as info:
        message_to_row("s", message)
    text = str(info.value)
    assert field.split("_")[0] in text
    assert words in text
    assert ";" in text  # cause; fix


def test_a_non_string_message_key_is_refused() -> None:
    with pytest.raises(IntegrityViolation, match="keys must be strings"):
        message_to_row("s", {"role": "user", "content": "x", 1: "y"})  # type: ignore[dict-item]


def test_integers_of_any_size_inside_json_values_are_kept() -> None:
    row = message_to_row("s", {"role": "user", "content": "x", "meta": {"n": 2**200}})
    assert loads(row["extra"]) == {"meta": {"n": 2**200}}


@pytest.mark.parametrize("value", [0, 0.0, 1_772_713_800, 1_772_713_800.25, MAX_TIMESTAMP - 1])
def test_plausible_epoch_seconds_are_accepted(value: float) -> None:
    assert check_timestamp(value) == float(value)


@pytest.mark.parametrize("value", [MAX_TIMESTAMP, -0.001, math.inf, -math.inf])
def test_times_outside_the_documented_range_are_refused(value: float) -> None:
    with pytest.raises(IntegrityViolation, match="epoch seconds"):
        check_timestamp(value)


def test_other_real_number_types_are_accepted_as_times() -> None:
    from fractions import Fraction

    row = message_to_row("s", {"role": "user", "content": "x", "timestamp": Fraction(3, 2)})
    assert row["timestamp"] == 1.5 and type(row["timestamp"]) is float
