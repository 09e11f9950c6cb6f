"""Search on PostgreSQL, 200k messages (``--quick``: 20k): PgSearchRepository vs raw psycopg.

The corpus is the one of bench_search.py (``_common.Corpus``), copied into a throwaway
database (``pgsearch_bench_*``) with the store's tables and revision 0004's search
objects. Queries: a selective term (10 hits), a mid term (2.5% of rows), a common term
(75% of rows: more than RANK_CUTOFF hits, so newest first), a 3-character CJK substring
(pg_trgm), a 4-character CJK substring (pg_trgm) and a 2-character CJK query (too short
for trigrams: a scan). For each query, interleaved in one process:

* ``library``: ``PgSearchRepository(conn).search(q)`` on an SQLAlchemy connection (20
  hits, snippets, SearchHit objects);
* ``raw same SQL``: the exact statements and parameters the library sent, run on a raw
  psycopg connection (what SQLAlchemy and the Python around it cost);
* ``server``: planning plus execution time of those statements as EXPLAIN ANALYZE
  reports it (best of 3), the database's own cost without the round trips.

    python benchmarks/bench_search_pg.py [--url URL] [--quick] [--runs N] [--json FILE]

``--url`` (or ``HERMES_TEST_PG_URL``) names any database of the server; the benchmark
creates and drops its own.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter
from typing import Any

import psycopg
from _common import (
    CJK2_TERM,
    CJK3_TERM,
    COMMON_TERM,
    MID_TERM,
    SELECTIVE_TERM,
    Corpus,
    environment,
    parser,
    run_main,
    session_ids,
    write_json,
)
from sqlalchemy import create_engine, event, make_url, text
from sqlalchemy.pool import NullPool

from hermes_repo.codec import message_to_row
from hermes_repo.models import Base
from hermes_repo.repositories.search_pg import PgSearchRepository
from hermes_repo.schema import pg_search

NAME = "search_pg"
LIMIT = 20
COLUMNS = ("session_id", "uid", "role", "content", "content_text", "tool_name", "timestamp")


def _cjk4(corpus: Corpus, messages: list[dict[str, Any]]) -> str:
    """The most frequent 4-character CJK run made of two frequent 2-character words."""
    words = [w for w in corpus.cjk_vocab[:40] if len(w) == 2]
    counts: Counter[str] = Counter()
    candidates = {a + b for a in words[:8] for b in words[:8] if a != b}
    for m in messages:
        content = m["content"]
        if isinstance(content, str) and "，" in content:
            for c in candidates:
                if c in content:
                    counts[c] += 1
    return counts.most_common(1)[0][0]


def _fill(engine: Any, url: str, size: int) -> tuple[str, int]:
    corpus = Corpus()
    messages = corpus.messages(size)
    sessions = session_ids()
    Base.metadata.create_all(engine)
    with engine.begin() as conn:
        for i, sid in enumerate(sessions):
            conn.execute(
                text("INSERT INTO sessions (id, started_at) VALUES (:id, :t)"),
                {"id": sid, "t": 1_700_000_000.0 + i},
            )
    copy_sql = f"COPY messages ({', '.join(COLUMNS)}) FROM STDIN"
    with psycopg.connect(url) as raw, raw.cursor() as cur, cur.copy(copy_sql) as copy:
        for j, msg in enumerate(messages):
            row = message_to_row(sessions[(j // 20) % len(sessions)], msg)
            copy.write_row([row.get(c) for c in COLUMNS])
    t0 = time.perf_counter()
    with engine.begin() as conn:
        # The statements are templates: each extension's schema (installed first when
        # missing, as revision 0004 does) fills its mark before they reach the server.
        schemas = pg_search.extension_schemas(conn)
        for statement in pg_search.render(pg_search.CREATE_STATEMENTS, schemas):
            conn.execute(text(statement))
    ddl_s = time.perf_counter() - t0
    with psycopg.connect(url, autocommit=True) as raw:
        raw.execute("VACUUM ANALYZE messages")
    print(f"revision 0004 DDL on {size} rows (tsvector column + 3 indexes): {ddl_s:.1f} s")
    return _cjk4(corpus, messages), size


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--url", default=os.environ.get("HERMES_TEST_PG_URL"))
    p.add_argument("--size", type=int, default=None, help="messages in the database")
    args = p.parse_args(argv)
    if not args.url:
        raise SystemExit("give --url postgresql+psycopg://user@host:port/db or HERMES_TEST_PG_URL")
    size = args.size or (20_000 if args.quick else 200_000)
    runs = args.runs or (3 if args.quick else 7)
    budget = 0.05 if args.quick else 0.2  # seconds of calls per timed sample

    base = make_url(args.url)
    name = f"pgsearch_bench_{os.getpid()}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    url = base.set(database=name)
    raw_url = url.set(drivername="postgresql").render_as_string(hide_password=False)
    engine = create_engine(url, poolclass=NullPool)
    results: list[dict[str, Any]] = []
    try:
        cjk4, _ = _fill(engine, raw_url, size)
        queries = [
            ("selective term", SELECTIVE_TERM),
            ("mid term", MID_TERM),
            ("common term", COMMON_TERM),
            ("CJK 3-char", CJK3_TERM),
            ("CJK 4-char", cjk4),
            ("CJK 2-char", CJK2_TERM),
        ]
        sent: list[tuple[str, Any]] = []
        with engine.connect() as conn, psycopg.connect(raw_url) as raw:
            event.listen(
                conn, "before_cursor_execute", lambda *a: sent.append((a[2], a[3])), named=False
            )
            repo = PgSearchRepository(conn)
            cur = raw.cursor()

            def library(q: str) -> int:
                hits = repo.search(q, limit=LIMIT)
                conn.rollback()
                return len(hits)

            def replay(stmts: list[tuple[str, Any]]) -> int:
                n = 0
                for sql, params in stmts:
                    cur.execute(sql, params)
                    n = len(cur.fetchall())
                raw.rollback()
                return n

            for label, q in queries:
                sent.clear()
                library(q)
                stmts = list(sent)
                everything = len(repo.search(q, limit=size))
                conn.rollback()
                replay(stmts)  # the same statements run raw
                calls = max(1, int(budget / max(_once(lambda q=q: library(q)), 1e-5)))
                lib, rawt = [], []
                for _ in range(runs):
                    lib.append(_many(lambda q=q: library(q), calls))
                    rawt.append(_many(lambda s=stmts: replay(s), calls))
                row = {
                    "label": label,
                    "query": q,
                    "hits": everything,
                    "statements": len(stmts),
                    "library_ms": statistics.median(lib) * 1000,
                    "raw_ms": statistics.median(rawt) * 1000,
                }
                row["ratio"] = row["library_ms"] / row["raw_ms"]
                per_statement = min((_server_ms(cur, stmts) for _ in range(3)), key=sum)
                row["server_ms"] = sum(per_statement)
                row["server_ms_per_statement"] = per_statement
                raw.rollback()
                results.append(row)
                print(
                    f"{label:15} {q!r:10} hits={everything:6} statements={len(stmts)}"
                    f"  library {row['library_ms']:8.3f} ms  raw {row['raw_ms']:8.3f} ms"
                    f"  library/raw {row['ratio']:.2f}  server {row['server_ms']:.3f} ms"
                    f" ({' + '.join(f'{t:.2f}' for t in per_statement)})"
                )
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()
    sel = next(r for r in results if r["label"] == "selective term")["library_ms"]
    common = next(r for r in results if r["label"] == "common term")["library_ms"]
    print(f"common / selective: {common / sel:.1f}x (target: within 10x)")
    data = {
        "benchmark": NAME,
        "params": {"size": size, "runs": runs, "limit": LIMIT},
        "environment": environment(),
        "results": results,
    }
    write_json(args.json, data)
    return data


def _server_ms(cur: Any, stmts: list[tuple[str, Any]]) -> list[float]:
    """Planning plus execution time the server reports for each statement (EXPLAIN
    ANALYZE): what the queries cost without the round trips of a loaded machine."""
    out = []
    for sql, params in stmts:
        cur.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        plan = cur.fetchone()[0][0]
        out.append(plan["Planning Time"] + plan["Execution Time"])
    return out


def _once(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _many(fn: Any, calls: int) -> float:
    """Seconds per call over ``calls`` calls."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - t0) / calls


if __name__ == "__main__":
    run_main(main)
