"""Throughput of ``copy_store`` (``hermes-repo db copy``) on LangGraph checkpoint rows.

A store of T threads x C checkpoints is written through the real saver
(:class:`hermes_repo.integrations.langgraph.HermesSaver`): each checkpoint with two
channel values of new versions (a counter and about 300 bytes of text) and one pending
write, so four rows a checkpoint. Then, alternating in one process, each into a fresh
store built by the migrations:

* ``first``: :func:`~hermes_repo.transfer.copy.copy_store` into an empty SQLite store
  (batches of 1000 rows, each compared with the target's and written in its own
  transaction);
* ``rerun``: the same copy run again into that store (every row found equal, the
  target's keys checked against the source's first): the cost of a resumed or repeated
  copy.

With ``--pg URL`` (a server where databases may be created) the first copy also goes
into a new PostgreSQL database opened as a store.

    python benchmarks/bench_copy_checkpoints.py --threads 20 --checkpoints 250 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from hermes_repo.integrations.langgraph import HermesSaver
from hermes_repo.store import StateStore
from hermes_repo.transfer.copy import copy_store
from hermes_repo.transfer.copy_checkpoints import checkpoint_row_count


def build_source(home: Path, threads: int, checkpoints: int) -> int:
    """Fill ``home`` through the saver; returns the checkpoint rows written."""
    with StateStore.open(home) as store:
        saver = HermesSaver(store)
        for t in range(threads):
            config: Any = {"configurable": {"thread_id": f"thread-{t}", "checkpoint_ns": ""}}
            version: str | None = None
            for i in range(checkpoints):
                version = saver.get_next_version(version, None)
                checkpoint = empty_checkpoint()
                checkpoint["id"] = str(uuid6(clock_seq=i))
                checkpoint["channel_values"] = {"counter": i, "notes": f"step {i} " + "x" * 300}
                checkpoint["channel_versions"] = {"counter": version, "notes": version}
                config = saver.put(
                    config,
                    checkpoint,
                    {"source": "loop", "step": i},
                    {"counter": version, "notes": version},
                )
                saver.put_writes(config, [("counter", i + 1)], task_id=f"task-{i}")
        return int(store.read(checkpoint_row_count))


def _timed(source: StateStore, target: StateStore) -> float:
    started = time.perf_counter()
    copy_store(source, target)
    return time.perf_counter() - started


def _pg_store(server: str) -> tuple[str, Any]:
    url = make_url(server)
    name = f"bench_ckpt_{uuid.uuid4().hex[:10]}"
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    return url.set(database=name).render_as_string(hide_password=False), (admin, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=20)
    parser.add_argument("--checkpoints", type=int, default=250)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--pg", help="PostgreSQL server URL (databases are created)")
    args = parser.parse_args()
    results: dict[str, list[float]] = {"first": [], "rerun": [], "first_pg": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        src_home = work / "source"
        rows = build_source(src_home, args.threads, args.checkpoints)
        with StateStore.open(src_home) as source:
            for n in range(args.repeats):
                with StateStore.open(work / f"target-{n}") as target:
                    results["first"].append(_timed(source, target))
                    results["rerun"].append(_timed(source, target))
                if args.pg:
                    url, (admin, name) = _pg_store(args.pg)
                    try:
                        with StateStore.open(work / f"pg-home-{n}", url=url) as target:
                            results["first_pg"].append(_timed(source, target))
                    finally:
                        with admin.connect() as conn:
                            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                        admin.dispose()
    report = {
        "checkpoint_rows": rows,
        **{
            f"{kind}_rows_per_s": round(rows / statistics.median(times))
            for kind, times in results.items()
            if times
        },
        "seconds": {kind: [round(t, 3) for t in times] for kind, times in results.items()},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
