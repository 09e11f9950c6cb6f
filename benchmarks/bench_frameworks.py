"""HermesSession vs the OpenAI Agents SDK's own SQLiteSession, interleaved.

Both sessions are file-backed (a fresh folder each) and run the same Responses items,
built from the realistic corpus (user text, output messages, function calls and their
outputs, CJK included), through the SDK's async ``Session`` protocol on one event loop;
runs alternate HermesSession, SQLiteSession, HermesSession... in one process:

* add 1: ``add_items([item])``, one call per item (the Runner's save of a turn's item);
* add 100: ``add_items(items)`` of 100 items per call;
* get 50: ``get_items(limit=50)`` on a session already holding 10,000 items.

Then pydantic-ai's conversation store: ``HermesConversationStore`` against the
framework's own ``InMemoryConversationStore`` (what pydantic-ai offers; it keeps nothing
across a restart), the same calls interleaved:

* save a turn: load a 1,000-message conversation, append a request and a response,
  ``save`` (what an app does around each run);
* load: ``load`` of that conversation;
* list: ``list_conversations(limit=10)`` among 50 conversations.

The ratio is HermesSession throughput / SQLiteSession throughput: above 1, HermesSession
is faster. What differs besides the code: SQLiteSession runs the standard ``sqlite3``
with SQLite's default ``synchronous=FULL`` in WAL mode, and stores the item's JSON
only; HermesSession runs the store's driver with ``synchronous=NORMAL`` and keeps each
item as a message row indexed for full-text search (two FTS5 indexes), with the spool
behind it.

    python benchmarks/bench_frameworks.py [--quick] [--runs N] [--json FILE]
"""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import Callable, Coroutine
from typing import Any

from _common import (
    Result,
    driver,
    interleave,
    parser,
    payload,
    print_table,
    run_main,
    workspace,
    write_json,
)
from agents import SQLiteSession
from corpus_realistic import RealisticCorpus
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationStore, InMemoryConversationStore
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart

from hermes_repo import StateStore
from hermes_repo.integrations.openai_agents import HermesSession
from hermes_repo.integrations.pydantic_ai import HermesConversationStore

NAME = "frameworks"
HISTORY = 10_000


def agent_items(n: int, seed_offset: int) -> list[dict[str, Any]]:
    """``n`` Responses items made of the realistic corpus' messages."""
    items: list[dict[str, Any]] = []
    for i, m in enumerate(RealisticCorpus().messages(n, seed_offset=seed_offset, plant=False)):
        text = m.get("content") if isinstance(m.get("content"), str) else str(m.get("content"))
        role = m["role"]
        if role == "user":
            items.append({"content": text, "role": "user"})
        elif role == "tool":
            items.append({"call_id": f"call_{i}", "output": text, "type": "function_call_output"})
        elif m.get("tool_calls"):
            call = m["tool_calls"][0]["function"]
            items.append(
                {
                    "arguments": call["arguments"],
                    "call_id": f"call_{i}",
                    "name": call["name"],
                    "type": "function_call",
                    "id": f"fc_{i}",
                    "status": "completed",
                }
            )
        else:
            items.append(
                {
                    "id": f"msg_{i}",
                    "content": [{"annotations": [], "text": text, "type": "output_text"}],
                    "role": "assistant",
                    "status": "completed",
                    "type": "message",
                }
            )
    return items[:n]


def model_messages(n: int, seed_offset: int) -> list[ModelMessage]:
    """``n`` pydantic-ai messages (requests and responses alternating) of corpus text."""
    texts = [
        m["content"] if isinstance(m.get("content"), str) else str(m.get("content"))
        for m in RealisticCorpus().messages(n, seed_offset=seed_offset, plant=False)
    ]
    return [
        ModelRequest(parts=[UserPromptPart(content=t)])
        if i % 2 == 0
        else ModelResponse(parts=[TextPart(content=t)])
        for i, t in enumerate(texts)
    ]


