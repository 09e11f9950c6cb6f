"""``delete_for_runs`` never cuts a ``DeltaChannel`` off the history it is rebuilt from.

A ``DeltaChannel`` value between two snapshots is not stored: LangGraph rebuilds it by
walking the checkpoint's parents and replaying their writes. A second run of a thread
starts from the first run's last checkpoint, so deleting the first run would leave the
second's value rebuilt from half its history. Such a call is refused with nothing
deleted; a run nothing that stays depends on (the newest run, a run of a graph
without delta channels, or delta values snapshotted at every update) is deleted as
before.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from hermes_repo import InvalidArgumentError, StateStore
from hermes_repo.integrations.langgraph import HermesSaver, session_id_for
from hermes_repo.models import (
    langgraph_blobs_table,
    langgraph_checkpoints_table,
    langgraph_writes_table,
)


def _extend(state: list[str], writes: list[list[str]]) -> list[str]:
    return [*state, *(item for write in writes for item in write)]


class Rare(TypedDict):
    """A snapshot every 100 updates: every checkpoint after the first holds a delta."""

    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=100)]


class Every(TypedDict):
    """A snapshot at every update: every checkpoint stores the value."""

    items: Annotated[list[str], DeltaChannel(_extend, snapshot_frequency=1)]


class Plain(TypedDict):
    """An ordinary reducer: every new version's value is stored whole."""

    items: Annotated[list[str], operator.add]


def _step(state: dict[str, Any]) -> dict[str, list[str]]:
    return {"items": [f"item-{len(state['items'])}"]}


