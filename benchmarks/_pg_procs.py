"""Four processes appending at once (bench_pg.py): messages per second in total.

Each process opens its own store (the same SQLite file, or the same PostgreSQL
database), waits at a barrier, then appends its messages one per transaction
(``store.append_message``) to a session of its own. The total rate is every process'
messages over the time from the first start to the last finish.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from pathlib import Path
from typing import Any

from hermes_repo.store import StateStore

PROCS = 4


def _worker(
    home: str, url: str | None, sid: str, msgs: list[dict[str, Any]], barrier: Any, out: Any
) -> None:
    store = StateStore.open(home, url=url) if url else StateStore.open(home)
    try:
        barrier.wait()
        t0 = time.perf_counter()
        for m in msgs:
            store.append_message(sid, m)
        out.put((t0, time.perf_counter()))
    finally:
        store.close()


def _once(homes: list[str], url: str | None, tag: str, msgs: list[dict[str, Any]]) -> float:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(PROCS)
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker,
            args=(homes[k], url, f"{tag}-p{k}", msgs[k::PROCS], barrier, out),
        )
        for k in range(PROCS)
    ]
    for p in procs:
        p.start()
    spans = [out.get() for _ in procs]
    for p in procs:
        p.join()
        if p.exitcode != 0:
            raise SystemExit(f"a writer process failed (exit {p.exitcode})")
    return len(msgs) / (max(e for _, e in spans) - min(s for s, _ in spans))


def concurrent_case(
    sqlite: StateStore,
    pg: StateStore,
    url: str,
    root: Path,
    msgs: list[dict[str, Any]],
    runs: int,
) -> dict[str, Any]:
    """SQLite, PostgreSQL, SQLite, ...: ``runs`` each; totals in msg/s (medians)."""
    pg_homes = []
    for k in range(PROCS):
        (root / f"pg-proc-{k}").mkdir(parents=True, exist_ok=True)
        pg_homes.append(str(root / f"pg-proc-{k}"))
    sqlite_homes = [str(sqlite.home)] * PROCS
    rates: dict[str, list[float]] = {"sqlite": [], "pg": []}
    for i in range(runs):
        for side, store in (("sqlite", sqlite), ("pg", pg)):
            tag = f"conc-{i}"
            with store.unit_of_work() as uow:
                for k in range(PROCS):
                    uow.sessions.create("bench", id=f"{tag}-p{k}", started_at=1_700_000_000.0)
                uow.commit()
            if side == "sqlite":
                rates[side].append(_once(sqlite_homes, None, tag, msgs))
            else:
                rates[side].append(_once(pg_homes, url, tag, msgs))
    return {
        "name": f"{PROCS} processes appending, 1 msg/txn",
        "work": len(msgs),
        "sqlite_msg_s": statistics.median(rates["sqlite"]),
        "pg_msg_s": statistics.median(rates["pg"]),
        "sqlite_runs": rates["sqlite"],
        "pg_runs": rates["pg"],
    }
