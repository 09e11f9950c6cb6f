"""PostgreSQL vs raw psycopg vs the SQLite store, interleaved in one run (issue #12).

On a throwaway database (``pgbench_<pid>``, created and dropped here) of the server that
``--url`` (or ``HERMES_TEST_PG_URL``) names, and on a SQLite store in a temporary
folder, in one process, round-robin (PostgreSQL library, raw psycopg, SQLite store):

* append, one message per transaction: ``store.append_message`` vs raw psycopg running
  the same counters UPDATE and ``INSERT ... RETURNING id`` and a commit (the library's
  SQL is captured with ``before_cursor_execute`` and must equal the raw side's, or the
  benchmark stops);
* bulk append: a unit of work appending 10k messages vs the same UPDATE and one
  ``executemany`` of the same INSERT;
* load of a 20k-message conversation vs the same SELECT and a hand-written row-to-dict
  loop returning the same dicts (compared once);
* four processes appending at once, one message per transaction: SQLite (one store
  file) vs PostgreSQL, messages per second in total (_pg_procs.py);
* with ``--search``: search on 200k messages (bench_search_pg.py, called as is).

The raw side connects with the library's connect arguments (no server-side prepared
statements, see engine_pg.py) and relies on psycopg's implicit BEGIN, like the library.

    python benchmarks/bench_pg.py [--url URL] [--quick] [--runs N] [--json FILE]
        [--dataset realistic] [--search]
"""

from __future__ import annotations

import os
from typing import Any

import bench_search_pg
import psycopg
from _common import (
    dataset_label,
    environment,
    fill,
    make_corpus,
    parser,
    run_main,
    scale_of,
    session_ids,
    workspace,
    write_json,
)
from _pg_cases import Case, Sides, append_case, bulk_case, load_case
from _pg_procs import concurrent_case
from sqlalchemy import create_engine, make_url, text
from sqlalchemy.pool import NullPool

from hermes_repo.store import StateStore

NAME = "pg"


def _server_settings(raw: Any) -> dict[str, str]:
    names = ("server_version", "fsync", "synchronous_commit", "wal_sync_method", "shared_buffers")
    out = {}
    for n in names:
        out[n] = raw.execute(f"SHOW {n}").fetchone()[0]
    raw.commit()
    return out


def _print(cases: list[Case], conc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="PostgreSQL vs raw psycopg vs SQLite store (msg/s, medians)")
    cols = ("case", "PG library", "raw psycopg", "lib/raw", "(paired)", "SQLite store", "PG/SQLite")
    for col in cols:
        t.add_column(col, justify="left" if col == "case" else "right")
    for c in cases:
        pg, raw, lite = c.rate("pg"), c.rate("raw"), c.rate("sqlite")
        t.add_row(
            c.name,
            f"{pg:,.0f}",
            f"{raw:,.0f}",
            f"{pg / raw:.2f}x",
            f"{c.paired('pg', 'raw'):.2f}x",
            f"{lite:,.0f}",
            f"{pg / lite:.2f}x",
        )
    if conc:
        pg, lite = conc["pg_msg_s"], conc["sqlite_msg_s"]
        t.add_row(conc["name"], f"{pg:,.0f}", "", "", "", f"{lite:,.0f}", f"{pg / lite:.2f}x")
    Console(width=150).print(t)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--url", default=os.environ.get("HERMES_TEST_PG_URL"))
    p.add_argument("--base", type=int, default=None, help="messages in each store first")
    p.add_argument("--per-run", type=int, default=None, help="appends per timed sample")
    p.add_argument("--bulk", type=int, default=None, help="messages of the bulk unit")
    p.add_argument("--load", type=int, default=None, help="messages of the loaded session")
    p.add_argument("--conc", type=int, default=None, help="messages of the 4 writers, total")
    p.add_argument("--search", action="store_true", help="also run bench_search_pg.py")
    args = p.parse_args(argv)
    if not args.url:
        raise SystemExit("give --url postgresql+psycopg://user@host:port/db or HERMES_TEST_PG_URL")
    quick = args.quick
    base = args.base if args.base is not None else (2_000 if quick else 20_000)
    # Short samples, many runs: the machine's load drifts less within a run's three.
    per_run = args.per_run or (50 if quick else 60)
    bulk = args.bulk or (1_000 if quick else 10_000)
    if args.load:
        load = args.load
    elif args.dataset == "realistic":
        load = max(100, int(20_000 * scale_of(args)))
    else:
        load = 2_000 if quick else 20_000
    conc = args.conc or (400 if quick else 2_000)
    runs = args.runs or (3 if quick else 7)
    append_runs = args.runs or (5 if quick else 25)
    corpus = make_corpus(args)
    label = dataset_label(args)

    admin_url = make_url(args.url)
    name = f"pgbench_{os.getpid()}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    url = admin_url.set(database=name)
    url_s = url.render_as_string(hide_password=False)
    raw_url = url.set(drivername="postgresql").render_as_string(hide_password=False)
    cases: list[Case] = []
    concurrent: dict[str, Any] = {}
    settings: dict[str, str] = {}
    try:
        with workspace() as ws:
            pg = StateStore.open(ws.home("pg"), url=url_s)
            lite = StateStore.open(ws.home("sqlite"))
            raw = psycopg.connect(raw_url, prepare_threshold=None, application_name="hermes_repo")
            settings = _server_settings(raw)
            sides = Sides(pg, raw, lite)
            try:
                ids = session_ids()
                sides.create_sessions(ids)
                if base:
                    for store in (pg, lite):
                        fill(store, corpus, base, ids)
                msgs = corpus.messages(per_run * append_runs + 1, seed_offset=101, plant=False)
                cases.append(append_case(sides, msgs, per_run, append_runs, label))
                msgs = corpus.messages(bulk, seed_offset=202, plant=False)
                cases.append(bulk_case(sides, msgs, runs, label))
                msgs = corpus.messages(load, seed_offset=303, plant=False)
                cases.append(load_case(sides, msgs, runs, 3 if not quick else 2, label))
                msgs = corpus.messages(conc, seed_offset=404, plant=False)
                concurrent = concurrent_case(lite, pg, url_s, ws.root, msgs, max(3, runs // 2))
            finally:
                raw.close()
                pg.close()
                lite.close()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
    _print(cases, concurrent)
    print(f"server: {settings}; machine shared with other work: medians of interleaved runs")
    search = None
    if args.search:
        search = bench_search_pg.main(["--url", args.url] + (["--quick"] if quick else []))
    data = {
        "benchmark": NAME,
        "params": {
            "base": base,
            "per_run": per_run,
            "bulk": bulk,
            "load": load,
            "concurrent": conc,
            "runs": runs,
            "dataset": label,
        },
        "environment": {**environment(), "postgresql": settings},
        "results": [c.as_dict() for c in cases] + ([concurrent] if concurrent else []),
        "search": search,
    }
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
