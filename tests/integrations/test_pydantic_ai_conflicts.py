"""Two writers on one revision: exactly one save wins, the other gets
ConversationConflict and leaves nothing behind, on SQLite and on PostgreSQL (READ
COMMITTED, where only the row lock stops a lost update)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import psycopg
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationConflict
from sqlalchemy.engine import make_url

from hermes_repo import StateStore
from hermes_repo.integrations._pydantic_ai_rows import RECORD_KEY
from hermes_repo.integrations.pydantic_ai import HermesConversationStore
from tests.integrations.pydantic_ai_scenario import PROMPTS, agent


def _save_in_thread(
    conversations: HermesConversationStore, result: Any, outcome: list[Any]
) -> None:
    try:
        outcome.append(asyncio.run(conversations.save(result)))
    except Exception as exc:  # the outcome is what the test inspects
        outcome.append(exc)


def _race(
    barrier: threading.Barrier,
    conversations: HermesConversationStore,
    result: Any,
    outcome: list[Any],
) -> None:
    barrier.wait()  # both start their save together
    _save_in_thread(conversations, result, outcome)


def _save_both_at_once(conversations: HermesConversationStore, results: list[Any]) -> list[Any]:
    """Save each result in its own thread, started together: what each save returned or raised."""
    outcomes: list[list[Any]] = [[] for _ in results]
    barrier = threading.Barrier(len(results))
    threads = [
        threading.Thread(target=_race, args=(barrier, conversations, result, outcome))
        for result, outcome in zip(results, outcomes, strict=True)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [outcome[0] for outcome in outcomes]


async def test_racing_saves_of_one_revision_one_wins_the_other_conflicts_and_writes_nothing(
    backend: str, store: StateStore
) -> None:
    conversations = HermesConversationStore(store)
    await conversations.save(
        await agent.run(PROMPTS["first"], conversation=Conversation(conversation_id="race"))
    )
    for _ in range(8):
        results = [
            await agent.run(PROMPTS["second"], conversation=await conversations.load("race"))
            for _ in range(2)
        ]
        outcomes = _save_both_at_once(conversations, results)
        kinds = sorted(type(o).__name__ for o in outcomes)
        assert kinds == ["ConversationConflict", "list"], outcomes
        winner = next(i for i in range(2) if isinstance(outcomes[i], list))
        stored = await conversations.load("race")
        assert stored is not None
        assert stored.revision == results[winner].conversation.revision
        assert stored.messages == results[winner].all_messages()
        # The loser's entries were never written: the session holds the history only.
        assert store.get_session("race").message_count == len(stored.messages)


def _blocked_on_a_lock(url: str) -> bool:
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
    return bool(row and row[0])


async def test_a_save_that_meets_an_uncommitted_save_waits_then_conflicts(
    backend: str, store: StateStore
) -> None:
    conversations = HermesConversationStore(store)
    first = await agent.run(PROMPTS["first"], conversation=Conversation(conversation_id="held"))
    await conversations.save(first)
    late = await agent.run(PROMPTS["second"], conversation=await conversations.load("held"))
    outcome: list[Any] = []
    writer = threading.Thread(target=_save_in_thread, args=(conversations, late, outcome))
    with store.unit_of_work() as uow:
        # Another writer's save, in progress: the record moved on, not yet committed.
        state = uow.sessions.source_and_extra("held", lock=True)
        assert state is not None
        extra = state[1]
        uow.sessions.update(
            "held",
            title="held",
            extra={**extra, RECORD_KEY: {**extra[RECORD_KEY], "revision": "other"}},
        )
        writer.start()
        if backend == "postgresql":
            # The late save must be waiting on the row (not reading the old revision).
            url = os.environ["HERMES_REPO_URL"]
            while writer.is_alive() and not _blocked_on_a_lock(url):
                time.sleep(0.01)
            assert writer.is_alive(), outcome
        uow.commit()
    writer.join()
    assert len(outcome) == 1 and isinstance(outcome[0], ConversationConflict), outcome
    record = await conversations.read_record("held")
    assert record is not None and record.revision == "other"
    assert store.get_session("held").message_count == len(first.all_messages())


async def test_racing_first_saves_of_one_new_id_one_creates_the_other_conflicts(
    backend: str, store: StateStore
) -> None:
    conversations = HermesConversationStore(store)
    for round_ in range(6):
        cid = f"new-{round_}"
        results = [
            await agent.run(PROMPTS["first"], conversation=Conversation(conversation_id=cid))
            for _ in range(2)
        ]
        outcomes = _save_both_at_once(conversations, results)
        # Never the store's own duplicate-session error: the loser lost a race.
        assert sorted(type(o).__name__ for o in outcomes) == ["ConversationConflict", "list"]
        winner = next(i for i in range(2) if isinstance(outcomes[i], list))
        stored = await conversations.load(cid)
        assert stored is not None and stored.messages == results[winner].all_messages()
        assert store.get_session(cid).message_count == len(stored.messages)
