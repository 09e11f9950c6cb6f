"""The same real graphs, run through HermesSaver and through LangGraph's own
MemorySaver, end in the same states with the same histories: a tool loop, an interrupt
and its resume, a fork from an earlier checkpoint, parallel branches (sync and async)."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import MemorySaver
from langgraph.types import StateSnapshot

from hermes_repo import StateStore
from hermes_repo.integrations.langgraph import HermesSaver
from tests.integrations.langgraph_scenario import RESUME, ask, chat_graph, fan_graph


def _history(snapshots: list[StateSnapshot]) -> list[dict[str, Any]]:
    """A thread's history with the checkpoint ids (random per run) replaced by their
    position: what each checkpoint holds, where it goes next and whose child it is."""
    position = {s.config["configurable"]["checkpoint_id"]: i for i, s in enumerate(snapshots)}
    return [
        {
            "values": s.values,
            "next": s.next,
            "metadata": {k: v for k, v in (s.metadata or {}).items() if k != "parents"},
            "parent": None
            if s.parent_config is None
            else position[s.parent_config["configurable"]["checkpoint_id"]],
            "tasks": [(t.name, [i.value for i in t.interrupts]) for t in s.tasks],
        }
        for s in snapshots
    ]


def _result(out: dict[str, Any]) -> dict[str, Any]:
    """A run's output with its interrupts' ids (made from checkpoint ids) left out."""
    return {k: [i.value for i in v] if k == "__interrupt__" else v for k, v in out.items()}


def _run(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    chat, fan = chat_graph(saver), fan_graph(saver)
    first, config = ask("trip", "weather in 大阪", 0)
    paused = chat.invoke(first, config)
    done = chat.invoke(RESUME, config)
    chat.invoke(ask("trip", "and in Lyon", 1)[0], config)
    chat.invoke(RESUME, config)
    # Time travel: resume the first interrupt again from its checkpoint (a fork).
    earlier = [s for s in chat.get_state_history(config) if s.next == ("approve",)][-1]
    forked = chat.invoke(RESUME, earlier.config)
    fan.invoke({"topic": "rain", "notes": []}, {"configurable": {"thread_id": "fan"}})
    return {
        "paused": _result(paused),
        "done": _result(done),
        "forked": _result(forked),
        "state": chat.get_state(config).values,
        "histories": {
            t: _history(list(g.get_state_history({"configurable": {"thread_id": t}})))
            for t, g in (("trip", chat), ("fan", fan))
        },
    }


async def _arun(saver: BaseCheckpointSaver[Any]) -> dict[str, Any]:
    chat, fan = chat_graph(saver), fan_graph(saver)
    first, config = ask("trip", "weather in 大阪", 0)
    paused = await chat.ainvoke(first, config)
    done = await chat.ainvoke(RESUME, config)
    await chat.ainvoke(ask("trip", "and in Lyon", 1)[0], config)
    await chat.ainvoke(RESUME, config)
    earlier = [s async for s in chat.aget_state_history(config) if s.next == ("approve",)][-1]
    forked = await chat.ainvoke(RESUME, earlier.config)
    await fan.ainvoke({"topic": "rain", "notes": []}, {"configurable": {"thread_id": "fan"}})
    histories = {}
    for t, g in (("trip", chat), ("fan", fan)):
        cfg = {"configurable": {"thread_id": t}}
        histories[t] = _history([s async for s in g.aget_state_history(cfg)])
    return {
        "paused": _result(paused),
        "done": _result(done),
        "forked": _result(forked),
        "state": (await chat.aget_state(config)).values,
        "histories": histories,
    }


def test_graph_runs_match_memory_saver_states_and_histories(
    backend: str, store: StateStore
) -> None:
    ours, theirs = _run(HermesSaver(store)), _run(MemorySaver())
    assert ours == theirs
    # The run did what the scenario says: it paused, resumed, forked and fanned out.
    assert "__interrupt__" in ours["paused"]
    assert ours["done"]["messages"][-1].content == "Forecast: 晴れ、23度"
    assert ours["forked"]["messages"][-1].content == "Forecast: 晴れ、23度"
    assert len(ours["histories"]["trip"]) > 10
    assert sorted(ours["histories"]["fan"][0]["values"]["notes"]) == [
        "joined 3",
        "left:rain",
        "middle:rain",
        "right:rain",
    ]


async def test_async_graph_runs_match_memory_saver_states_and_histories(
    backend: str, store: StateStore
) -> None:
    assert await _arun(HermesSaver(store)) == await _arun(MemorySaver())
