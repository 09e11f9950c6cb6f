"""HermesSession vs the OpenAI Agents SDK's own SQLiteSession, interleaved.

Both sessions are file-backed (a fresh folder each) and run the same Responses items,
built from the realistic corpus (user text, output messages, function calls and their
outputs, CJK included), through the SDK's async ``Session`` protocol on one event loop;
runs alternate HermesSession, SQLiteSession, HermesSession... in one process:

* add 1: ``add_items([item])``, one call per item (the Runner's save of a turn's item);
* add 100: ``add_items(items)`` of 100 items per call;
* get 50: ``get_items(limit=50)`` on a session already holding 10,000 items.

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

from hermes_repo import StateStore
from hermes_repo.integrations.openai_agents import HermesSession

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
    loop.close()

    print_table(
        "HermesSession (library) vs the SDK's SQLiteSession (raw), interleaved; "
        f"hermes driver {driver().name}, SQLiteSession on the standard sqlite3",
        results,
    )
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
