"""The framework doors at every call: whose session it is is checked in the transaction
that does the work (not once when the door was built), the items a door spooled are
seen by every door object of the session in the process, a call is checked whole
before any of it is written, and a closed store or an id no store can keep is refused
the same way on both backends.

The lock and spool tests run on SQLite (a write lock held by another process is the
fault); run them under ``HERMES_REPO_DRIVER=stdlib`` too.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord
from pydantic_ai.messages import ModelRequest, UserPromptPart

from hermes_repo import IntegrityViolation, SessionTakenError, StateStore, StoreClosedError
from hermes_repo.integrations import openai_agents
from hermes_repo.integrations.openai_agents import SOURCE, HermesSession
from hermes_repo.integrations.pydantic_ai import HermesConversationStore
from tests.support.locking import write_lock_held_by_another_process

ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "first"},
    {"role": "assistant", "content": "second"},
    {"role": "user", "content": "third"},
    {"type": "function_call_output", "call_id": "c1", "output": "fourth"},
]


def _rows(store: StateStore, sid: str) -> list[tuple[str, Any, bool]]:
    rows = store.load_conversation(sid, include_inactive=True).messages
    return [(m["role"], m.get("content"), m.get("active", True)) for m in rows]


def _entry(entry_id: str, text: str, parent: str | None = None) -> ConversationEntry:
    return ConversationEntry(
        id=entry_id,
        parent_id=parent,
        message=ModelRequest(parts=[UserPromptPart(content=text)]),
        kind="message",
    )


def _record(conversation_id: str, head: str) -> ConversationRecord:
    return ConversationRecord(conversation_id=conversation_id, head_id=head, revision="r1")


async def _save(
    conversations: HermesConversationStore, cid: str, entries: list[ConversationEntry]
) -> None:
    await conversations.write_record(
        _record(cid, entries[-1].id), new_entries=entries, expected_revision=None
    )


# -- ownership at every call ------------------------------------------------------------


async def test_a_spooled_first_turn_never_lands_in_a_conversation_made_meanwhile(
    home: Path, tmp_path: Path
) -> None:
    # The SDK's first turn is spooled (the database is locked); before it is replayed a
    # pydantic-ai conversation takes the same id. The SDK door refuses, every call, and
    # its items stay in the spool: never in the conversation's session.
    with StateStore.open(home) as store:
        session = HermesSession("shared-id", store, write_budget_s=0.3)
        with write_lock_held_by_another_process(home / "state.db", tmp_path):
            await session.add_items(ITEMS[:2])
        assert session._pending is not None and session._pending.exists()
        await _save(HermesConversationStore(store), "shared-id", [_entry("e1", "theirs")])
        for call in (
            session.get_items(),
            session.add_items([ITEMS[2]]),
            session.pop_item(),
            session.clear_session(),
        ):
            with pytest.raises(SessionTakenError, match="'pydantic-ai'"):
                await call
        assert session._pending.exists()  # kept, not replayed, not dropped
        assert _rows(store, "shared-id") == [("user", "theirs", True)]
        assert store.get_session("shared-id").source == "pydantic-ai"


async def test_a_door_built_before_the_session_was_taken_reads_pops_and_clears_nothing(
    home: Path,
) -> None:
    # Built and used before the session existed; an agent then makes it: whatever the
    # door learnt by its first call must not let the later ones through.
    with StateStore.open(home) as store:
        early = HermesSession("reused", store)
        assert await early.get_items() == []
        with store.unit_of_work() as uow:
            uow.sessions.create("cli", id="reused")
            uow.messages.append("reused", {"role": "user", "content": "agent's"})
            uow.messages.append("reused", {"role": "assistant", "content": "agent's too"})
            uow.commit()
        with pytest.raises(SessionTakenError):
            await early.pop_item()
        with pytest.raises(SessionTakenError):
            await early.clear_session()
        with pytest.raises(SessionTakenError):
            await early.add_items([ITEMS[0]])
        assert [active for *_, active in _rows(store, "reused")] == [True, True]
        assert store.get_session("reused").message_count == 2


# -- the spooled tail, shared by every object of the session ---------------------------


async def test_items_spooled_are_seen_from_another_store_object_and_land_once(
    home: Path, tmp_path: Path
) -> None:
    first_store = StateStore.open(home)
    first = HermesSession("tail", first_store, write_budget_s=0.3)
    await first.add_items([ITEMS[0]])
    with write_lock_held_by_another_process(home / "state.db", tmp_path):
        await first.add_items(ITEMS[1:3])  # spooled
        first.close()
        first_store.close()  # the object that spooled them is gone
        # Another StateStore object of the same file (its open cannot replay: locked).
        with StateStore.open(home, replay=False) as second_store:
            second = HermesSession("tail", second_store, write_budget_s=0.3)
            assert await second.get_items() == ITEMS[:3]
            assert await second.get_items(limit=1) == [ITEMS[2]]
            second.close()
    with StateStore.open(home, replay=False) as third_store:
        third = HermesSession("tail", third_store)
        await third.add_items([ITEMS[3]])  # replays the spool first, then these
        assert await third.get_items() == ITEMS
        assert len(_rows(third_store, "tail")) == 4  # each once
        assert not third._pending.exists()  # type: ignore[union-attr]
        third.close()
    assert not [k for k in openai_agents._tails if k[-1] == "tail"]


@pytest.mark.usefixtures("backend")
async def test_two_store_objects_of_one_store_share_the_sessions_tail(store: StateStore) -> None:
    with StateStore.open(store.home) as other:
        one, two = HermesSession("same", store), HermesSession("same", other)
        await one.get_items()
        await two.get_items()
        assert one._tail is two._tail
        one.close()
        two.close()


# -- whole calls ------------------------------------------------------------------------


async def test_a_refused_item_leaves_nothing_of_the_call_even_while_spooling(
    home: Path, tmp_path: Path
) -> None:
    with StateStore.open(home) as store:
        session = HermesSession("whole", store, write_budget_s=0.3)
        deep: Any = "leaf"
        for _ in range(5000):
            deep = {"k": deep}
        with write_lock_held_by_another_process(home / "state.db", tmp_path):
            for bad in (float("nan"), deep, b"bytes"):
                with pytest.raises(IntegrityViolation, match=r"item 2 .*nothing of this call"):
                    await session.add_items([ITEMS[0], ITEMS[1], {"role": "user", "content": bad}])
            assert await session.get_items() == []
            assert not session._pending.exists()  # type: ignore[union-attr]
        assert _rows(store, "whole") == []


@pytest.mark.usefixtures("backend")
async def test_a_pydantic_ai_save_with_one_bad_entry_writes_none_of_it(
    store: StateStore,
) -> None:
    conversations = HermesConversationStore(store)
    entries = [_entry("ok-1", "one"), _entry("ok-2", "two", "ok-1"), _entry("bad\x00id", "x")]
    with pytest.raises(IntegrityViolation, match=r"entry 2 .*U\+0000.*nothing of this save"):
        await _save(conversations, "whole-save", entries)
    assert await conversations.read_record("whole-save") is None
    with pytest.raises(KeyError):
        await conversations.read_entry("ok-1")
    with pytest.raises(KeyError):
        await conversations.read_entry("bad\x00id")
    assert store.list_sessions() == []


# -- a closed store, odd ids, the event loop ------------------------------------------


@pytest.mark.usefixtures("backend")
async def test_a_closed_store_gives_store_closed_from_every_call_and_spools_nothing(
    store: StateStore,
) -> None:
    used = HermesSession("closed-store", store)
    await used.add_items([ITEMS[0]])
    fresh = HermesSession("closed-store-2", store)  # never called before the close
    store.close()
    for session in (used, fresh):
        for call in (
            session.add_items([ITEMS[1]]),
            session.get_items(),
            session.pop_item(),
            session.clear_session(),
        ):
            with pytest.raises(StoreClosedError, match="store is closed"):
                await call
    assert not list((store.home / "sessions").glob("*.pending.jsonl"))
    conversations = HermesConversationStore(store)
    for pai_call in (
        conversations.read_record("c"),
        conversations.read_records(),
        conversations.read_entry("e"),
        conversations.read_history("e"),
        conversations.delete_record("c", expected_revision="r1"),
        _save(conversations, "c", [_entry("e", "hi")]),
    ):
        with pytest.raises(StoreClosedError, match="store is closed"):
            await pai_call


@pytest.mark.usefixtures("backend")
async def test_an_id_holding_nul_is_refused_alike_by_both_doors_on_every_backend(
    store: StateStore,
) -> None:
    with pytest.raises(IntegrityViolation, match=r"U\+0000"):
        HermesSession("chat\x00one", store)
    conversations = HermesConversationStore(store)
    with pytest.raises(IntegrityViolation, match=r"U\+0000"):
        await _save(conversations, "conv\x00one", [_entry("e-nul", "hi")])
    with pytest.raises(IntegrityViolation, match=r"U\+0000"):
        await conversations.read_record("conv\x00one")
    assert store.list_sessions() == []


async def test_building_a_session_opens_nothing_the_first_call_opens_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened_on: list[int] = []
    real_open = StateStore.open

    def recording_open(*args: Any, **kwargs: Any) -> StateStore:
        opened_on.append(threading.get_ident())
        return real_open(*args, **kwargs)

    monkeypatch.setattr(openai_agents.StateStore, "open", recording_open)
    home = tmp_path / "lazy"
    session = HermesSession("lazy", home=home)
    assert not (home / "state.db").exists() and opened_on == []  # no I/O when built
    assert "home=" in repr(session)
    await session.add_items([ITEMS[0]])
    assert opened_on and opened_on[0] != threading.get_ident()  # not the loop's thread
    assert await session.get_items() == [ITEMS[0]]
    assert session.store.get_session("lazy").source == SOURCE
    assert len(opened_on) == 1  # opened once
    session.close()
