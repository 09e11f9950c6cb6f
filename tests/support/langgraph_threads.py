"""LangGraph threads written through the real saver, for the copy and salvage tests."""

from __future__ import annotations

from typing import Any

from hermes_repo import StateStore
from hermes_repo.integrations.langgraph import HermesSaver
from tests.integrations.langgraph_scenario import RESUME, ask, chat_graph

__all__ = ["THREADS", "checkpoints_of", "config", "fill_threads"]

THREADS = ("trip", "旅行 two", "gone")


def config(thread: str) -> dict[str, Any]:
    """The run config of ``thread``."""
    return {"configurable": {"thread_id": thread}}


def fill_threads(store: StateStore, threads: tuple[str, ...] = THREADS) -> None:
    """Threads run through a real graph (a tool loop, interrupts and resumes), each left
    paused with its interrupt's pending write, plus task writes of a channel and of an
    error on the latest checkpoint."""
    saver = HermesSaver(store)
    graph = chat_graph(saver)
    for thread in threads:
        for n, text in enumerate(("weather in 大阪", "and in Lyon")):
            graph.invoke(ask(thread, text, n)[0], config(thread))
            graph.invoke(RESUME, config(thread))
        graph.invoke(ask(thread, "weather in Lyon again", 2)[0], config(thread))
        latest = saver.get_tuple(config(thread))
        assert latest is not None
        saver.put_writes(
            latest.config,
            [("messages", {"note": "pending \x00 bytes", "n": [1, 2.5]}), ("__error__", "boom")],
            task_id="task-1",
            task_path="~__pregel_pull, model",
        )


def checkpoints_of(store: StateStore, threads: tuple[str, ...] = THREADS) -> dict[str, list[Any]]:
    """Every checkpoint tuple LangGraph reads, thread by thread, newest first."""
    saver = HermesSaver(store)
    return {t: list(saver.list(config(t))) for t in threads}
