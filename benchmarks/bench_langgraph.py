"""HermesSaver vs LangGraph's own SqliteSaver and PostgresSaver, interleaved.

Each pair runs the same checkpoints through the ``BaseCheckpointSaver`` calls LangGraph
makes, in one process, alternating HermesSaver, the framework's saver, HermesSaver...:
HermesSaver on a SQLite store against ``SqliteSaver`` (langgraph-checkpoint-sqlite, its
own file in WAL mode), and with ``--url`` (or ``HERMES_TEST_PG_URL``) HermesSaver on a
PostgreSQL store against ``PostgresSaver`` (langgraph-checkpoint-postgres), each on a
throwaway database of that server (created and dropped here).

The checkpoints are a chat agent's: a ``messages`` channel (LangChain messages of about
300 characters, English and Japanese, one more every step, the newest 40 kept: an agent
that trims its context), a step counter and a 1 KB scratch value that changes every
step. HermesSaver also keeps each new message as
a searchable display-only row of the thread's session; the framework's savers keep the
checkpoint only.

* put: ``put`` of 50 consecutive checkpoints on a fresh thread (each with its new
  channel values);
* put, no message row: the same with the conversation in a channel named ``history``
  instead of ``messages``, which HermesSaver keeps in the checkpoint only: what a put
  costs without the searchable message row;
* put_writes: ``put_writes`` of one task's 2 writes, on 50 checkpoints;
* get_tuple: ``get_tuple`` of the newest checkpoint of a 1,000-checkpoint thread;
* list: ``list(limit=20)`` and the whole ``list`` of that thread.

The ratio is HermesSaver throughput / the framework saver's: above 1, HermesSaver is
faster.

    python benchmarks/bench_langgraph.py [--url URL] [--quick] [--runs N] [--json FILE]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from _common import Result, interleave, parser, payload, print_table, run_main, workspace
from _common import write_json as write_json_file
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from hermes_repo import StateStore
from hermes_repo.integrations.langgraph import HermesSaver

NAME = "langgraph"
WINDOW = 40  # messages a thread keeps (the rest trimmed, as agents trim their context)
TEXT = (
    "The forecast for Osaka says light rain in the morning, clearing by noon; "
    "大阪の天気は午前中は小雨、昼には晴れる見込みです。 "
) * 3


class Thread:
    """The checkpoints of one chat thread, made as LangGraph makes them."""

    def __init__(
        self, saver: BaseCheckpointSaver[Any], thread_id: str, channel: str = "messages"
    ) -> None:
        self.saver = saver
        self.channel = channel
        self.config: dict[str, Any] = {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ""}
        }
        self.messages: list[Any] = []
        self.versions: dict[str, Any] = {}
        self.step = 0
        self.stored: list[dict[str, Any]] = []

    def put(self) -> None:
        n = self.step
        kind = HumanMessage if n % 2 == 0 else AIMessage
        self.messages = [*self.messages, kind(content=f"{n}: {TEXT}", id=f"m-{n}")][-WINDOW:]
        values = {self.channel: self.messages, "step": n, "scratch": f"{n:04d}" * 256}
        new = {
            channel: self.saver.get_next_version(self.versions.get(channel), None)
            for channel in values
        }
        self.versions.update(new)
        checkpoint: dict[str, Any] = dict(empty_checkpoint())
        checkpoint["channel_values"] = values
        checkpoint["channel_versions"] = dict(self.versions)
        metadata = {"source": "loop", "step": n, "parents": {}}
        self.config = dict(self.saver.put(self.config, checkpoint, metadata, new))  # type: ignore[arg-type]
        self.stored.append(self.config)
        self.step += 1


def pair_results(
    ours: BaseCheckpointSaver[Any], theirs: BaseCheckpointSaver[Any], label: str, args: Any
) -> list[Result]:
    runs = args.runs or (3 if args.quick else 7)
    puts = 20 if args.quick else 50
    size = 200 if args.quick else 1_000
    gets = 50 if args.quick else 200
    lists = 5 if args.quick else 20

    long = {}
    for tag, saver in (("ours", ours), ("theirs", theirs)):
        thread = Thread(saver, f"long-{tag}")
        for _ in range(size):
            thread.put()
        long[tag] = thread

    def put_case(
        saver: BaseCheckpointSaver[Any], tag: str, channel: str = "messages"
    ) -> Callable[[int], None]:
        def go(i: int) -> None:
            thread = Thread(saver, f"put-{channel}-{tag}-{i}", channel)
            for _ in range(puts):
                thread.put()

        return go

    def writes_case(tag: str) -> Callable[[int], None]:
        thread = long[tag]

        def go(i: int) -> None:
            for k, config in enumerate(thread.stored[i * puts : (i + 1) * puts]):
                thread.saver.put_writes(
                    config,  # type: ignore[arg-type]
                    [("messages", [AIMessage(content=TEXT, id=f"w-{i}-{k}")]), ("step", k)],
                    task_id=f"task-{i}-{k}",
                )

        return go

    def get_case(tag: str) -> Callable[[int], None]:
        thread = long[tag]
        config = {"configurable": {"thread_id": f"long-{tag}"}}

        def go(i: int) -> None:
            for _ in range(gets):
                assert thread.saver.get_tuple(config) is not None  # type: ignore[arg-type]

        return go

    def list_case(tag: str, limit: int | None) -> Callable[[int], None]:
        thread = long[tag]
        config = {"configurable": {"thread_id": f"long-{tag}"}}
        calls = lists if limit is not None else max(1, lists // 10)

        def go(i: int) -> None:
            for _ in range(calls):
                found = list(thread.saver.list(config, limit=limit))  # type: ignore[arg-type]
                assert len(found) == (limit or size)

        return go

    return [
        interleave(
            Result(f"{label}: put, 3 channels", "ms", work=puts),
            runs,
            put_case(ours, "ours"),
            put_case(theirs, "theirs"),
        ),
        interleave(
            Result(f"{label}: put, no message row", "ms", work=puts),
            runs,
            put_case(ours, "ours", "history"),
            put_case(theirs, "theirs", "history"),
        ),
        interleave(
            Result(f"{label}: put_writes, 2 writes", "ms", work=puts),
            runs,
            writes_case("ours"),
            writes_case("theirs"),
        ),
        interleave(
            Result(f"{label}: get_tuple, newest of {size:,}", "ms", work=gets),
            runs,
            get_case("ours"),
            get_case("theirs"),
        ),
        interleave(
            Result(f"{label}: list(limit=20) of {size:,}", "ms", work=lists),
            runs,
            list_case("ours", 20),
            list_case("theirs", 20),
        ),
        interleave(
            Result(f"{label}: list, all {size:,}", "ms", work=max(1, lists // 10)),
            runs,
            list_case("ours", None),
            list_case("theirs", None),
        ),
    ]


@contextmanager
def pg_databases(url: str) -> Iterator[tuple[str, str]]:
    """Two throwaway databases on the server: the store's and PostgresSaver's."""
    admin_url = make_url(url)
    names = (f"lgbench_ours_{os.getpid()}", f"lgbench_theirs_{os.getpid()}")
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        for name in names:
            conn.execute(text(f"CREATE DATABASE {name}"))
    try:
        ours = admin_url.set(database=names[0]).render_as_string(hide_password=False)
        theirs = admin_url.set(database=names[1], drivername="postgresql").render_as_string(
            hide_password=False
        )
        yield ours, theirs
    finally:
        with admin.connect() as conn:
            for name in names:
                conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--url", default=os.environ.get("HERMES_TEST_PG_URL"))
    args = p.parse_args(argv)
    results: list[Result] = []
    with workspace() as ws:
        with (
            StateStore.open(ws.home("hermes")) as store,
            SqliteSaver.from_conn_string(str(ws.home("sqlite") / "checkpoints.db")) as sqlite_saver,
        ):
            results += pair_results(HermesSaver(store), sqlite_saver, "SQLite", args)
        if args.url:
            with (
                pg_databases(args.url) as (ours_url, theirs_url),
                StateStore.open(ws.home("pg"), url=ours_url) as pg_store,
                PostgresSaver.from_conn_string(theirs_url) as pg_saver,
            ):
                pg_saver.setup()
                results += pair_results(HermesSaver(pg_store), pg_saver, "PostgreSQL", args)
    print_table("HermesSaver / framework saver (ms per call, medians)", results)
    data = payload(NAME, {"quick": args.quick, "runs": args.runs}, results)
    write_json_file(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
