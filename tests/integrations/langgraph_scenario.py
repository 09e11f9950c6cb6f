"""Real LangGraph graphs with a fake model (no network): a tool loop with an interrupt
before the tool runs, and a fan-out to parallel branches. Every message carries an id
the graph makes from the conversation, so two runs through two savers compare equal."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

WEATHER = {"大阪": "晴れ、23度", "Lyon": "pluie fine, 11 °C"}


def _model(state: MessagesState) -> dict[str, list[AnyMessage]]:
    """A fake chat model: a question gets a tool call, a tool result gets an answer."""
    messages = state["messages"]
    last = messages[-1]
    n = len(messages)
    if isinstance(last, HumanMessage):
        city = str(last.content).rsplit(" ", 1)[-1]
        call = {"name": "weather", "args": {"city": city}, "id": f"call-{n}"}
        return {"messages": [AIMessage(content="", tool_calls=[call], id=f"ai-{n}")]}
    return {"messages": [AIMessage(content=f"Forecast: {last.content}", id=f"ai-{n}")]}


def _approve(state: MessagesState) -> dict[str, Any]:
    """A person approves each tool call (the graph stops here until resumed)."""
    answer = interrupt({"approve": state["messages"][-1].tool_calls[0]["args"]})
    ok = HumanMessage(content=f"approved: {answer}", id=f"ok-{len(state['messages'])}")
    return {"messages": [ok]}


def _tool(state: MessagesState) -> dict[str, list[AnyMessage]]:
    call = next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage)).tool_calls[0]
    found = WEATHER.get(call["args"]["city"], "unknown")
    return {
        "messages": [
            ToolMessage(
                content=found, tool_call_id=call["id"], name="weather", id=f"tool-{call['id']}"
            )
        ]
    }


def _route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "approve" if isinstance(last, AIMessage) and last.tool_calls else END


def chat_graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """model → approve (interrupt) → tool → model → END."""
    builder = StateGraph(MessagesState)
    builder.add_node("model", _model)
    builder.add_node("approve", _approve)
    builder.add_node("tool", _tool)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", _route, ["approve", END])
    builder.add_edge("approve", "tool")
    builder.add_edge("tool", "model")
    return builder.compile(checkpointer=saver)


class FanState(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


def fan_graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """START → (left, middle, right in parallel) → join → END."""
    builder = StateGraph(FanState)
    for name in ("left", "middle", "right"):
        builder.add_node(name, lambda s, name=name: {"notes": [f"{name}:{s['topic']}"]})
        builder.add_edge(START, name)
        builder.add_edge(name, "join")
    builder.add_node("join", lambda s: {"notes": [f"joined {len(s['notes'])}"]})
    builder.add_edge("join", END)
    return builder.compile(checkpointer=saver)


def ask(thread: str, text: str, n: int) -> tuple[dict[str, Any], dict[str, Any]]:
    return {"messages": [HumanMessage(content=text, id=f"human-{n}")]}, {
        "configurable": {"thread_id": thread}
    }


RESUME = Command(resume="yes")
