"""A checkpoint is acknowledged only once durable: a locked database is retried within
the store's budget, then the library's error reaches the graph with nothing written; the
event loop never waits on the lock; concurrent writers of one thread never lose or
interleave a checkpoint's rows."""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from hermes_repo import DatabaseBusyError, StateStore
from hermes_repo.integrations.langgraph import HermesSaver
from tests.integrations.langgraph_scenario import ask, chat_graph
from tests.support.locking import write_lock_held_by_another_process
from tests.support.retries import RETRY_LOGGER, retries, watching_retries

_versions = itertools.count(1)


def _checkpoint(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint holding ``values``, each at a new version (as LangGraph makes them)."""
    checkpoint: dict[str, Any] = dict(empty_checkpoint())
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = {channel: next(_versions) for channel in values}
    return checkpoint, dict(checkpoint["channel_versions"])


def _put(saver: HermesSaver, thread: str, values: dict[str, Any], **meta: Any) -> dict[str, Any]:
    checkpoint, versions = _checkpoint(values)
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return dict(saver.put(config, checkpoint, meta, versions))  # type: ignore[arg-type]


def test_a_lock_held_past_the_budget_raises_the_library_error_and_stores_nothing(
    home: Path, tmp_path: Path
) -> None:
    with StateStore.open(home, write_budget_s=0.3) as store:
        saver = HermesSaver(store)
        first = _put(saver, "locked", {"n": 1})
        graph = chat_graph(saver)
        with write_lock_held_by_another_process(store.path, tmp_path / "signals"):
            with pytest.raises(DatabaseBusyError):
                _put(saver, "locked", {"n": 2})
            # A graph step sees the same error: its checkpoint is not acknowledged.
            with pytest.raises(DatabaseBusyError):
                graph.invoke(*ask("locked-graph", "weather in Lyon", 0))
        latest = saver.get_tuple({"configurable": {"thread_id": "locked"}})
        assert latest is not None and latest.config == first
        assert latest.checkpoint["channel_values"] == {"n": 1}
        assert saver.get_tuple({"configurable": {"thread_id": "locked-graph"}}) is None


def test_a_lock_released_within_the_budget_is_waited_out(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with StateStore.open(home, write_budget_s=60.0) as store:
        saver = HermesSaver(store)
        _put(saver, "busy", {"n": 1})
        with write_lock_held_by_another_process(store.path, tmp_path / "signals") as lock:

            class ReleaseOnFirstReplay(logging.Handler):
                def emit(self, record: logging.LogRecord) -> None:
                    if record.name == RETRY_LOGGER:
                        lock.release()

            handler = ReleaseOnFirstReplay(logging.DEBUG)
            logging.getLogger(RETRY_LOGGER).addHandler(handler)
            try:
                with watching_retries(caplog):
                    stored = _put(saver, "busy", {"n": 2})
            finally:
                logging.getLogger(RETRY_LOGGER).removeHandler(handler)
        assert retries(caplog)[:1] == [1]
        latest = saver.get_tuple({"configurable": {"thread_id": "busy"}})
        assert latest is not None and latest.config == stored
        assert latest.checkpoint["channel_values"] == {"n": 2}


async def test_a_put_waiting_on_a_lock_never_blocks_the_event_loop(
    home: Path, tmp_path: Path
) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    with StateStore.open(home, write_budget_s=1.0) as store:
        saver = HermesSaver(store)
        checkpoint, versions = _checkpoint({"n": 1})
        config = {"configurable": {"thread_id": "loop", "checkpoint_ns": ""}}
        beat = asyncio.create_task(ticker())
        with (
            write_lock_held_by_another_process(store.path, tmp_path / "signals"),
            pytest.raises(DatabaseBusyError),
        ):
            await saver.aput(config, checkpoint, {}, versions)  # type: ignore[arg-type]
        beat.cancel()
        # The loop kept ticking through the whole budget the put spent waiting.
        assert ticks >= 10


def test_concurrent_writers_of_one_thread_never_lose_or_interleave_a_checkpoint(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    workers, rounds = 4, 15
    errors: list[BaseException] = []
    start = threading.Barrier(workers)

    def work(worker: int) -> None:
        try:
            start.wait()
            for n in range(rounds):
                # Each checkpoint's values and writes name their writer and round: a row
                # of another's checkpoint under it would show.
                values = {f"w{worker}": n, "who": f"{worker}:{n}", "big": [worker] * 200}
                stored = _put(saver, "shared", values, worker=worker, round=n)
                saver.put_writes(
                    stored,  # type: ignore[arg-type]
                    [("who", f"{worker}:{n}:{i}") for i in range(3)],
                    task_id=f"task-{worker}-{n}",
                )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    found = list(saver.list({"configurable": {"thread_id": "shared"}}))
    assert len(found) == workers * rounds
    for item in found:
        worker, n = item.metadata["worker"], item.metadata["round"]  # type: ignore[typeddict-item]
        assert item.checkpoint["channel_values"] == {
            f"w{worker}": n,
            "who": f"{worker}:{n}",
            "big": [worker] * 200,
        }
        assert item.pending_writes == [
            (f"task-{worker}-{n}", "who", f"{worker}:{n}:{i}") for i in range(3)
        ]
    assert store.list_sessions(source="langgraph")[0].id == "shared"
