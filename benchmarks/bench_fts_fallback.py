"""What a damaged search index costs: LIKE-fallback search and the guarded rebuild.

On 200k messages of ~100 characters (``--quick``: 20k), built with ``append_many`` in
chunks of 10k:

1. **Search while the index is detached.** The index is detached the way a write that
   meets FTS damage detaches it (``fts_stale`` marker + triggers dropped, in one
   transaction), on the same open store, which then answers every search with an
   escaped LIKE scan over the canonical rows, newest first. For each query, in
   interleaved runs:

   * ``library``: ``store.search(q)`` (20 hits, snippets, SearchHit objects);
   * ``raw same SQL``: the exact statements SQLite ran for the library (BEGIN, the
     index-liveness probe, the LIKE query, COMMIT), replayed by raw DB-API;
   * ``raw LIKE``: the LIKE query a hand-written sqlite3 program would send.

   A term with few or no hits makes LIKE scan every row (the cost that matters: it is
   linear in the store's size); a common term stops after the 20 newest hits.

2. **The guarded rebuild** of both indexes at the next open
   (:func:`hermes_repo.maintenance.fts_rebuild.guarded_rebuild`: lock, holder check,
   ``quick_check``, backup, one-transaction recreate, ``'integrity-check'``), against
   raw sqlite3 running ``'rebuild'`` on both indexes in one transaction on a copy, and
   the backup API alone on another copy.

    python benchmarks/bench_fts_fallback.py [--quick] [--runs N] [--json FILE]
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    CJK3_TERM,
    COMMON_TERM,
    MID_TERM,
    SELECTIVE_TERM,
    Corpus,
    checkpoint,
    copy_db,
    environment,
    fill,
    new_store,
    parser,
    raw_connect,
    run_main,
    session_ids,
    store_db,
    trace_sql,
    workspace,
    write_json,
)

from hermes_repo.engine import create_store_engine
from hermes_repo.holders import HolderLock
from hermes_repo.maintenance.fts_rebuild import guarded_rebuild
from hermes_repo.repositories.search import like_pattern
from hermes_repo.schema import fts
from hermes_repo.schema.backup import backup_to

NAME = "fts_fallback"
LIMIT = 20
ABSENT_TERM = "nowherexyz"  # no row holds it: a full scan, the worst case

QUERIES = (
    ("no hit (full scan)", ABSENT_TERM),
    ("selective term (10 hits)", SELECTIVE_TERM),
    ("CJK 3-char substring", CJK3_TERM),
    ("mid term", MID_TERM),
    ("common term", COMMON_TERM),
)

# What a hand-written program would send for a substring search, newest first. The
# library reads the text projection (multimodal text parts, then the tool calls' text);
# on this corpus content_text and calls_text are always NULL, so both select the same rows.
RAW_LIKE = (
    "SELECT id, session_id, role, content, timestamp FROM messages"
    " WHERE active = 1 AND content LIKE ? ESCAPE '\\'"
    f" ORDER BY id DESC LIMIT {LIMIT}"
)


@dataclass
class Case:
    label: str
    query: str
    hits: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[float]] = field(default_factory=dict)
    statements: list[str] = field(default_factory=list)

    def ms(self, variant: str) -> float:
        return statistics.median(self.samples[variant]) / self.calls[variant] * 1000.0


def _detach(store: Any) -> None:
    """Detach the index exactly as StateStore.write does when a write meets damage."""

    def work(uow: Any) -> None:
        fts.detach(uow.orm.connection(), index=None, error="benchmark: detached on purpose")

    store.write(work)


def _search_cases(store: Any, raw_path: Path, runs: int, budget: float) -> list[Case]:
    con = raw_connect(raw_path)
    cur = con.cursor()

    def raw_like(pattern: str) -> list[tuple[Any, ...]]:
        cur.execute("BEGIN")
        try:
            return cur.execute(RAW_LIKE, (pattern,)).fetchall()
        finally:
            cur.execute("COMMIT")

    def raw_replay(stmts: list[str]) -> list[tuple[Any, ...]]:
        rows: list[tuple[Any, ...]] = []
        for sql in stmts:
            out = cur.execute(sql).fetchall()
            if out:
                rows = out
        return rows

    cases = [Case(label, q) for label, q in QUERIES]
    fns: dict[str, dict[str, Any]] = {}
    for case in cases:
        q = case.query
        store.search(q, limit=LIMIT)  # warm-up: the liveness probe notices the detach
        with trace_sql(store) as seen:
            lib_hits = store.search(q, limit=LIMIT)
        case.statements = list(seen)
        assert any("LIKE" in s for s in case.statements), "the search did not fall back"
        assert not any("MATCH" in s for s in case.statements), "the search used the index"
        pattern = like_pattern(q)
        raw_ids = [r[0] for r in raw_like(pattern)]
        assert [h.message_id for h in lib_hits] == raw_ids, case.label
        case.hits = con.execute(
            "SELECT count(*) FROM messages WHERE content LIKE ? ESCAPE '\\'", (pattern,)
        ).fetchone()[0]
        v: dict[str, Any] = {
            "library": lambda q=q: store.search(q, limit=LIMIT),
            "raw same SQL": lambda st=case.statements: raw_replay(st),
            "raw LIKE": lambda p=pattern: raw_like(p),
        }
        fns[case.label] = v
        for name, fn in v.items():  # calls per sample: about `budget` seconds each
            fn()
            t = time.perf_counter()
            fn()
            one = max(time.perf_counter() - t, 1e-6)
            case.calls[name] = max(1, min(500, math.ceil(budget / one)))
            case.samples[name] = []

    for _ in range(runs):
        for case in cases:
            for name, fn in fns[case.label].items():
                n = case.calls[name]
                gc.collect()
                t = time.perf_counter()
                for _ in range(n):
                    fn()
                case.samples[name].append(time.perf_counter() - t)
    con.close()
    return cases


def _rebuild_once(src: Path, work: Path) -> dict[str, float]:
    """One guarded rebuild of a copy of ``src``, and the raw baselines on other copies."""
    lib_db = work / "lib" / "state.db"
    copy_db(src, lib_db)
    engine = create_store_engine(lib_db)
    try:
        t = time.perf_counter()
        outcome = guarded_rebuild(engine, lib_db, HolderLock(lib_db), automatic=False)
        guarded = time.perf_counter() - t
        assert outcome.ran and outcome.ok, outcome.reason
        t = time.perf_counter()
        backup_to(engine, work / "backup-alone.bak")
        backup = time.perf_counter() - t
    finally:
        engine.dispose()

    raw_db = work / "raw" / "state.db"
    copy_db(src, raw_db)
    con = raw_connect(raw_db)
    try:
        t = time.perf_counter()
        con.execute("BEGIN IMMEDIATE")
        for ix in fts.INDEXES:
            con.execute(f"INSERT INTO {ix.name}({ix.name}) VALUES ('rebuild')")
        con.execute("COMMIT")
        raw_rebuild = time.perf_counter() - t
        t = time.perf_counter()
        con.execute("BEGIN")
        for ix in fts.INDEXES:
            con.execute(f"INSERT INTO {ix.name}({ix.name}, rank) VALUES ('integrity-check', 1)")
        con.execute("ROLLBACK")
        raw_check = time.perf_counter() - t
    finally:
        con.close()
    return {
        "guarded_rebuild_s": guarded,
        "backup_alone_s": backup,
        "raw_rebuild_s": raw_rebuild,
        "raw_integrity_check_s": raw_check,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None, help="messages in the store")
    p.add_argument("--rebuild-runs", type=int, default=None, help="guarded rebuilds timed")
    args = p.parse_args(argv)
    size = args.size or (20_000 if args.quick else 200_000)
    runs = args.runs or (3 if args.quick else 7)
    rebuild_runs = args.rebuild_runs or (1 if args.quick else 2)
    budget = 0.02 if args.quick else 0.2  # seconds of calls per timed sample

    with workspace() as ws:
        sessions = session_ids()
        store = new_store(ws.home("lib"), sessions)
        t0 = time.perf_counter()
        fill(store, Corpus(), size, sessions, chunk=10_000)
        build_s = time.perf_counter() - t0
        _detach(store)
        checkpoint(store_db(store))
        stale_db = ws.root / "stale" / "state.db"
        copy_db(store_db(store), stale_db)  # detached, for the rebuilds below
        db_bytes = stale_db.stat().st_size
        cases = _search_cases(store, stale_db, runs, budget)
        store.close()

        rebuilds = []
        for i in range(rebuild_runs):
            rebuilds.append(_rebuild_once(stale_db, ws.root / f"rebuild-{i}"))

    rebuild = {k: statistics.median(r[k] for r in rebuilds) for k in rebuilds[0]}
    print_tables(size, runs, cases, rebuild, rebuild_runs, db_bytes)
    data = {
        "benchmark": NAME,
        "params": {
            "size": size,
            "runs": runs,
            "rebuild_runs": rebuild_runs,
            "limit": LIMIT,
            "build_seconds": round(build_s, 1),
            "db_bytes": db_bytes,
        },
        "environment": environment(),
        "results": [
            {
                "name": c.label,
                "query": c.query,
                "hits": c.hits,
                "unit": "ms",
                "library_statements": c.statements,
                "ms": {name: c.ms(name) for name in c.samples},
                "calls_per_sample": c.calls,
                "samples_s": c.samples,
            }
            for c in cases
        ],
        "rebuild": {"median_s": rebuild, "runs": rebuilds},
    }
    write_json(args.json, data)
    return data


def print_tables(
    size: int,
    runs: int,
    cases: list[Case],
    rebuild: dict[str, float],
    rebuild_runs: int,
    db_bytes: int,
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    cols = ["library", "raw same SQL", "raw LIKE"]
    table = Table(
        title=(
            f"search with the index detached (LIKE fallback), {size:,} messages, "
            f"ms per query (median of {runs} interleaved runs)"
        ),
        title_justify="left",
    )
    table.add_column("query")
    table.add_column("hits", justify="right")
    for c in cols:
        table.add_column(c, justify="right")
    table.add_column("lib / raw LIKE", justify="right")
    table.add_column("lib / same SQL", justify="right")
    for case in cases:
        table.add_row(
            case.label,
            f"{case.hits:,}",
            *(f"{case.ms(c):.3f}" for c in cols),
            f"{case.ms('library') / case.ms('raw LIKE'):.2f}x",
            f"{case.ms('library') / case.ms('raw same SQL'):.2f}x",
        )
    console.print(table)

    table = Table(
        title=(
            f"guarded FTS rebuild, both indexes, {size:,} messages "
            f"({db_bytes / 2**20:.0f} MiB file), seconds (median of {rebuild_runs})"
        ),
        title_justify="left",
    )
    table.add_column("what")
    table.add_column("s", justify="right")
    table.add_column("msg/s", justify="right")
    rows = (
        ("library: guarded_rebuild (all guards, backup, recreate, check)", "guarded_rebuild_s"),
        ("raw: 'rebuild' of both indexes, one transaction", "raw_rebuild_s"),
        ("raw: 'integrity-check' (rank 1) of both indexes", "raw_integrity_check_s"),
        ("backup API alone", "backup_alone_s"),
    )
    for label, key in rows:
        table.add_row(label, f"{rebuild[key]:.2f}", f"{size / rebuild[key]:,.0f}")
    console.print(table)


if __name__ == "__main__":
    run_main(main)
