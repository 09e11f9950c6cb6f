"""Recover (``sessions salvage --output``): time to salvage a store into a new one.

For each size (50k, 100k, 200k messages; ``--quick``: 10k, 20k) one corpus store is
built through the library, checkpointed and closed, then recovered in four ways:

* ``sql, undamaged``: the SQL path on an intact copy (no page scan is needed);
* ``raw sqlite3``: the fastest equivalent by hand, for comparison: ATTACH the source to
  a migrated empty store, ``INSERT ... SELECT`` the three tables with the FTS triggers
  dropped, ``'rebuild'`` both indexes, re-create the triggers, COMMIT. It cannot salvage
  anything (on a damaged page it fails with SQLITE_CORRUPT); it shows what the row-by-row
  reading, the checks and the integrity check cost;
* ``sql, 1 damaged leaf``: one ``messages`` leaf in the middle overwritten with random
  bytes: the SQL scan fails, resumes past the page, and the page scanner reads only the
  leaves around the gap;
* ``scanner, NOTADB``: the header's magic string overwritten, so SQLite cannot open the
  file and every row comes from the page scanner.

Each line gives the wall and CPU time (CPU is the steadier figure on a shared machine:
SQLite runs in-process), messages per second, and where the time went: reading and
inserting rows, rebuilding the two FTS indexes, and checking the new store (the last two
are the same work on every line). Nothing is asserted.

    python benchmarks/bench_recover.py [--quick] [--runs N] [--json FILE]
"""

from __future__ import annotations

import gc
import random
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from _common import (
    environment,
    fill,
    make_corpus,
    new_store,
    parser,
    raw_connect,
    run_main,
    session_ids,
    store_db,
    workspace,
    write_json,
)

from hermes_repo.engine import DB_NAME
from hermes_repo.salvage import ProgressEvent, salvage
from hermes_repo.salvage.pagescan import PageSource, Scanner
from hermes_repo.schema import fts
from hermes_repo.store import StateStore

NAME = "recover"
CASES = ("sql, undamaged", "raw sqlite3", "sql, 1 damaged leaf", "scanner, NOTADB")


def checkpoint_truncate(db: Path) -> None:
    con = raw_connect(db)
    try:
        busy = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        assert not busy, "the store is still open somewhere"
    finally:
        con.close()


