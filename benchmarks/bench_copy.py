"""Throughput of ``copy_store`` (``hermes-repo db copy``), against a raw SQL copy.

A store of N messages (sessions of 200, text of varied words) is built once by the
library. Then, alternating in one process, each into a fresh store built by the
migrations (both full-text indexes and their triggers live):

* ``library``: :func:`hermes_repo.transfer.copy.copy_store` (batches of 1000, each read
  and compared with the target's rows, then written in its own transaction);
* ``raw``: the same batches of 1000 rows read and inserted by the same multi-row
  INSERTs on the driver, a transaction each: the floor for a copy between databases;
* ``raw_attach``: ``ATTACH`` and one ``INSERT INTO ... SELECT`` per table in one
  transaction: possible only from SQLite to SQLite, shown for scale.

With ``--pg URL`` (a server where databases may be created) the library also copies
into a new PostgreSQL database whose tables are the models' (``create_all``, 64-bit
integers, no full-text columns), and raw psycopg sending the same multi-row INSERTs in
batches of 1000 runs alternately with it.

Peak Python memory of a copy (tracemalloc, in a child process per size, untimed) shows
whether memory stays flat as the store grows.

    python benchmarks/bench_copy.py --messages 200000 --repeats 2 --memory 20000,200000
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, Integer, MetaData, create_engine, select, text
from sqlalchemy.engine import make_url

from hermes_repo.engine import select_driver
from hermes_repo.models import Base, messages_table, sessions_table, state_meta_table
from hermes_repo.store import StateStore
from hermes_repo.transfer.copy import copy_store
from hermes_repo.uow import UnitOfWork

PER_SESSION = 200
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "checkpoint",
    "retry",
    "spool",
    "index",
    "search",
    "検索",
    "会話",
    "wal",
]


def build_source(home: Path, messages: int) -> None:
    rnd = random.Random(11)
    with StateStore.open(home) as store:
        for first in range(0, messages, PER_SESSION * 10):
            with store.unit_of_work() as uow:
                for s in range(first, min(first + PER_SESSION * 10, messages), PER_SESSION):
                    sid = f"s{s // PER_SESSION:05d}"
                    uow.sessions.create("cli", id=sid)
                    uow.messages.append_many(
                        sid,
                        (
                            {
                                "role": "user" if i % 2 else "assistant",
                                "content": " ".join(rnd.choices(WORDS, k=rnd.randint(5, 40))),
                            }
                            for i in range(min(PER_SESSION, messages - s))
                        ),
                    )
                uow.commit()


def library_sqlite(src: Path, work: Path) -> float:
    dst = work / f"lib-{uuid.uuid4().hex[:6]}"
    with StateStore.open(src) as source, StateStore.open(dst) as target:
        started = time.perf_counter()
        copy_store(source, target)
        elapsed = time.perf_counter() - started
    shutil.rmtree(dst)
    return elapsed


def _raw_target(work: Path, prefix: str) -> tuple[Path, Any]:
    dst = work / f"{prefix}-{uuid.uuid4().hex[:6]}"
    StateStore.open(dst).close()  # the same migrated schema, triggers included
    conn = select_driver().module.connect(str(dst / "state.db"), isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"ATTACH DATABASE '{src_path(work)}' AS src")
    return dst, conn


def src_path(work: Path) -> Path:
    return work / "source" / "state.db"


def raw_sqlite(src: Path, work: Path) -> float:
    """Batches of 1000 rows read, then inserted by multi-row INSERTs of 500 rows (the
    statements the library sends), a transaction each: the shape any copy between two
    databases has. (executemany, a statement per row, ran at 1,357 msg/s here: FTS5
    flushes its pending index data at each statement.)"""
    dst, conn = _raw_target(work, "raw")
    try:
        started = time.perf_counter()
        for table, key in (("sessions", "id"), ("messages", "id"), ("state_meta", "key")):
            after: Any = "" if key != "id" or table == "sessions" else 0
            while True:
                rows = conn.execute(
                    f"SELECT * FROM src.{table} WHERE {key} > ? ORDER BY {key} LIMIT 1000",
                    (after,),
                ).fetchall()
                if not rows:
                    break
                conn.execute("BEGIN IMMEDIATE")
                for sql, params in _multi_row(f"main.{table}", rows, "?"):
                    conn.execute(sql, params)
                conn.execute("COMMIT")
                after = rows[-1][0]
        elapsed = time.perf_counter() - started
    finally:
        conn.close()
    shutil.rmtree(dst)
    return elapsed


def _multi_row(table: str, rows: list[Any], mark: str) -> list[tuple[str, tuple[Any, ...]]]:
    one = "(" + ", ".join([mark] * len(rows[0])) + ")"
    out = []
    for start in range(0, len(rows), 500):
        chunk = rows[start : start + 500]
        params = tuple(v for row in chunk for v in row)
        out.append((f"INSERT INTO {table} VALUES " + ", ".join([one] * len(chunk)), params))
    return out


def raw_attach(src: Path, work: Path) -> float:
    """One INSERT ... SELECT per table from the attached source: SQLite to SQLite only."""
    dst, conn = _raw_target(work, "attach")
    try:
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        for table in ("sessions", "messages", "state_meta"):
            conn.execute(f"INSERT INTO main.{table} SELECT * FROM src.{table}")
        conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
    finally:
        conn.close()
    shutil.rmtree(dst)
    return elapsed


class _PgEnd:
    def __init__(self, url: str) -> None:
        self.engine = create_engine(url)

    def read(self, work: Any) -> Any:
        with self.engine.connect() as conn, conn.begin():
            return work(conn)

    def write(self, work: Any) -> Any:
        with UnitOfWork(self.engine) as uow:
            result = work(uow)
            uow.commit()
            return result


def _pg_database(server: str) -> tuple[str, Any]:
    name = f"copy_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(server).set(database=name).render_as_string(hide_password=False)
    metadata = MetaData()
    for table in Base.metadata.sorted_tables:
        wide = table.to_metadata(metadata)
        for column in wide.columns:
            if isinstance(column.type, Integer):
                column.type = BigInteger()
    engine = create_engine(url)
    metadata.create_all(engine)
    engine.dispose()
    return url, lambda: _drop(admin, name)


def _drop(admin: Any, name: str) -> None:
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def library_pg(src: Path, server: str) -> float:
    url, drop = _pg_database(server)
    target = _PgEnd(url)
    try:
        with StateStore.open(src) as source:
            started = time.perf_counter()
            copy_store(source, target)
            return time.perf_counter() - started
    finally:
        target.engine.dispose()
        drop()


def raw_pg(src: Path, server: str) -> float:
    url, drop = _pg_database(server)
    import psycopg  # benchmark only

    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    try:
        with StateStore.open(src) as source, psycopg.connect(plain) as conn:
            started = time.perf_counter()
            for table in (sessions_table, messages_table, state_meta_table):
                key = table.primary_key.columns[0]
                after: Any = None
                while True:
                    stmt = select(table).order_by(key).limit(1000)
                    if after is not None:
                        stmt = stmt.where(key > after)
                    rows = source.read(lambda c, stmt=stmt: [tuple(r) for r in c.execute(stmt)])
                    if not rows:
                        break
                    with conn.transaction(), conn.cursor() as cur:
                        for sql, params in _multi_row(table.name, rows, "%s"):
                            cur.execute(sql, params)
                    after = rows[-1][0]
            return time.perf_counter() - started
    finally:
        drop()


def memory_child(src: str, messages: str) -> None:
    work = Path(tempfile.mkdtemp(prefix="copy-mem-"))
    with StateStore.open(src) as source, StateStore.open(work / "dst") as target:
        tracemalloc.start()
        copy_store(source, target)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    shutil.rmtree(work)
    print(json.dumps({"messages": int(messages), "peak_mib": round(peak / 2**20, 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--pg", help="PostgreSQL server URL (databases are created)")
    parser.add_argument("--memory", default="", help="sizes for the memory runs, e.g. 20000,200000")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        memory_child(*args.child)
        return
    work = Path(tempfile.mkdtemp(prefix="copy-bench-"))
    try:
        src = work / "source"
        started = time.perf_counter()
        build_source(src, args.messages)
        print(f"built {args.messages} messages in {time.perf_counter() - started:.1f} s")
        runs: dict[str, list[float]] = {
            "library": [],
            "raw": [],
            "raw_attach": [],
            "library_pg": [],
            "raw_pg": [],
        }
        for _ in range(args.repeats):
            runs["library"].append(library_sqlite(src, work))
            runs["raw"].append(raw_sqlite(src, work))
            runs["raw_attach"].append(raw_attach(src, work))
            if args.pg:
                runs["library_pg"].append(library_pg(src, args.pg))
                runs["raw_pg"].append(raw_pg(src, args.pg))
        for name, times in runs.items():
            if times:
                best = min(times)
                print(
                    f"{name:>10}: {args.messages / best:>9,.0f} msg/s (best of "
                    f"{len(times)}: {', '.join(f'{t:.1f}' for t in times)} s)"
                )
        for size in filter(None, args.memory.split(",")):
            home = work / f"mem-{size}"
            build_source(home, int(size))
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(home), size],
                capture_output=True,
                text=True,
                check=True,
            )
            print(out.stdout.strip())
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
