"""One store, three doors: a conversation saved through pydantic-ai is an ordinary
session for the library API and the operator CLI, and the operator tools leave it
loading exactly as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import (
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    UserPromptPart,
)

from hermes_repo import StateStore
from hermes_repo.integrations.pydantic_ai import HermesConversationStore
from tests.cli.conftest import run_cli_from_root
from tests.integrations.pydantic_ai_scenario import PROMPTS, agent


async def _save_conversations(store: StateStore) -> dict[str, bytes]:
    """A real agent run (a tool whose return is Chinese and Japanese), and a history no
    transcript rule allows (two user turns in a row, a tool call never answered): each
    conversation's messages as ``dump_json``."""
    conversations = HermesConversationStore(store)
    result = await agent.run(PROMPTS["first"], conversation=Conversation(conversation_id="doors"))
    await conversations.save(result)
    odd = Conversation(
        conversation_id="odd turns",
        messages=[
            ModelRequest(parts=[UserPromptPart(content="一つ目の質問")]),
            ModelRequest(parts=[UserPromptPart(content="第二个问题")]),
            ModelResponse(parts=[ToolCallPart(tool_name="weather", args={"city": "大阪"})]),
        ],
    )
    await conversations.save(odd)
    return {
        cid: ModelMessagesTypeAdapter.dump_json((await conversations.load(cid)).messages)  # type: ignore[union-attr]
        for cid in ("doors", "odd turns")
    }


async def _loads(store: StateStore) -> dict[str, bytes]:
    conversations = HermesConversationStore(store)
    return {
        cid: ModelMessagesTypeAdapter.dump_json((await conversations.load(cid)).messages)  # type: ignore[union-attr]
        for cid in ("doors", "odd turns")
    }


async def test_a_conversation_is_listed_searched_and_survives_doctor_and_repair(
    backend: str, store: StateStore, home: Path
) -> None:
    saved = await _save_conversations(store)
    odd_sid = next(s.id for s in store.list_sessions() if s.title == "odd turns")

    sessions = {s.title: s for s in store.list_sessions(source="pydantic-ai")}
    assert set(sessions) == {"doors", "odd turns"}
    assert sessions["doors"].id == "doors" and sessions["doors"].message_count == 4
    assert odd_sid.startswith("pai-")  # a space is not allowed in a session id
    for text in ("今日は良い天気", "天气很好", "晴れ", "🎉"):
        hits = store.search(text)
        assert "doors" in {hit.session_id for hit in hits}, text
    assert {hit.session_id for hit in store.search("第二个问题")} == {odd_sid}

    listed = run_cli_from_root("--home", home, "sessions", "list", "--json")
    assert listed.code == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert rows["doors"]["source"] == "pydantic-ai" and rows["doors"]["title"] == "doors"
    assert rows[odd_sid]["title"] == "odd turns"
    found = run_cli_from_root("--home", home, "search", "天气很好", "--json")
    assert found.code == 0 and "doors" in found.stdout, found.stdout + found.stderr

    doctor = run_cli_from_root("--home", home, "doctor", "--json")
    assert doctor.code == 0, doctor.stdout + doctor.stderr
    # The rows are display-only: the repair leaves even two user turns in a row alone.
    check = run_cli_from_root("--home", home, "sessions", "repair", "--check-only", "--json")
    assert check.code == 0 and json.loads(check.stdout)["sessions_violating"] == 0, check.stdout
    assert store.load_conversation(odd_sid, repair=True).repairs == 0
    store.close()  # a repair of a SQLite file runs alone

    repaired = run_cli_from_root("--home", home, "sessions", "repair", "--json")
    assert repaired.code == 0, repaired.stdout + repaired.stderr
    assert json.loads(repaired.stdout)["repairs"] == 0
    with StateStore.open(home) as reopened:
        assert await _loads(reopened) == saved


@pytest.mark.sqlite_only
async def test_snapshot_create_and_restore_bring_the_conversation_back_byte_for_byte(
    store: StateStore, home: Path
) -> None:
    saved = await _save_conversations(store)
    made = run_cli_from_root("--home", home, "snapshot", "create", "--json")
    assert made.code == 0, made.stderr
    snapshot = json.loads(made.stdout)["id"]
    await HermesConversationStore(store).delete("doors")
    store.close()

    restored = run_cli_from_root("--home", home, "snapshot", "restore", snapshot, "--yes")
    assert restored.code == 0, restored.stdout + restored.stderr
    with StateStore.open(home) as reopened:
        assert await _loads(reopened) == saved
