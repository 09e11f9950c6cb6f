"""HermesConversationStore behaves exactly like pydantic-ai's InMemoryConversationStore.

The same scripted agent runs (TestModel, a tool, Chinese, Japanese and emoji text) go
through both stores; every observable result is compared (ids and revisions by
structure, everything else exactly). The store is then closed and reopened, and each
conversation loads byte for byte as the runs left it.
"""

from __future__ import annotations

from pathlib import Path

from pydantic_ai.conversation_store import InMemoryConversationStore
from pydantic_ai.messages import ModelMessagesTypeAdapter

from hermes_repo import StateStore
from hermes_repo.integrations.pydantic_ai import HermesConversationStore
from tests.integrations.pydantic_ai_scenario import normalized, scenario


async def test_every_observable_result_matches_the_in_memory_store_and_survives_a_reopen(
    backend: str, store: StateStore, home: Path
) -> None:
    expected, _ = await scenario(InMemoryConversationStore())
    actual, final = await scenario(HermesConversationStore(store))

    assert [name for name, _ in actual] == [name for name, _ in expected]
    for (name, got), (_, want) in zip(normalized(actual), normalized(expected), strict=True):
        assert got == want, name
    # The script saw conflicts, scope refusals and errors, not only successes.
    errors = {
        value["error"] for _, value in expected if isinstance(value, dict) and "error" in value
    }
    assert errors == {"ConversationConflict", "UserError"}

    store.close()
    with StateStore.open(home) as reopened:
        conversations = HermesConversationStore(reopened)
        for cid, dumped in final.items():
            loaded = await conversations.load(cid)
            assert loaded is not None, cid
            assert ModelMessagesTypeAdapter.dump_json(loaded.messages) == dumped, cid
    assert set(final) == {"c1", "c1-fork", "c1-fork-2", "c1-fork-fork", "paused", "paused-fork"}