def damage_middle_leaf(db: Path) -> int:
    with PageSource(db) as src:
        walk = Scanner(src).walk("messages")
        assert walk is not None
        pgno = walk.leaves[len(walk.leaves) // 2].pgno
        size = src.page_size
    with open(db, "r+b") as f:
        f.seek((pgno - 1) * size)
        f.write(random.Random(pgno).randbytes(size))
    return pgno


def damage_header(db: Path) -> None:
    with open(db, "r+b") as f:
        f.write(b"NOT A DATABASE!\0")


def raw_recover(source: Path, template: Path, output: Path) -> int:
    """The hand-written equivalent on an intact file; returns the messages copied."""
    shutil.copyfile(template, output)
    con = raw_connect(output)
    try:
        con.execute("ATTACH DATABASE ? AS src", (str(source),))
        con.execute("BEGIN IMMEDIATE")
        for name in fts.TRIGGER_NAMES:
            con.execute(f"DROP TRIGGER IF EXISTS {name}")
        for table in ("sessions", "messages", "state_meta"):
            con.execute(f"INSERT INTO main.{table} SELECT * FROM src.{table}")
        for ix in fts.INDEXES:
            con.execute(f"INSERT INTO {ix.name}({ix.name}) VALUES ('rebuild')")
        for statement in fts.trigger_statements():
            con.execute(statement)
        con.execute("COMMIT")
        n = int(con.execute("SELECT count(*) FROM messages").fetchone()[0])
        con.execute("DETACH DATABASE src")
    finally:
        con.close()
    return n


PHASES = ("copy", "read", "scan", "write", "index", "verify")


def timed_recover(source: Path, output: Path) -> tuple[float, float, dict[str, float], Any]:
    """(wall seconds, CPU seconds, seconds per phase, result) of one recover."""
    starts: dict[str, float] = {}

    def progress(event: ProgressEvent) -> None:
        starts.setdefault(event.phase, time.perf_counter())

    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    result = salvage(source, output, progress=progress)
    t1, c1 = time.perf_counter(), time.process_time()
    order = sorted(starts.items(), key=lambda kv: kv[1])
    phases = {
        name: (order[i + 1][1] if i + 1 < len(order) else t1) - at
        for i, (name, at) in enumerate(order)
    }
    return t1 - t0, c1 - c0, phases, result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="*", help="message counts (default 50k 100k 200k)")
    args = p.parse_args(argv)
    sizes = sorted(args.sizes or ([10_000, 20_000] if args.quick else [50_000, 100_000, 200_000]))
    runs = args.runs or (1 if args.quick else 2)
    corpus = make_corpus(args)
    rows: list[dict[str, Any]] = []

    with workspace() as ws:
        home = ws.home("source")
        store = new_store(home, session_ids())
        template_home = ws.home("template")
        StateStore.open(template_home).close()  # migrated and empty, for the raw side
        template = template_home / DB_NAME
        have = 0
        for size in sizes:
            fill(store, corpus, size - have, session_ids(), seed_offset=have)
            have = size
            store.close()
            checkpoint_truncate(store_db(store))
            intact = ws.root / f"intact-{size}.db"
            shutil.copyfile(store_db(store), intact)
            db_mb = intact.stat().st_size / 1e6
            store = StateStore.open(home)

            samples: dict[str, list[tuple[float, float, dict[str, float]]]] = {c: [] for c in CASES}
            lost: dict[str, int] = {}
            # Interleaved (case by case, run after run), so a noisy neighbour spreads
            # over every case instead of skewing one.
            for run in range(runs):
                for case in CASES:
                    work = ws.root / f"run-{size}-{run}-{case.split(',')[0]}"
                    work.mkdir()
                    src = work / "src" / "state.db"
                    src.parent.mkdir()
                    shutil.copyfile(intact, src)
                    out = work / "out" / "state.db"
                    if case == "raw sqlite3":
                        out.parent.mkdir()
                        gc.collect()
                        t0, c0 = time.perf_counter(), time.process_time()
                        n = raw_recover(src, template, out)
                        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                        samples[case].append((wall, cpu, {}))
                        assert n == size, n
                    else:
                        if case == "sql, 1 damaged leaf":
                            damage_middle_leaf(src)
                        elif case == "scanner, NOTADB":
                            damage_header(src)
                        wall, cpu, phases, result = timed_recover(src, out)
                        samples[case].append((wall, cpu, phases))
                        lost[case] = size - result.after["messages"]
                    shutil.rmtree(work, ignore_errors=True)
            for case in CASES:
                runs_of = samples[case]
                wall = statistics.median(s[0] for s in runs_of)
                cpu = statistics.median(s[1] for s in runs_of)
                phases = {
                    ph: round(statistics.median(s[2].get(ph, 0.0) for s in runs_of), 3)
                    for ph in PHASES
                    if any(ph in s[2] for s in runs_of)
                }
                row = {
                    "messages": size,
                    "db_mb": round(db_mb, 1),
                    "case": case,
                    "seconds": round(wall, 3),
                    "cpu_seconds": round(cpu, 3),
                    "msg_per_s": round(size / wall),
                    "phases": phases,
                    "lost": lost.get(case, 0),
                    "runs": runs,
                }
                rows.append(row)
                print(
                    f"{size:>7} msgs {db_mb:7.1f} MB  {case:<20} {wall:7.2f} s wall "
                    f"{cpu:7.2f} s cpu {size / wall:9,.0f} msg/s  "
                    + " ".join(f"{k} {v:.2f}" for k, v in phases.items())
                    + (f"  lost {lost[case]}" if lost.get(case) else ""),
                    flush=True,
                )
        store.close()

    _print(rows)
    data = {
        "benchmark": NAME,
        "params": {"sizes": sizes, "runs": runs, "dataset": args.dataset},
        "environment": environment(),
        "results": rows,
    }
    write_json(args.json, data)
    return data


def _print(rows: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="recover --output (medians)", title_justify="left")
    heads = ("messages", "DB MB", "case", "wall s", "cpu s", "msg/s", "rows s", "FTS s", "check s")
    for col in (*heads, "lost"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for r in rows:
        ph = r["phases"]
        rows_s = sum(ph.get(k, 0.0) for k in ("read", "scan", "write"))
        table.add_row(
            f"{r['messages']:,}",
            f"{r['db_mb']:.1f}",
            r["case"],
            f"{r['seconds']:.2f}",
            f"{r['cpu_seconds']:.2f}",
            f"{r['msg_per_s']:,}",
            f"{rows_s:.2f}" if ph else "-",
            f"{ph['index']:.2f}" if "index" in ph else "-",
            f"{ph['verify']:.2f}" if "verify" in ph else "-",
            str(r["lost"]),
        )
    Console(width=150).print(table)
    print(
        "rows s: reading (SQL and/or page scanner) and inserting; FTS s: 'rebuild' of both "
        "indexes; check s: integrity_check and foreign_key_check of the new store."
    )


if __name__ == "__main__":
    run_main(main)
