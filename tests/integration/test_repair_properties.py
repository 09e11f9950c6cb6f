"""Properties of durable repair over generated transcripts stored in a real store.

One store per module; every example gets a fresh session, so the examples stay cheap
and still run against real files, the real codec and the real triggers.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_repo import StateStore
from hermes_repo.transcript.reconcile import plan_repair
from hermes_repo.transcript.repair import content_kind, repair_transcript, violations

Msg = dict[str, Any]
ID_POOL = ["a", "b", "c"]

# Any text SQLite stores as TEXT: no NUL, no lone surrogates; CJK and emoji included.
text_st = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    max_size=6,
)
part_st = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text_st),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, st.sampled_from("xyz")),
)
content_st = st.one_of(
    st.none(),
    text_st,
    st.lists(part_st, max_size=3),
    st.builds(lambda t: {"type": "input_text", "text": t}, text_st),  # a dict: never merged
)
name_st = st.sampled_from([None, None, "alice", "bob"])


def call(cid: str) -> Msg:
    return {"id": cid, "type": "function", "function": {"name": "f", "arguments": "{}"}}


@st.composite
def message_st(draw: st.DrawFn) -> Msg:
    role = draw(
        st.sampled_from(["user", "user", "assistant", "assistant", "tool", "tool", "system"])
    )
    row: Msg = {"role": role, "content": draw(content_st)}
    if role == "assistant" and draw(st.booleans()):
        row["tool_calls"] = [call(i) for i in draw(st.lists(st.sampled_from(ID_POOL), max_size=3))]
    if role == "assistant":
        for key in ("reasoning", "reasoning_details"):
            if draw(st.booleans()):
                value = draw(st.one_of(st.just(""), text_st))
                row[key] = value if key == "reasoning" else [{"type": "summary", "text": value}]
    if role == "tool":
        row["tool_call_id"] = draw(st.one_of(st.none(), st.sampled_from([*ID_POOL, "zz"])))
    if draw(st.booleans()):
        row["api_content"] = draw(text_st)
    if role in ("user", "assistant") and (name := draw(name_st)) is not None:
        row["name"] = name
    if draw(st.integers(0, 5)) == 0:
        row["display_only"] = True
    return row


@st.composite
def tool_block_st(draw: st.DrawFn) -> list[Msg]:
    """An assistant turn with calls and results drawn from its ids, repeats included."""
    ids = draw(st.lists(st.sampled_from(ID_POOL), min_size=1, max_size=3))
    answers = draw(st.lists(st.sampled_from(ids), max_size=4))
    head: Msg = {
        "role": "assistant",
        "content": draw(content_st),
        "tool_calls": [call(i) for i in ids],
    }
    return [head, *({"role": "tool", "content": "ok", "tool_call_id": i} for i in answers)]


@st.composite
def transcript_st(draw: st.DrawFn, max_turns: int = 12) -> list[Msg]:
    rows: list[Msg] = []
    for _ in range(draw(st.integers(0, max_turns))):
        if draw(st.integers(0, 3)) == 0:
            rows.extend(draw(tool_block_st()))
        else:
            rows.append(draw(message_st()))
    return rows


def texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content] if content else []
    if isinstance(content, list):
        return [p["text"] for p in content if p.get("type") == "text" and p.get("text")]
    return []


def without_nones(messages: list[Msg]) -> list[Msg]:
    """Messages as a store returns them: a key holding None is simply absent."""
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


# -- the per-group planner is the whole repair -----------------------------------------


@settings(max_examples=400, deadline=None)
@given(transcript_st(max_turns=20))
def test_plan_repair_equals_the_whole_transcript_repair(msgs: list[Msg]) -> None:
    assert plan_repair(msgs) == repair_transcript(msgs).plan


# -- durable repair on a real store ----------------------------------------------------


@pytest.fixture(scope="module")
def prop_home(tmp_path_factory: pytest.TempPathFactory, template_home: Path) -> Path:
    home = tmp_path_factory.mktemp("repair-props")
    shutil.copyfile(template_home / "state.db", home / "state.db")
    return home


@pytest.fixture(scope="module")
def prop_store(prop_home: Path) -> Iterator[StateStore]:
    with StateStore.open(prop_home) as store:
        yield store


store_settings = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@store_settings
@given(transcript_st())
def test_durable_repair_converges_and_loses_nothing(
    prop_home: Path, prop_store: StateStore, msgs: list[Msg]
) -> None:
    store = prop_store
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id=f"p_{uuid.uuid4().hex[:12]}")
        uow.messages.append_many(sid, msgs)
        uow.commit()
    stored = store.load_conversation(sid, with_ids=True).messages
    expected = repair_transcript(stored)

    out = store.load_conversation(sid, repair=True, with_ids=True)
    assert out.repairs == expected.plan.repairs
    assert without_nones(out.messages) == without_nones(expected.messages)
    assert violations(out.messages) == []
    # Every user text of the input is still in some user turn of the replay.
    out_texts = [t for m in out.messages if m["role"] == "user" for t in texts(m.get("content"))]
    for m in msgs:
        if m["role"] == "user":
            for t in texts(m.get("content")):
                assert any(t in o for o in out_texts)

    with StateStore.open(prop_home) as fresh:
        again = fresh.load_conversation(sid, repair=True, with_ids=True)
        plain = fresh.load_conversation(sid, with_ids=True)
        audit = fresh.load_conversation(sid, include_inactive=True, with_ids=True).messages
        with fresh.unit_of_work() as uow:
            info = uow.sessions.require(sid)
            counters = (info.message_count, info.tool_call_count)
    assert again.repairs == 0
    assert json.dumps(again.messages) == json.dumps(out.messages)
    assert json.dumps(plain.messages) == json.dumps(out.messages)
    # Rows are archived, never deleted: active + archived == the rows stored, followed
    # by one archived copy of each rewritten survivor's row as it was.
    assert [m["id"] for m in audit[: len(stored)]] == [m["id"] for m in stored]
    originals = audit[len(stored) :]
    archived = [m for m in audit[: len(stored)] if m.get("active") is False]
    assert len(archived) == out.repairs
    assert len(plain.messages) + len(archived) == len(stored)
    assert len(originals) == len({u.index for u in expected.plan.updates})
    # Every pre-repair value is recoverable, exactly: a row is either unchanged (active
    # or archived), or a survivor whose row as it was is an archived copy.
    strip = ("id", "uid", "active", "archived_at", "archive_reason")
    by_id = {m["id"]: m for m in audit}
    copies = {m["archive_reason"]: m for m in originals}
    for before in stored:
        now = by_id[before["id"]]
        if {k: v for k, v in now.items() if k not in strip[2:]} == before:
            continue
        was = copies[f"repair_original of #{before['id']}"]
        assert was["active"] is False and was["uid"] != before["uid"]
        assert {k: v for k, v in was.items() if k not in strip} == {
            k: v for k, v in before.items() if k not in strip
        }
    # A kept message keeps its content shape (a turn without content may take what
    # merged into it) and its speaker.
    stored_by_id = {b["id"]: b for b in stored}
    for m in plain.messages:
        before = stored_by_id[m["id"]]
        kind = content_kind(before.get("content"))
        assert content_kind(m.get("content")) in (
            (kind,) if kind != "none" else ("none", "text", "parts")
        )
        assert m.get("name") == before.get("name")
    assert counters == (
        len(plain.messages),
        sum(len(m.get("tool_calls") or []) for m in plain.messages),
    )