def conversation_results(
    run: Callable[[Callable[[], Coroutine[Any, Any, Any]]], Any],
    store: StateStore,
    runs: int,
    quick: bool,
) -> list[Result]:
    """The pydantic-ai cases: HermesConversationStore (library) vs InMemory (raw)."""
    turns = 5 if quick else 20  # saves per run
    loads = 5 if quick else 20
    lists = 20 if quick else 100
    size = 200 if quick else 1_000
    ours: ConversationStore = HermesConversationStore(store)
    theirs: ConversationStore = InMemoryConversationStore()
    history = model_messages(size, seed_offset=21)
    extra = model_messages(2 * turns * runs, seed_offset=22)

    async def seed(conversations: ConversationStore) -> None:
        await conversations.save(Conversation(conversation_id="long", messages=list(history)))
        for i in range(50):
            pair = history[2 * i : 2 * i + 2]
            await conversations.save(Conversation(conversation_id=f"c{i}", messages=list(pair)))

    run(lambda: seed(ours))
    run(lambda: seed(theirs))

    def save_turns(conversations: ConversationStore) -> Callable[[int], None]:
        def go(i: int) -> None:
            async def body() -> None:
                for t in range(turns):
                    loaded = await conversations.load("long")
                    assert loaded is not None
                    k = 2 * (i * turns + t)
                    loaded.messages.extend(extra[k : k + 2])
                    await conversations.save(loaded)

            run(body)

        return go

    def load_long(conversations: ConversationStore) -> Callable[[int], None]:
        def go(i: int) -> None:
            async def body() -> None:
                for _ in range(loads):
                    assert await conversations.load("long") is not None

            run(body)

        return go

    def list_ten(conversations: ConversationStore) -> Callable[[int], None]:
        def go(i: int) -> None:
            async def body() -> None:
                for _ in range(lists):
                    assert len(await conversations.list_conversations(limit=10)) == 10

            run(body)

        return go

    return [
        interleave(
            Result(f"save a turn (load {size:,} + save 2)", "ms", work=turns),
            runs,
            save_turns(ours),
            save_turns(theirs),
        ),
        interleave(
            Result(f"load a {size:,}-message conversation", "ms", work=loads),
            runs,
            load_long(ours),
            load_long(theirs),
        ),
        interleave(
            Result("list_conversations(limit=10) of 51", "ms", work=lists),
            runs,
            list_ten(ours),
            list_ten(theirs),
        ),
    ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    args = p.parse_args(argv)
    runs = args.runs or (3 if args.quick else 7)
    singles = 50 if args.quick else 200  # add_items([item]) calls per run
    batches = 5 if args.quick else 20  # add_items(100 items) calls per run
    reads = 50 if args.quick else 200  # get_items(limit=50) calls per run
    history = 2_000 if args.quick else HISTORY
    loop = asyncio.new_event_loop()

    def run(coro: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
        return loop.run_until_complete(coro())

    results: list[Result] = []
    with workspace() as ws:
        store = StateStore.open(ws.home("hermes"))
        sdk_db = ws.home("sdk") / "agents.db"
        hermes = {"store": store}
        sdk: dict[str, Any] = {"path": sdk_db}

        def lib_session(sid: str) -> HermesSession:
            return HermesSession(sid, hermes["store"])

        def sdk_session(sid: str) -> SQLiteSession:
            return SQLiteSession(sid, sdk["path"])

        # add 1: one item per call.
        one = agent_items(singles * runs, seed_offset=11)

        def add_one(make: Callable[[str], Any], tag: str) -> Callable[[int], None]:
            def go(i: int) -> None:
                session = make(f"{tag}-one-{i}")

                async def body() -> None:
                    for item in one[i * singles : (i + 1) * singles]:
                        await session.add_items([item])

                run(body)
                session.close()

            return go

        results.append(
            interleave(
                Result("add_items, 1 item per call", "msg/s", work=singles),
                runs,
                add_one(lib_session, "h"),
                add_one(sdk_session, "s"),
            )
        )

        # add 100: a hundred items per call.
        hundred = agent_items(100 * batches, seed_offset=12)

        def add_hundred(make: Callable[[str], Any], tag: str) -> Callable[[int], None]:
            def go(i: int) -> None:
                session = make(f"{tag}-hundred-{i}")

                async def body() -> None:
                    for b in range(batches):
                        await session.add_items(hundred[b * 100 : (b + 1) * 100])

                run(body)
                session.close()

            return go

        results.append(
            interleave(
                Result("add_items, 100 items per call", "msg/s", work=100 * batches),
                runs,
                add_hundred(lib_session, "h"),
                add_hundred(sdk_session, "s"),
            )
        )

        # get 50 of a 10,000-item session.
        past = agent_items(history, seed_offset=13)
        long_lib, long_sdk = lib_session("long"), sdk_session("long")

        async def fill() -> None:
            for start in range(0, history, 1000):
                await long_lib.add_items(past[start : start + 1000])
                await long_sdk.add_items(past[start : start + 1000])

        run(fill)
        want = past[-50:]

        def get_fifty(session: Any) -> Callable[[int], None]:
            def go(i: int) -> None:
                async def body() -> None:
                    for _ in range(reads):
                        got = await session.get_items(limit=50)
                    assert got == want

                run(body)

            return go

        results.append(
            interleave(
                Result(f"get_items(limit=50) of {history:,}", "ms", work=reads),
                runs,
                get_fifty(long_lib),
                get_fifty(long_sdk),
            )
        )
        long_lib.close()
        long_sdk.close()
        store.close()
        pydantic_store = StateStore.open(ws.home("pydantic"))
        pydantic = conversation_results(run, pydantic_store, runs, args.quick)
        pydantic_store.close()
    loop.close()

    print_table(
        "HermesSession (library) vs the SDK's SQLiteSession (raw), interleaved; "
        f"hermes driver {driver().name}, SQLiteSession on the standard sqlite3",
        results,
    )
    print_table(
        "HermesConversationStore (library) vs pydantic-ai's InMemoryConversationStore (raw)",
        pydantic,
    )
    results += pydantic
    data = payload(
        NAME,
        {
            "runs": runs,
            "singles": singles,
            "batches": batches,
            "reads": reads,
            "history": history,
            "openai_agents": importlib.metadata.version("openai-agents"),
        },
        results,
    )
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