def _graph(saver: HermesSaver, schema: type[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    builder = StateGraph(schema)
    builder.add_node("step", _step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder.compile(checkpointer=saver)


def _config(thread: str, run_id: str | None = None) -> Any:
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    if run_id is not None:
        # LangGraph copies the config's metadata into each checkpoint's metadata,
        # where delete_for_runs finds the run (as LangGraph's server sets it).
        config["metadata"] = {"run_id": run_id}
    return config


def _two_runs(saver: HermesSaver, thread: str, schema: type[Any]) -> list[str]:
    graph = _graph(saver, schema)
    for n in range(2):
        graph.invoke({"items": [f"input-{n}"]}, _config(thread, f"{thread}-run-{n}"))
    items: list[str] = graph.get_state(_config(thread)).values["items"]
    assert items == ["input-0", "item-1", "input-1", "item-3"]
    return items


_TABLES = (langgraph_checkpoints_table, langgraph_blobs_table, langgraph_writes_table)


def _rows(store: StateStore, thread: str) -> dict[str, int]:
    """The thread's checkpoints, channel values and pending writes, counted."""
    sid = session_id_for(thread)

    def count(conn: Connection) -> dict[str, int]:
        return {
            table.name: conn.execute(
                select(func.count()).select_from(table).where(table.c.session_id == sid)
            ).scalar_one()
            for table in _TABLES
        }

    return store.read(count)


def _runs_listed(saver: HermesSaver, thread: str) -> list[str]:
    return sorted({str(t.metadata.get("run_id")) for t in saver.list(_config(thread))})


def test_delete_for_runs_refuses_a_run_a_later_runs_delta_values_are_rebuilt_from(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    items = _two_runs(saver, "deltas", Rare)
    before = _rows(store, "deltas")
    assert before["langgraph_checkpoints"] == 6

    with pytest.raises(InvalidArgumentError) as caught:
        saver.delete_for_runs(["deltas-run-0"])
    message = str(caught.value)
    assert "LangGraph thread 'deltas'" in message
    assert "run 'deltas-run-0'" in message
    assert "DeltaChannel values (items)" in message
    assert "'deltas-run-1'" in message  # the run that depends on it
    assert "Nothing was deleted" in message
    assert "delete_for_runs(['deltas-run-0', 'deltas-run-1'])" in message  # the fix

    assert _rows(store, "deltas") == before
    assert _runs_listed(saver, "deltas") == ["deltas-run-0", "deltas-run-1"]
    assert _graph(saver, Rare).get_state(_config("deltas")).values["items"] == items


def test_adelete_for_runs_refuses_the_same_run_with_nothing_deleted(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    _two_runs(saver, "deltas", Rare)
    before = _rows(store, "deltas")

    with pytest.raises(InvalidArgumentError, match=r"DeltaChannel values \(items\)"):
        asyncio.run(saver.adelete_for_runs(["deltas-run-0"]))

    assert _rows(store, "deltas") == before


def test_a_refused_run_keeps_every_other_run_of_the_call_undeleted(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    _two_runs(saver, "deltas", Rare)
    _two_runs(saver, "plain", Plain)
    before = _rows(store, "plain")

    with pytest.raises(InvalidArgumentError, match="'deltas-run-0'"):
        saver.delete_for_runs(["plain-run-0", "deltas-run-0"])

    assert _rows(store, "plain") == before
    assert _runs_listed(saver, "plain") == ["plain-run-0", "plain-run-1"]


def test_delete_for_runs_deletes_the_newest_run_nothing_depends_on(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    _two_runs(saver, "deltas", Rare)

    saver.delete_for_runs(["deltas-run-1"])

    assert _runs_listed(saver, "deltas") == ["deltas-run-0"]
    state = _graph(saver, Rare).get_state(_config("deltas"))
    assert state.values["items"] == ["input-0", "item-1"]


def test_delete_for_runs_deletes_a_whole_delta_chain_given_together(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    _two_runs(saver, "deltas", Rare)

    saver.delete_for_runs(["deltas-run-1", "deltas-run-0"])

    assert _rows(store, "deltas") == {
        "langgraph_checkpoints": 0,
        "langgraph_blobs": 0,
        "langgraph_writes": 0,
    }
    assert saver.get_tuple(_config("deltas")) is None


def test_delete_for_runs_without_delta_channels_still_deletes_an_earlier_run(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    items = _two_runs(saver, "plain", Plain)
    before = _rows(store, "plain")

    saver.delete_for_runs(["plain-run-0"])

    after = _rows(store, "plain")
    assert after["langgraph_checkpoints"] == before["langgraph_checkpoints"] - 3
    assert after["langgraph_writes"] < before["langgraph_writes"]
    assert _runs_listed(saver, "plain") == ["plain-run-1"]
    # An ordinary reducer's value is stored whole: nothing was rebuilt from run 0.
    assert _graph(saver, Plain).get_state(_config("plain")).values["items"] == items


def test_delete_for_runs_of_delta_values_snapshotted_at_every_update_deletes(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    items = _two_runs(saver, "snapshots", Every)

    saver.delete_for_runs(["snapshots-run-0"])

    assert _runs_listed(saver, "snapshots") == ["snapshots-run-1"]
    assert _graph(saver, Every).get_state(_config("snapshots")).values["items"] == items


def test_deleting_a_run_refuses_every_later_run_whose_walk_reaches_it(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    graph = _graph(saver, Rare)
    for n in range(3):
        graph.invoke({"items": [f"input-{n}"]}, _config("deltas", f"run-{n}"))
    before = _rows(store, "deltas")

    with pytest.raises(InvalidArgumentError, match=r"run 'run-1'.*\(run 'run-2'\)"):
        saver.delete_for_runs(["run-1"])
    with pytest.raises(InvalidArgumentError, match=r"runs 'run-0', 'run-1'.*\(run 'run-2'\)"):
        saver.delete_for_runs(["run-0", "run-1"])

    assert _rows(store, "deltas") == before
    saver.delete_for_runs(["run-2", "run-1", "run-0"])
    assert saver.get_tuple(_config("deltas")) is None


def test_langgraph_rebuilds_a_delta_value_short_once_its_ancestors_are_gone(
    backend: str, store: StateStore
) -> None:
    """What the refusal prevents, by deleting run 0's rows around the saver: LangGraph
    raises nothing and reads the later run's value from half its history."""
    saver = HermesSaver(store)
    _two_runs(saver, "deltas", Rare)
    sid = session_id_for("deltas")
    cks, wr = langgraph_checkpoints_table, langgraph_writes_table

    def drop_run_0(uow: Any) -> None:
        conn = uow.connection
        ids = select(cks.c.checkpoint_id).where(
            cks.c.session_id == sid, cks.c.run_id == "deltas-run-0"
        )
        conn.execute(wr.delete().where(wr.c.session_id == sid, wr.c.checkpoint_id.in_(ids)))
        conn.execute(cks.delete().where(cks.c.session_id == sid, cks.c.run_id == "deltas-run-0"))

    store.write(drop_run_0)

    state = _graph(saver, Rare).get_state(_config("deltas"))
    assert state.values["items"] == ["input-1", "item-3"]


def _schema(frequency: int) -> type[Any]:
    # The functional form: a class body's annotation would be read after this returns.
    channel = DeltaChannel(_extend, snapshot_frequency=frequency)
    return TypedDict("Items", {"items": Annotated[list[str], channel]})  # type: ignore[operator]


def _states(saver: HermesSaver, graph: Any, thread: str) -> dict[str, list[str]]:
    """Every checkpoint's value of ``items`` as LangGraph rebuilds it."""
    return {
        t.config["configurable"]["checkpoint_id"]: graph.get_state(t.config).values.get("items")
        for t in saver.list(_config(thread))
    }


@pytest.mark.parametrize("frequency", [1, 2, 3, 100])
def test_delete_for_runs_refuses_exactly_when_a_checkpoint_that_stays_would_read_otherwise(
    store: StateStore, frequency: int
) -> None:
    """Every set of runs of a thread of three runs and a fork (a fourth run from the
    first run's last checkpoint), at several snapshot cadences: the call deletes when
    every checkpoint that stays reads the same value after, and is refused (nothing
    deleted) when deleting those runs' rows around the saver changes what LangGraph
    reads for one of them."""
    saver = HermesSaver(store)
    schema = _schema(frequency)
    graph = _graph(saver, schema)
    outcomes = set()
    for mask in range(1, 16):
        thread = f"f{frequency}-m{mask}"
        for n in range(3):
            graph.invoke({"items": [f"input-{n}"]}, _config(thread, f"{thread}-run-{n}"))
        first = next(saver.list(_config(thread), filter={"run_id": f"{thread}-run-0"}, limit=1))
        fork = _config(thread, f"{thread}-run-3")
        fork["configurable"]["checkpoint_id"] = first.config["configurable"]["checkpoint_id"]
        graph.invoke({"items": ["input-3"]}, fork)
        doomed = [f"{thread}-run-{n}" for n in range(4) if mask & (1 << n)]
        before = _states(saver, graph, thread)
        rows = _rows(store, thread)
        try:
            saver.delete_for_runs(doomed)
        except InvalidArgumentError:
            assert _rows(store, thread) == rows
            _drop_runs_around_the_saver(store, thread, doomed)
            after = _states(saver, graph, thread)
            assert any(after[cid] != before[cid] for cid in after), (mask, "refused needlessly")
            outcomes.add("refused")
        else:
            after = _states(saver, graph, thread)
            assert after == {cid: before[cid] for cid in after}, (mask, "deleted a needed run")
            outcomes.add("deleted")
    # A run writes the channel twice: at a cadence of 1 or 2 it ends on a snapshot, and
    # the next run's walk stops at its own first checkpoint (naming that snapshot's
    # version); at 3 or 100 the next run reads the earlier runs' writes.
    assert outcomes == ({"deleted"} if frequency <= 2 else {"deleted", "refused"})


def _drop_runs_around_the_saver(store: StateStore, thread: str, run_ids: list[str]) -> None:
    sid = session_id_for(thread)
    cks, wr = langgraph_checkpoints_table, langgraph_writes_table

    def drop(uow: Any) -> None:
        doomed = cks.c.session_id == sid, cks.c.run_id.in_(run_ids)
        ids = select(cks.c.checkpoint_id).where(*doomed)
        uow.connection.execute(
            wr.delete().where(wr.c.session_id == sid, wr.c.checkpoint_id.in_(ids))
        )
        uow.connection.execute(cks.delete().where(*doomed))

    store.write(drop)
