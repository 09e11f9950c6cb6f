"""Import throughput of a Hermes Agent state.db, against a raw ``INSERT ... SELECT`` copy.

A Hermes file in its schema 16 layout (the DDL of ``tests/fixtures/hermes``) is generated
with N messages. ``--corpus realistic`` (the default) takes the rows of
:mod:`corpus_realistic` (348 sessions, one of 10% of the rows; ~37% tool outputs of
1-16 KB, CJK, tool calls with JSON arguments) and adds what Hermes writes beside them
(platform message ids, reasoning, observed/active flags: values that go to ``extra``);
``--corpus small`` is the older shape (sessions of 200 short messages). Then, each into a
fresh store built by the migrations:

* ``library``: ``StateStore.import_hermes_db`` (units of several sessions, every value
  mapped or kept in ``extra``, uids, counters recomputed);
* ``raw``: one ``ATTACH`` and ``INSERT INTO messages (...) SELECT ... FROM src.messages``
  on the store's own driver: the floor for copying the same rows with the same indexes
  and full-text triggers, without any mapping.

Each side reports its wall clock and the CPU seconds of this process (SQLite's work runs
in it): on a machine shared with other work the CPU time is the figure to compare.

Peak memory of the import is measured with tracemalloc in a separate run per size
(tracemalloc slows Python down, so the timed runs are without it): it stays flat as the
file grows because the import holds a bounded batch of sessions at a time.

    python benchmarks/bench_hermes_import.py --messages 200000 --memory 50000,200000
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

from hermes_repo.engine import select_driver
from hermes_repo.store import StateStore

SCHEMA = (
    Path(__file__).resolve().parents[1]
    / "tests"
    / "fixtures"
    / "hermes"
    / "hermes_state_v16-5e01a5d.schema.sql"
)
PER_SESSION = 200


def _schema(path: Path) -> sqlite3.Connection:
    """A Hermes schema 16 file (FTS tables created, triggers dropped for speed: the
    import never reads them)."""
    conn = sqlite3.connect(path)
    # The dump's sqlite_sequence line is SQLite's own table (made by AUTOINCREMENT).
    ddl = SCHEMA.read_text().replace("CREATE TABLE sqlite_sequence(name,seq);", "")
    conn.executescript(ddl)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        conn.execute(f'DROP TRIGGER "{name}"')
    return conn


def generate_realistic(path: Path, messages: int) -> None:
    """A Hermes file holding the realistic corpus' rows, as Hermes writes them."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from corpus_realistic import RealisticCorpus, layout

    conn = _schema(path)
    corpus = RealisticCorpus()
    with conn:
        for s, (sid, msgs) in enumerate(corpus.conversations(layout(messages / 200_000))):
            sid = f"20241027_{s:06d}_{s:06x}"
            conn.execute(
                "INSERT INTO sessions (id, source, model, started_at, title, cwd, "
                "input_tokens, output_tokens) VALUES (?, 'cli', 'm', ?, ?, '/srv', 10, 20)",
                (sid, msgs[0]["timestamp"] if msgs else 0.0, f"session {s}"),
            )
            rows = []
            for i, m in enumerate(msgs):
                calls = m.get("tool_calls")
                rows.append(
                    (
                        sid,
                        m["role"],
                        m.get("content"),
                        m.get("tool_call_id"),
                        json.dumps(calls) if calls else None,
                        m.get("name") or m.get("tool_name"),
                        m["timestamp"],
                        "thinking about it" if calls else None,
                        f"p{i}" if m["role"] == "user" else None,
                        m.get("finish_reason"),
                    )
                )
            conn.executemany(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, "
                "tool_name, timestamp, reasoning, platform_message_id, finish_reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
    conn.close()


def generate(path: Path, messages: int, seed: int = 7, corpus: str = "small") -> None:
    """A Hermes-shaped file with ``messages`` rows of ``corpus`` (realistic or small)."""
    if corpus == "realistic":
        generate_realistic(path, messages)
        return
    rnd = random.Random(seed)
    conn = _schema(path)
    words = ["deploy", "server", "log", "config", "release", "build", "部署", "日志", "サーバー"]
    t0 = 1772360000.0
    n_sessions = max(1, messages // PER_SESSION)
    with conn:
        for s in range(n_sessions):
            sid = f"20260301_{s:06d}_{s:06x}"
            conn.execute(
                "INSERT INTO sessions (id, source, model, started_at, title, cwd, "
                "input_tokens, output_tokens) VALUES (?, 'cli', 'm', ?, ?, '/srv', 10, 20)",
                (sid, t0 + s * 1000, f"session {s}"),
            )
            rows = []
            for i in range(PER_SESSION):
                role = ("user", "assistant", "tool")[i % 3]
                text = " ".join(rnd.choice(words) for _ in range(rnd.randint(5, 60)))
                calls = (
                    json.dumps(
                        [
                            {
                                "id": f"c{s}_{i}",
                                "type": "function",
                                "function": {"name": "terminal", "arguments": "{}"},
                            }
                        ]
                    )
                    if role == "assistant"
                    else None
                )
                rows.append(
                    (
                        sid,
                        role,
                        text,
                        f"c{s}_{i - 1}" if role == "tool" else None,
                        calls,
                        "terminal" if role == "tool" else None,
                        t0 + s * 1000 + i,
                        "thinking" if role == "assistant" else None,
                        f"p{i}" if role == "user" else None,
                    )
                )
            conn.executemany(
                "INSERT INTO messages (session_id, role, content, tool_call_id, tool_calls, "
                "tool_name, timestamp, reasoning, platform_message_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
    conn.close()


RAW_COPY = (
    "INSERT INTO sessions (id, source, model, title, started_at, input_tokens, output_tokens) "
    "SELECT id, source, model, title, started_at, input_tokens, output_tokens FROM src.sessions",
    "INSERT INTO messages (session_id, uid, role, content, tool_calls, tool_call_id, tool_name, "
    "timestamp, reasoning) SELECT session_id, 'hermes:' || session_id || ':' || id, role, "
    "content, tool_calls, tool_call_id, tool_name, timestamp, reasoning FROM src.messages "
    "ORDER BY id",
)


def raw_copy(src: Path, home: Path) -> tuple[float, float]:
    StateStore.open(home).close()  # the store's schema, from the migrations
    module = select_driver().module
    conn = module.connect(str(home / "state.db"), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("ATTACH ? AS src", (f"file:{src}?mode=ro&immutable=1",))
        start, cpu = time.perf_counter(), time.process_time()
        conn.execute("BEGIN IMMEDIATE")
        for sql in RAW_COPY:
            conn.execute(sql)
        conn.execute("COMMIT")
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        conn.close()


def library_import(src: Path, home: Path) -> tuple[float, float]:
    calls = []

    def progress(done: int, total: int) -> None:
        calls.append(done)  # what the CLI's progress bar is fed

    with StateStore.open(home) as store:
        start, cpu = time.perf_counter(), time.process_time()
        report = store.import_hermes_db(src, progress=progress)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert report.messages.imported == report.messages.read
    assert calls and calls[-1] == report.messages.read and calls == sorted(calls)
    return elapsed, cpu


def peak_memory(messages: int, corpus: str) -> int:
    """Peak Python allocations (bytes) of importing a generated file of this size."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "state.db"
        generate(src, messages, corpus=corpus)
        with StateStore.open(Path(tmp) / "home") as store:
            tracemalloc.start()
            store.import_hermes_db(src)
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--memory", default="", help="comma-separated sizes for peak memory")
    parser.add_argument("--corpus", choices=["realistic", "small"], default="realistic")
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(peak_memory(args.memory_child, args.corpus))
        return
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "hermes.db"
        t = time.perf_counter()
        generate(src, args.messages, corpus=args.corpus)
        print(
            f"generated {args.messages} messages in {time.perf_counter() - t:.1f} s "
            f"({src.stat().st_size / 2**20:.0f} MiB)"
        )
        raw = raw_copy(src, Path(tmp) / "raw")
        lib = library_import(src, Path(tmp) / "lib")
    n = args.messages
    # CPU seconds of this process beside the wall clock: on a machine shared with other
    # work the wall clock measures the neighbours too (both sides run in this process,
    # SQLite's work included).
    for name, (wall, cpu) in (("raw INSERT ... SELECT", raw), ("import_hermes_db", lib)):
        print(
            f"{name + ':':22s} {wall:7.2f} s wall, {n / wall:7,.0f} messages/s; "
            f"{cpu:7.2f} s CPU, {n / cpu:7,.0f} messages per CPU second"
        )
    print(f"import / raw: {lib[0] / raw[0]:.2f}x the wall clock, {lib[1] / raw[1]:.2f}x the CPU")
    for size in (int(s) for s in args.memory.split(",") if s):
        # A fresh process per size: one run's allocations never count for the next.
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(size), "--corpus", args.corpus],
            capture_output=True,
            text=True,
            check=True,
        )
        print(f"peak Python memory importing {size} messages: {int(out.stdout) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
