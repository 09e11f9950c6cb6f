"""Transcript repair: concrete cases and properties over generated transcripts."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_repo.transcript.repair import (
    RULE_DUPLICATE_TOOL,
    RULE_MERGE_ASSISTANT,
    RULE_MERGE_USER,
    RULE_ORPHAN_TOOL,
    RULE_UNMERGEABLE_ASSISTANT,
    RULES,
    UPDATABLE_FIELDS,
    Removal,
    apply_plan,
    content_kind,
    mergeable,
    repair_transcript,
    violations,
)
from tests.support.transcripts import call

Msg = dict[str, Any]


def user(content: Any, **extra: Any) -> Msg:
    return {"role": "user", "content": content, **extra}


def assistant(content: Any = None, calls: Sequence[str] = (), **extra: Any) -> Msg:
    row: Msg = {"role": "assistant", "content": content, **extra}
    if calls:
        row["tool_calls"] = [call(c) for c in calls]
    return row


def tool(cid: str | None, content: str = "ok", **extra: Any) -> Msg:
    return {"role": "tool", "content": content, "tool_call_id": cid, **extra}


def replayed(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in rows if not r.get("display_only")]


def texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    if isinstance(content, list):
        return [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and p.get("text")
        ]
    return []


def check_repair(messages: list[Msg]) -> Any:
    """Repair and assert every invariant the plan promises; return the result."""
    before = copy.deepcopy(messages)
    result = repair_transcript(messages)
    assert messages == before, "input mutated"
    assert apply_plan(messages, result.plan) == result.messages
    again = repair_transcript(result.messages)
    assert again.plan.repairs == 0
    assert again.messages == result.messages
    assert violations(result.messages) == []
    return result


# --- concrete cases ---------------------------------------------------------------


def test_clean_transcript_is_left_untouched() -> None:
    msgs = [
        {"role": "system", "content": "be brief"},
        user("hi"),
        assistant(None, ["a"]),
        tool("a"),
        assistant("done"),
    ]
    result = check_repair(msgs)
    assert result.messages == msgs
    assert result.plan.repairs == 0
    assert not result.plan.changed
    assert violations(msgs) == []


def test_consecutive_users_merge_into_the_first_with_blank_line() -> None:
    msgs = [
        user("first", id=1, uid="u1", timestamp=1.0, api_content="stale"),
        user("second", id=2),
        user("third", id=3),
    ]
    result = check_repair(msgs)
    assert result.messages == [
        {"role": "user", "content": "first\n\nsecond\n\nthird", "id": 1, "uid": "u1",
         "timestamp": 1.0, "api_content": None},
    ]  # fmt: skip
    assert result.plan.removals == (
        Removal(1, RULE_MERGE_USER, 0),
        Removal(2, RULE_MERGE_USER, 0),
    )
    assert result.plan.updates[0].index == 0
    assert result.plan.updates[0].fields == {
        "content": "first\n\nsecond\n\nthird",
        "api_content": None,
    }
    assert violations(msgs) == [(1, RULE_MERGE_USER), (2, RULE_MERGE_USER)]


def test_consecutive_assistants_unite_tool_calls_without_duplicate_ids() -> None:
    msgs = [
        user("go"),
        assistant("thinking", ["a", "b"], id=10, reasoning="", reasoning_details=None),
        assistant(None, ["b", "c"], reasoning="why", reasoning_details=[{"r": 1}]),
        assistant("", ["c"], reasoning="later", reasoning_details=[{"r": 2}]),
        tool("a"),
        tool("b"),
        tool("c"),
    ]
    result = check_repair(msgs)
    merged = result.messages[1]
    assert merged["id"] == 10
    assert [c["id"] for c in merged["tool_calls"]] == ["a", "b", "c"]
    assert merged["content"] == "thinking"  # empty parts add no stray newline
    assert merged["reasoning"] == "why"
    assert merged["reasoning_details"] == [{"r": 1}]
    assert [r.rule for r in result.plan.removals] == [RULE_MERGE_ASSISTANT] * 2
    assert all(r.survivor_index == 1 for r in result.plan.removals)
    assert [m["role"] for m in result.messages] == ["user", "assistant", "tool", "tool", "tool"]


def test_assistant_texts_join_with_single_newline() -> None:
    result = check_repair([user("q"), assistant("one"), assistant(None), assistant("two")])
    assert result.messages[1]["content"] == "one\ntwo"


def test_tool_calls_that_dedupe_to_nothing_are_cleared() -> None:
    msgs = [user("q"), {"role": "assistant", "content": "a", "tool_calls": []}, assistant("b")]
    result = check_repair(msgs)
    assert result.messages[1]["tool_calls"] is None
    assert result.plan.updates[0].fields["tool_calls"] is None


def test_duplicate_tool_response_is_dropped() -> None:
    msgs = [user("q"), assistant(None, ["a"]), tool("a", "first"), tool("a", "retry")]
    result = check_repair(msgs)
    assert result.plan.removals == (Removal(3, RULE_DUPLICATE_TOOL, None),)
    assert result.messages[-1]["content"] == "first"
    assert violations(msgs) == [(3, RULE_DUPLICATE_TOOL)]


def test_orphan_tool_responses_are_dropped() -> None:
    msgs = [
        tool("a"),  # no preceding assistant
        user("q"),
        assistant(None, ["a"]),
        tool("zzz"),  # unknown id
        tool(None),  # no id at all
        tool("a"),
        user("next"),
        tool("a"),  # a user in between
    ]
    result = check_repair(msgs)
    assert [(r.index, r.rule) for r in result.plan.removals] == [
        (0, RULE_ORPHAN_TOOL),
        (3, RULE_ORPHAN_TOOL),
        (4, RULE_ORPHAN_TOOL),
        (7, RULE_ORPHAN_TOOL),
    ]
    assert all(r.survivor_index is None for r in result.plan.removals)


def test_dropping_an_orphan_lets_the_turns_around_it_merge() -> None:
    msgs = [user("one"), tool("x"), user("two")]
    result = check_repair(msgs)
    assert result.messages == [{"role": "user", "content": "one\n\ntwo"}]
    assert [r.rule for r in result.plan.removals] == [RULE_ORPHAN_TOOL, RULE_MERGE_USER]


def test_results_after_a_cascaded_merge_answer_the_merged_calls() -> None:
    # Once the orphan between them goes, the two assistants are one turn, so the result
    # for "a" (issued by the first) is still a valid answer and is kept.
    msgs = [user("q"), assistant(None, ["a"]), tool("x"), assistant(None, ["b"]), tool("a"),
            tool("b")]  # fmt: skip
    result = check_repair(msgs)
    assert [(r.index, r.rule) for r in result.plan.removals] == [
        (2, RULE_ORPHAN_TOOL),
        (3, RULE_MERGE_ASSISTANT),
    ]
    assert [m.get("tool_call_id") for m in result.messages] == [None, None, "a", "b"]


def test_stale_api_content_is_cleared_on_merge_and_kept_otherwise() -> None:
    msgs = [
        user("q", api_content="q-exact"),
        assistant("one", api_content="sent-one"),
        assistant("two", api_content="sent-two"),
        user("untouched", api_content="kept"),
    ]
    result = check_repair(msgs)
    assert result.messages[0]["api_content"] == "q-exact"
    assert result.messages[1]["api_content"] is None
    assert result.messages[2]["api_content"] == "kept"
    assert [u.index for u in result.plan.updates] == [1]


def test_display_only_row_between_users_does_not_separate_them() -> None:
    banner = {"role": "assistant", "content": "[compressed]", "display_only": True}
    msgs = [user("a"), banner, user("b")]
    result = check_repair(msgs)
    assert result.messages == [user("a\n\nb"), banner]
    assert result.plan.removals == (Removal(2, RULE_MERGE_USER, 0),)


def test_display_only_rows_are_never_changed_or_paired() -> None:
    msgs = [
        user("a", display_only=True),
        user("b", display_only=True),
        assistant(None, ["a"]),
        tool("a", display_only=True),
        tool("a"),
    ]
    result = check_repair(msgs)
    assert result.messages == msgs


def test_system_row_separates_turns() -> None:
    msgs = [user("a"), {"role": "system", "content": "note"}, user("b")]
    assert check_repair(msgs).plan.repairs == 0


def test_part_lists_merge_by_concatenation_keeping_every_part() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    msgs = [user([{"type": "text", "text": "and this"}, image]), user([image]), user(None)]
    result = check_repair(msgs)
    assert result.messages == [user([{"type": "text", "text": "and this"}, image, image])]


def test_text_and_parts_are_never_merged_into_one_shape() -> None:
    image = {"type": "image_url", "image_url": {"url": "u"}}
    msgs = [user("look at this"), user([image]), user(""), assistant("a")]
    result = check_repair(msgs)
    # Turning the text into a part (or the parts into text) would change a shape: both
    # turns stay, as they were.
    assert result.plan.repairs == 0 and result.messages == msgs


def test_dict_content_is_never_merged_or_turned_into_text() -> None:
    msgs = [user({"type": "input", "text": "a"}), user("b"), user({"k": 1})]
    result = check_repair(msgs)
    assert result.plan.repairs == 0
    contents = [m["content"] for m in result.messages]
    assert contents == [{"type": "input", "text": "a"}, "b", {"k": 1}]


def test_turns_of_different_speakers_are_kept_apart() -> None:
    msgs = [
        user("hi", name="alice"),
        user("hello", name="bob"),
        user("again", name="bob"),
        user("me", name=None),
        user("and me"),
        assistant("ok"),
    ]
    result = check_repair(msgs)
    assert [(m.get("name"), m["content"]) for m in result.messages] == [
        ("alice", "hi"),
        ("bob", "hello\n\nagain"),
        (None, "me\n\nand me"),  # a name of None is no name
        (None, "ok"),
    ]
    assert [r.rule for r in result.plan.removals] == [RULE_MERGE_USER, RULE_MERGE_USER]


def test_a_gateways_per_message_id_does_not_keep_one_speakers_turns_apart() -> None:
    # Every message a chat gateway relays carries its own platform id: two user turns of
    # one person still merge (the merged row keeps its id in its archived row), while a
    # different speaker still keeps them apart.
    msgs = [
        user("are you there?", platform_message_id="1002"),
        user("the log is in deploy.log", platform_message_id="1003"),
        assistant("reading it"),
        user("hi", name="alice", platform_message_id="7"),
        user("hello", name="bob", platform_message_id="8"),
    ]
    result = check_repair(msgs)
    assert [m["content"] for m in result.messages] == [
        "are you there?\n\nthe log is in deploy.log",
        "reading it",
        "hi",
        "hello",
    ]
    assert result.messages[0]["platform_message_id"] == "1002"
    assert [r.rule for r in result.plan.removals] == [RULE_MERGE_USER]


def test_any_caller_key_is_part_of_the_speaker_with_its_type() -> None:
    msgs = [user("a", sender={"id": 1}), user("b", sender={"id": 1.0}), user("c", sender=True)]
    assert check_repair(msgs).plan.repairs == 0
    same = [user("a", sender={"id": [1]}), user("b", sender={"id": [1]})]
    assert check_repair(same).messages == [user("a\n\nb", sender={"id": [1]})]


def test_another_assistant_after_tool_calls_leaves_the_replay_whole() -> None:
    msgs = [
        user("q"),
        assistant(None, ["a"], name="planner"),
        assistant("I am the critic", ["b"], name="critic"),
        tool("a"),
        tool("b"),
    ]
    result = check_repair(msgs)
    assert [(r.index, r.rule, r.survivor_index) for r in result.plan.removals] == [
        (2, RULE_UNMERGEABLE_ASSISTANT, 1),
        (4, RULE_ORPHAN_TOOL, None),
    ]
    assert result.plan.updates == ()
    assert result.messages == [msgs[0], msgs[1], msgs[3]]


def test_assistants_of_different_speakers_without_calls_are_kept() -> None:
    msgs = [user("q"), assistant("one", name="a"), assistant("two", ["x"], name="b"), tool("x")]
    result = check_repair(msgs)
    assert result.plan.repairs == 0 and result.messages == msgs


def test_cjk_and_emoji_text_survive_merging() -> None:
    msgs = [user("你好，世界"), user("🙂👍🏽 ok"), assistant("こんにちは"), assistant("😀")]
    result = check_repair(msgs)
    assert result.messages[0]["content"] == "你好，世界\n\n🙂👍🏽 ok"
    assert result.messages[1]["content"] == "こんにちは\n😀"


def test_per_row_keys_of_the_survivor_are_kept_and_another_key_blocks_the_merge() -> None:
    msgs = [
        user("a", uid="u1", timestamp=5.0, token_count=3, extra="x"),
        user("b", uid="u2", timestamp=6.0, token_count=4, extra="x"),
    ]
    result = check_repair(msgs)
    assert result.messages == [
        {
            "role": "user",
            "content": "a\n\nb",
            "uid": "u1",
            "timestamp": 5.0,
            "token_count": 3,
            "extra": "x",
        }
    ]
    apart = [user("a", extra="x"), user("b")]
    assert check_repair(apart).messages == apart


def test_plan_values_do_not_alias_the_output() -> None:
    parts = [user([{"type": "text", "text": "a"}]), user([{"type": "text", "text": "b"}])]
    result = check_repair(parts)
    result.messages[0]["content"].append({"type": "text", "text": "mutated"})
    assert len(result.plan.updates[0].fields["content"]) == 2


# --- properties ---------------------------------------------------------------------

ID_POOL = ["a", "b", "c"]

text_st = st.text(max_size=6)
part_st = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text_st),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, st.sampled_from("xyz")),
)
content_st = st.one_of(
    st.none(),
    text_st,
    st.lists(part_st, max_size=3),
    st.builds(lambda t: {"type": "text", "text": t}, text_st),  # a dict: never merged
)
name_st = st.sampled_from([None, None, "alice", "bob"])
optional_st = st.one_of(st.none(), st.just(""), text_st)


@st.composite
def message_st(draw: st.DrawFn) -> Msg:
    role = draw(
        st.sampled_from(["user", "user", "assistant", "assistant", "tool", "tool", "system"])
    )
    row: Msg = {"role": role, "content": draw(content_st)}
    if role == "assistant" and draw(st.booleans()):
        ids = draw(st.lists(st.sampled_from(ID_POOL), max_size=3))
        row["tool_calls"] = [call(i) for i in ids]
    if role == "assistant":
        for key in ("reasoning", "reasoning_details"):
            if draw(st.booleans()):
                row[key] = draw(optional_st)
    if role == "tool":
        row["tool_call_id"] = draw(st.one_of(st.none(), st.sampled_from([*ID_POOL, "zz"])))
    if draw(st.booleans()):
        row["api_content"] = draw(optional_st)
    if role in ("user", "assistant") and (name := draw(name_st)) is not None:
        row["name"] = name
    if draw(st.integers(0, 5)) == 0:
        row["display_only"] = True
    return row


@st.composite
def tool_block_st(draw: st.DrawFn) -> list[Msg]:
    """An assistant turn with calls and results drawn from its own ids, repeats included."""
    ids = draw(st.lists(st.sampled_from(ID_POOL), min_size=1, max_size=3))
    answers = draw(st.lists(st.sampled_from(ids), max_size=4))
    return [assistant(draw(content_st), ids), *(tool(i) for i in answers)]


@st.composite
def transcript_st(draw: st.DrawFn) -> list[Msg]:
    rows: list[Msg] = []
    for _ in range(draw(st.integers(0, 10))):
        # Mostly single rows, so user runs and display rows stay as common as tool blocks.
        if draw(st.integers(0, 3)) == 0:
            rows.extend(draw(tool_block_st()))
        else:
            rows.append(draw(message_st()))
    for index, row in enumerate(rows):
        row["id"] = index + 100
        row["uid"] = f"u{index}"
    return rows


prop_settings = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


@prop_settings
@given(transcript_st())
def test_repair_is_idempotent_and_plan_reproduces_output(msgs: list[Msg]) -> None:
    result = check_repair(msgs)  # idempotence, apply_plan, no mutation, no violations
    assert result.plan.repairs == len(result.plan.removals)
    assert (violations(msgs) == []) == (result.plan.repairs == 0)


@prop_settings
@given(transcript_st())
def test_repaired_sequence_has_no_adjacent_same_role_turns_and_paired_tools(
    msgs: list[Msg],
) -> None:
    out = replayed(repair_transcript(msgs).messages)
    for prev, cur in itertools.pairwise(out):
        if prev["role"] == cur["role"] and cur["role"] in ("user", "assistant"):
            # Only turns that cannot merge without loss stay side by side, and never
            # after an assistant turn whose calls must be answered next.
            assert not mergeable(prev, cur)
            assert not (cur["role"] == "assistant" and prev.get("tool_calls"))
    # Independent pairing check: each tool row answers a still-open call of the
    # assistant turn before it.
    open_ids: set[str] | None = None
    for row in out:
        if row["role"] == "assistant":
            open_ids = {c["id"] for c in row.get("tool_calls") or []}
        elif row["role"] == "tool":
            assert open_ids is not None and row["tool_call_id"] in open_ids
            open_ids.discard(row["tool_call_id"])
        else:
            open_ids = None


@prop_settings
@given(transcript_st())
def test_every_user_text_survives(msgs: list[Msg]) -> None:
    out = repair_transcript(msgs).messages
    out_texts = [t for m in out if m["role"] == "user" for t in texts(m["content"])]
    for m in msgs:
        if m["role"] == "user":
            for t in texts(m["content"]):
                assert any(t in o for o in out_texts)


@prop_settings
@given(transcript_st())
def test_rows_are_only_removed_and_display_rows_untouched(msgs: list[Msg]) -> None:
    result = repair_transcript(msgs)
    plan = result.plan
    assert len(replayed(result.messages)) + plan.repairs == len(replayed(msgs))
    assert [m for m in result.messages if m.get("display_only")] == [
        m for m in msgs if m.get("display_only")
    ]
    removed = {r.index for r in plan.removals}
    assert len(removed) == plan.repairs
    surviving = set(range(len(msgs))) - removed
    for r in plan.removals:
        assert r.rule in RULES
        assert not msgs[r.index].get("display_only")
        if r.rule in (RULE_ORPHAN_TOOL, RULE_DUPLICATE_TOOL):
            assert msgs[r.index]["role"] == "tool" and r.survivor_index is None
        else:
            assert r.survivor_index in surviving
            assert r.survivor_index < r.index
            assert msgs[r.survivor_index]["role"] == msgs[r.index]["role"]
    for u in plan.updates:
        assert u.index in surviving and u.fields
        assert set(u.fields) <= set(UPDATABLE_FIELDS)
        for key, value in u.fields.items():
            assert msgs[u.index].get(key) != value


@prop_settings
@given(transcript_st())
def test_repair_never_invents_tool_calls_or_tool_results(msgs: list[Msg]) -> None:
    out = repair_transcript(msgs).messages
    in_calls = [c for m in msgs for c in m.get("tool_calls") or []]
    for m in out:
        for c in m.get("tool_calls") or []:
            assert c in in_calls
        if m["role"] == "tool":
            assert m in msgs
    # Surviving rows keep their identity fields.
    assert {m["uid"] for m in out} <= {m["uid"] for m in msgs}
    for m in out:
        original = next(o for o in msgs if o["uid"] == m["uid"])
        assert {k: v for k, v in m.items() if k not in UPDATABLE_FIELDS} == {
            k: v for k, v in original.items() if k not in UPDATABLE_FIELDS
        }


@prop_settings
@given(transcript_st())
def test_a_kept_message_keeps_its_content_shape_and_its_speaker(msgs: list[Msg]) -> None:
    result = repair_transcript(msgs)
    by_uid = {m["uid"]: m for m in msgs}
    for m in result.messages:
        before = by_uid[m["uid"]]
        kind = content_kind(before.get("content"))
        if kind == "none":
            # A turn without content may only take the content merged into it.
            assert content_kind(m.get("content")) in ("none", "text", "parts")
        else:
            assert content_kind(m.get("content")) == kind
        assert m.get("name") == before.get("name")
    removed = {r.index: r for r in result.plan.removals}
    for index, r in removed.items():
        if r.rule in (RULE_MERGE_USER, RULE_MERGE_ASSISTANT):
            survivor, merged = msgs[r.survivor_index], msgs[index]
            # Merged only into the same speaker, and the content never became repr text.
            assert survivor.get("name") == merged.get("name")
            assert content_kind(merged.get("content")) in ("none", "text", "parts")
            if isinstance(merged.get("content"), str) and merged["content"]:
                final = result.messages[[m["uid"] for m in result.messages].index(survivor["uid"])][
                    "content"
                ]
                assert isinstance(final, str) and merged["content"] in final
