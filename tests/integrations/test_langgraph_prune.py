"""``prune(strategy="keep_latest")`` never cuts a ``DeltaChannel`` off the history it
is rebuilt from: a thread whose newest checkpoint holds delta values not yet
snapshotted is refused with nothing deleted; a snapshotted one prunes and reads the
same state after."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from hermes_repo import InvalidArgumentError, StateStore
from hermes_repo.integrations.langgraph import HermesSaver


def _extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class Rare(TypedDict):
    """A snapshot every 100 updates: the newest checkpoint is a delta."""

    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=100)]


class Every(TypedDict):
    """A snapshot at every update."""

    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=1)]


def _step(state: dict[str, Any]) -> dict[str, list[str]]:
    return {"items": [f"item-{len(state['items'])}"]}


def _graph(saver: HermesSaver, every: int) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Rare if every == 100 else Every)
    step = _step
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _run(saver: HermesSaver, thread: str, every: int) -> list[str]:
    graph = _graph(saver, every)
    config = {"configurable": {"thread_id": thread}}
    for n in range(3):
        graph.invoke({"items": [f"input-{n}"]}, config)
    items: list[str] = graph.get_state(config).values["items"]
    return items


def test_prune_refuses_a_thread_whose_newest_checkpoint_needs_its_ancestors_writes(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    items = _run(saver, "deltas", every=100)
    assert items == [x for n in range(3) for x in (f"input-{n}", f"item-{2 * n + 1}")]
    config = {"configurable": {"thread_id": "deltas"}}
    before = len(list(saver.list(config)))

    with pytest.raises(InvalidArgumentError, match=r"DeltaChannel values \(items\)") as caught:
        saver.prune(["deltas"])
    assert "Nothing was deleted" in str(caught.value)
    assert "snapshot_frequency" in str(caught.value)  # the fix is named

    assert len(list(saver.list(config))) == before
    assert _graph(saver, 100).get_state(config).values["items"] == items


def test_prune_keeps_a_thread_whose_delta_values_are_snapshotted_readable(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    items = _run(saver, "snapshots", every=1)
    config = {"configurable": {"thread_id": "snapshots"}}

    saver.prune(["snapshots"])

    assert len(list(saver.list(config))) == 1
    assert _graph(saver, 1).get_state(config).values["items"] == items
