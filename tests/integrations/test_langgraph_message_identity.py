"""Which messages of a thread become rows: every message of the root graph's
``messages`` channel, once each by its id. A message never gets an id from the saver:
LangGraph's ``add_messages`` gives every message one before the checkpoint is written,
a ``messages`` channel without that reducer keeps its messages in the checkpoint only,
and a subgraph's messages become rows once the root graph holds them (by the same ids),
never from the subgraph's own checkpoints."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from hermes_repo import MessageRepository, StateStore
from hermes_repo.integrations.langgraph import HermesSaver


class PlainState(TypedDict):
    """A ``messages`` channel without ``add_messages``: nothing gives its messages ids."""

    messages: Annotated[list[AnyMessage], operator.add]


def _rows(store: StateStore, sid: str) -> list[dict[str, Any]]:
    return store.read(lambda conn: MessageRepository(conn).list(sid, include_inactive=True))


def _reply(state: dict[str, Any]) -> dict[str, list[AnyMessage]]:
    return {"messages": [AIMessage(content=f"reply {len(state['messages'])}")]}


def test_messages_given_without_ids_are_rows_by_the_ids_langgraph_gives_them(
    backend: str, store: StateStore
) -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    graph = builder.compile(checkpointer=HermesSaver(store))
    config = {"configurable": {"thread_id": "no-ids"}}
    for text in ("first", "second"):
        graph.invoke({"messages": [HumanMessage(content=text)]}, config)

    ids = [m.id for m in graph.get_state(config).values["messages"]]
    assert len(ids) == 4 and all(ids)  # add_messages gave each one an id
    rows = _rows(store, "no-ids")
    assert [row["uid"] for row in rows] == [f"langgraph:{i}" for i in ids]
    assert [row["content"] for row in rows] == ["first", "reply 1", "second", "reply 3"]


def test_a_messages_channel_without_ids_stays_in_the_checkpoint_only(
    backend: str, store: StateStore
) -> None:
    builder = StateGraph(PlainState)
    builder.add_node("reply", _reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    graph = builder.compile(checkpointer=HermesSaver(store))
    config = {"configurable": {"thread_id": "plain"}}
    graph.invoke({"messages": [HumanMessage(content="first")]}, config)
    graph.invoke({"messages": [HumanMessage(content="first")]}, config)

    kept = graph.get_state(config).values["messages"]
    assert [m.content for m in kept] == ["first", "reply 1", "first", "reply 3"]
    assert all(m.id is None for m in kept)
    # No id, no identity: a row per checkpoint would repeat the conversation, and a
    # content hash would merge the two "first" messages. The checkpoint keeps them all.
    assert _rows(store, "plain") == []
    assert store.get_session("plain").message_count == 0


def test_a_subgraphs_messages_are_rows_once_through_the_root_graph(
    backend: str, store: StateStore
) -> None:
    def think(state: MessagesState) -> dict[str, list[AnyMessage]]:
        n = len(state["messages"])
        return {"messages": [AIMessage(content=f"thought {n}", id=f"thought-{n}")]}

    inner = StateGraph(MessagesState)
    inner.add_node("think", think)
    inner.add_node("again", think)
    inner.add_edge(START, "think")
    inner.add_edge("think", "again")
    inner.add_edge("again", END)
    builder = StateGraph(MessagesState)
    builder.add_node("inner", inner.compile(checkpointer=True))
    builder.add_edge(START, "inner")
    builder.add_edge("inner", END)
    saver = HermesSaver(store)
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "nested"}}
    graph.invoke({"messages": [HumanMessage(content="plan", id="human-0")]}, config)

    namespaces = {c.config["configurable"]["checkpoint_ns"] for c in saver.list(config)}
    assert "" in namespaces and len(namespaces) > 1  # the subgraph checkpointed too
    rows = _rows(store, "nested")
    assert [row["uid"] for row in rows] == [
        "langgraph:human-0",
        "langgraph:thought-1",
        "langgraph:thought-2",
    ]
