"""Poison values on real stores: odd text is stored exactly, unstorable values are refused
before anything is written, and one refused message or record never blocks the others."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_repo import StateStore, TranscriptWriter
from hermes_repo.codec.rows import _RESERVED as RESERVED
from hermes_repo.errors import IntegrityViolation
from hermes_repo.transcript import spool
from tests.support.spooling import check_store, pending_files, stored, write_spool

Msg = dict[str, Any]
ANY_TEXT = st.text(st.characters() | st.characters(categories=["Cs"]), max_size=20)
TEXT = (
    st.lists(st.sampled_from(["\ud83d", "\ude00", "\udc80", "\ufdd0", "ok", " "]) | ANY_TEXT)
    .map("".join)
    .filter(lambda s: s != "" and s not in RESERVED)
)
_ids = itertools.count()


def lone(text: str) -> bool:
    return any("\ud800" <= c <= "\udfff" for c in text)


def message_with(text: str) -> Msg:
    """A message carrying ``text`` in every place a caller can put text."""
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": text}}
        ],
        "finish_reason": text,
        "reasoning": text,
        "reasoning_details": [{"type": "summary", "text": text}],
        "api_content": text,
        text: {"nested " + text: [text]},
    }


def without_generated(message: Msg) -> Msg:
    return {k: v for k, v in message.items() if k not in ("uid", "timestamp")}


settings_fixture = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@settings_fixture
@given(text=TEXT)
def test_any_text_in_any_message_field_round_trips_exactly(store: StateStore, text: str) -> None:
    sid = f"p{next(_ids)}"
    with store.unit_of_work() as uow:
        uow.sessions.create(id=sid)
        uow.messages.append(sid, message_with(text))
        uow.commit()
    store.append_message(sid, message_with(text))
    store.append_message(sid, {"role": "user", "content": [{"type": "text", "text": text}]})
    messages = store.load_conversation(sid).messages
    assert [without_generated(m) for m in messages] == [
        message_with(text),
        message_with(text),
        {"role": "user", "content": [{"type": "text", "text": text}]},
    ]


@settings_fixture
@given(title=TEXT, source=TEXT, user=TEXT, model=TEXT, reason=TEXT)
def test_any_text_in_session_fields_round_trips_exactly(
    store: StateStore, title: str, source: str, user: str, model: str, reason: str
) -> None:
    sid = f"s{next(_ids)}"
    with store.unit_of_work() as uow:
        uow.sessions.create(source, id=sid, user_id=user, model=model, title=title)
        uow.sessions.end(sid, reason, at=1_772_713_800.5)
        uow.commit()
    with store.unit_of_work() as uow:
        row = uow.sessions.require(sid)
        got = (row.source, row.user_id, row.model, row.title, row.end_reason)
        listed = {r.id: r for r in uow.sessions.list(limit=10_000)}[sid]
        assert sid in {r.id for r in uow.sessions.list(limit=10_000, source=source)}
        # Read twice through one identity map: decoded once, never twice.
        again = uow.sessions.get(sid)
        assert again is not None and again.title == title
        assert listed.title == title
        uow.commit()  # nothing to flush: decoding is not a change
    assert got == (source, user, model, title, reason)
    with store.unit_of_work() as uow:
        assert uow.sessions.require(sid).title == title


def test_text_with_lone_surrogates_is_searchable_by_the_rest_of_it(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        uow.sessions.create(id="q")
        uow.commit()
    cut = "zebrafish migration \ud83d"  # a reply cut in the middle of an emoji
    fs = "listing /srv/caf\udce9/notes.txt"  # os.fsdecode of a Latin-1 file name
    ids = [store.append_message("q", {"role": "assistant", "content": c}) for c in (cut, fs)]
    assert [h.message_id for h in store.search("zebrafish")] == [ids[0]]
    assert [h.message_id for h in store.search("notes.txt")] == [ids[1]]
    # A query holding a lone surrogate neither crashes nor loses the rest of its words.
    assert [h.message_id for h in store.search("migration \ud83d")] == [ids[0]]
    assert [h.message_id for h in store.search("caf\udce9")] == [ids[1]]
    # A surrogate alone matches where the stored text held one (both are U+FFFD there).
    assert sorted(h.message_id for h in store.search("\udc80")) == ids
    assert [m["content"] for m in store.load_conversation("q").messages] == [cut, fs]
    check_store(store.home)


UNSTORABLE: list[tuple[str, Any]] = [
    ("token_count", 2**64),
    ("finish_reason", {"type": "stop"}),
    ("content", b"\x89PNG"),
    ("content", {1, 2}),
    ("tags", {"a set in an extra key"}),
    ("reasoning_details", [math.nan]),
    ("tool_calls", [{"arguments": math.inf}]),
    ("timestamp", 1_772_713_800_000),
    ("timestamp", 1e400),
    ("timestamp", True),
    ("timestamp", -5.0),
]


def counts(store: StateStore, sid: str) -> tuple[int, int]:
    with store.unit_of_work() as uow:
        row = uow.sessions.require(sid)
        return uow.messages.count(sid), row.message_count


@pytest.mark.parametrize(("field", "value"), UNSTORABLE)
def test_append_refuses_an_unstorable_value_before_writing_anything(
    store: StateStore, field: str, value: Any
) -> None:
    with store.unit_of_work() as uow:
        uow.sessions.create(id="a")
        uow.messages.append("a", {"role": "user", "content": "first"})
        uow.commit()
    message = {"role": "assistant", "content": "x", field: value}
    with pytest.raises(IntegrityViolation, match=field.split("_")[0]):
        store.append_message("a", message)
    with store.unit_of_work() as uow:
        with pytest.raises(IntegrityViolation, match=field.split("_")[0]):
            uow.messages.append("a", message)
        uow.commit()
    assert counts(store, "a") == (1, 1)


def test_a_circular_message_is_refused_naming_the_fix(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        uow.sessions.create(id="c")
        uow.commit()
    parts: list[Any] = [{"type": "text", "text": "x"}]
    parts.append(parts)
    with pytest.raises(IntegrityViolation, match="does not contain itself"):
        store.append_message("c", {"role": "user", "content": parts})
    assert counts(store, "c") == (0, 0)


def rejected_records(home: Path, sid: str) -> list[dict[str, Any]]:
    path = spool.sessions_dir(home) / spool.pending_name(sid, spool.REJECTED_SUFFIX)
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_a_refused_message_never_blocks_the_rest_of_the_flush(store: StateStore) -> None:
    writer = store.transcript_writer("w")
    big = {"role": "assistant", "content": "counted", "token_count": 2**64}
    dict_reason = {"role": "assistant", "content": "reason", "finish_reason": {"x": 1}}
    messages: list[Msg] = [
        {"role": "user", "content": "one"},
        big,
        {"role": "assistant", "content": "cut \ud83d"},
        dict_reason,
        {"role": "user", "content": "four", "timestamp": 1_772_713_800.0},
    ]
    result = writer.flush(messages)
    assert (result.written, result.spooled, result.rejected, result.unsaved) == (3, 0, 2, 0)
    assert result.rejected_uids == (big["uid"], dict_reason["uid"])
    assert [r.index for r in result.rejections] == [1, 3]
    assert "64-bit" in result.rejections[0].reason
    assert "finish_reason" in result.rejections[1].reason
    assert result.error is None and not result.ok
    loaded = store.load_conversation("w").messages
    assert [m["content"] for m in loaded] == ["one", "cut \ud83d", "four"]
    kept = rejected_records(store.home, "w")
    assert [r["message"]["uid"] for r in kept] == [big["uid"], dict_reason["uid"]]
    assert kept[0]["message"]["token_count"] == 2**64  # lossless: JSON holds big ints
    assert "64-bit" in kept[0]["_rejected"]
    # The next flush of the same list reports them again but keeps each once.
    messages.append({"role": "user", "content": "five"})
    again = writer.flush(messages)
    assert (again.written, again.rejected) == (1, 2)
    assert len(rejected_records(store.home, "w")) == 2
    check_store(store.home)


def test_values_json_cannot_say_are_kept_as_their_repr(store: StateStore) -> None:
    circular: list[Any] = []
    circular.append(circular)
    messages: list[Any] = [
        {"role": "user", "content": b"\x89PNG"},
        {"role": "user", "content": circular},
        "not a message",
        {"role": "user", "content": "fine"},
    ]
    result = store.transcript_writer("r").flush(messages)
    assert (result.written, result.rejected) == (1, 3)
    kept = rejected_records(store.home, "r")
    assert kept[0]["message"]["content"] == {"__repr__": "b'\\x89PNG'"}
    assert kept[1]["message_repr"].startswith("{'role': 'user', 'content': [[...]]")
    assert kept[2]["message"] == "not a message"
    assert all(k["_rejected"] for k in kept)


def test_without_a_store_refused_messages_are_kept_and_the_rest_spooled_exactly(
    home: Path,
) -> None:
    writer = TranscriptWriter(home, "offline")
    messages: list[Msg] = [
        {"role": "user", "content": "hi \udc80"},
        {"role": "assistant", "content": "x", "timestamp": 1_772_713_800_000},
        {"role": "assistant", "content": "bye", "reasoning": "\ud83d"},
    ]
    result = writer.flush(messages)
    assert (result.written, result.spooled, result.rejected) == (0, 2, 1)
    assert "milliseconds: divide by 1000" in result.rejections[0].reason
    with StateStore.open(home) as store:
        loaded = store.load_conversation("offline").messages
    assert [(m["content"], m.get("reasoning")) for m in loaded] == [
        ("hi \udc80", None),
        ("bye", "\ud83d"),
    ]
    assert pending_files(home) == []


def wrapped(message: Msg, at: float | None = 1_772_713_800.0) -> bytes:
    """A spool line as another producer writes it (json.dumps: \\udXXX escapes)."""
    return json.dumps({"_fallback_timestamp": at, "message": message}).encode() + b"\n"


def test_recovery_stores_surrogates_and_moves_unstorable_records_aside(home: Path) -> None:
    write_spool(
        home,
        "r1",
        [
            wrapped({"role": "user", "content": "a \ud83d", "uid": "a"}),
            wrapped({"role": "assistant", "content": "big", "uid": "b", "token_count": 2**64}),
            wrapped({"role": "assistant", "content": "ms", "uid": "c", "timestamp": 1.7e12}),
            wrapped({"role": "user", "content": "after", "uid": "d", "name": "caf\udce9"}),
        ],
    )
    write_spool(home, "r2", [wrapped({"role": "user", "content": "other file", "uid": "e"})])
    with StateStore.open(home, replay=False) as store:
        report = store.replay_pending()
        assert (report.files, report.inserted, report.kept, report.errors) == (2, 3, 2, ())
        assert [m["content"] for m in store.load_conversation("r1").messages] == [
            "a \ud83d",
            "after",
        ]
        assert store.load_conversation("r1").messages[1]["name"] == "caf\udce9"
        assert [m["content"] for m in store.load_conversation("r2").messages] == ["other file"]
    kept = rejected_records(home, "r1")
    assert [k["line"] for k in kept] == [2, 3]
    assert "64-bit" in kept[0]["_rejected"] and "milliseconds" in kept[1]["_rejected"]
    assert json.loads(kept[0]["raw"])["message"]["token_count"] == 2**64
    assert pending_files(home) == []
    check_store(home)


def test_a_record_without_uid_or_any_timestamp_is_stored_once_however_often_recovered(
    home: Path,
) -> None:
    plain = json.dumps({"role": "user", "content": "no uid, no time"}).encode() + b"\n"
    lines = [
        plain,
        plain,  # a real repeat: kept twice
        wrapped({"role": "assistant", "content": "wrapped, no time"}, at=None),
    ]
    write_spool(home, "once", lines)
    with StateStore.open(home, replay=False) as store:
        assert store.replay_pending().inserted == 3
        # A crash after the commit and before the delete: the same file again.
        write_spool(home, "once", lines)
        second = store.replay_pending()
        assert (second.inserted, second.duplicates) == (0, 3)
        contents = [m["content"] for m in store.load_conversation("once").messages]
    assert contents == ["no uid, no time", "no uid, no time", "wrapped, no time"]
    assert pending_files(home) == []
    assert len(stored(home, "once")) == 3


def test_search_filters_holding_a_lone_surrogate_find_nothing_without_crashing(
    store: StateStore,
) -> None:
    store.transcript_writer("f").flush([{"role": "user", "content": "needle"}])
    assert len(store.search("needle")) == 1
    assert store.search("needle", session_id="f\udc80") == []
    assert store.search("needle", role="user\ud83d") == []


def test_a_repair_merging_turns_with_lone_surrogates_keeps_them_and_converges(
    store: StateStore,
) -> None:
    store.transcript_writer("m").flush(
        [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "cut \ud83d"},
            # The survivor takes this reasoning: the repair writes it into its row.
            {"role": "assistant", "content": "more \ude00", "reasoning": "s \ud800"},
        ]
    )
    repaired = store.load_conversation("m", repair=True)
    assert repaired.repairs == 1
    merged = repaired.messages[1]
    assert "cut \ud83d" in merged["content"] and "more \ude00" in merged["content"]
    assert merged["reasoning"] == "s \ud800"
    again = store.load_conversation("m", repair=True)
    assert again.repairs == 0 and again.messages == repaired.messages
    check_store(store.home)
