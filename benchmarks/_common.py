"""Shared pieces of the benchmarks: corpus, stores, raw connections, timing, output.

Every benchmark runs the library and raw DB-API code side by side, in the same process
and the same run, on copies of one store built by the migrations. The raw side uses the
same DB-API module as the library (``hermes_repo.engine.select_driver().module``), the
same per-connection PRAGMAs as ``engine._on_connect`` and explicit ``BEGIN`` /
``BEGIN IMMEDIATE`` / ``COMMIT``, so the difference between the two columns is what the
layer itself costs (Python, SQLAlchemy, validation, dict building), not a different
SQLite, schema or durability setting.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import re
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from itertools import chain
from pathlib import Path
from random import Random
from typing import Any

import sqlalchemy
from corpus_realistic import Layout, RealisticCorpus, layout
from sqlalchemy import event

from hermes_repo.codec import message_to_row
from hermes_repo.engine import BUSY_TIMEOUT_MS, DB_NAME, Driver, select_driver
from hermes_repo.models import messages_table
from hermes_repo.repositories.messages import (
    APPEND_ROWS_PER_INSERT,
    multi_insert_parts,
    multi_insert_sql,
)
from hermes_repo.schema.fts.merge import MERGE_STATEMENTS, MergeCadence
from hermes_repo.store import StateStore

# --------------------------------------------------------------------------------------
# The SQL the raw side runs. It is written out here on purpose (this is what a hand-written
# sqlite3 program would send); `check_same_sql` compares it with what the library emits,
# so a change in the library stops the benchmark instead of giving an unfair number.
# --------------------------------------------------------------------------------------

# The columns the library inserts: the keys of codec.message_to_row's row, in the table's
# column order (the order SQLAlchemy renders them in).
_ROW_KEYS = set(message_to_row("s", {"role": "user", "content": "x", "timestamp": 0.0}))
INSERT_COLUMNS = tuple(c.name for c in messages_table.c if c.name in _ROW_KEYS)
assert len(INSERT_COLUMNS) == len(_ROW_KEYS), "message_to_row returns a non-column key"
RAW_UPDATE_COUNTERS = (
    "UPDATE sessions SET message_count=(sessions.message_count + ?), "
    "tool_call_count=(sessions.tool_call_count + ?) WHERE sessions.id = ?"
)
RAW_INSERT = (
    f"INSERT INTO messages ({', '.join(INSERT_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in INSERT_COLUMNS)})"
)


def raw_insert_rows(cur: Any, rows: Sequence[tuple[Any, ...]]) -> None:
    """Insert ``rows`` (tuples in ``INSERT_COLUMNS`` order) as the library writes a
    batch on SQLite: in list order, in multi-row INSERTs of the sizes it uses (all of
    a flush's rows in one statement; see ``multi_insert_parts``), not one statement a
    row, which made FTS5 write a segment a row."""
    version = driver().module.sqlite_version_info
    start = 0
    width = len(INSERT_COLUMNS)
    for per in multi_insert_parts(len(rows), width, version, APPEND_ROWS_PER_INSERT):
        params = tuple(chain.from_iterable(rows[start : start + per]))
        cur.execute(multi_insert_sql(INSERT_COLUMNS, per), params)
        start += per


SESSIONS = 50
SEED = 20240611


# --------------------------------------------------------------------------------------
# Corpus: ~100-character messages of Zipf-distributed words, deterministic from a seed.
# --------------------------------------------------------------------------------------

_SYLLABLES = [
    c + v
    for c in ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w")
    for v in ("a", "e", "i", "o", "u", "ai", "ou")
]

# Planted search terms (not producible from the syllables above, nor from the CJK pool).
SELECTIVE_TERM = "zebracorn"
MID_TERM = "quokka"
COMMON_TERM = "xylem"
CJK3_TERM = "数据库"
CJK2_TERM = "数据"  # a 2-character query: trigram cannot match it (LIKE path)
CJK1_RARE_TERM = "龘"  # a 1-character query with ~10 hits: the LIKE path's worst case

# Share of rows holding each planted term (selective and the rare CJK char: a count).
SELECTIVE_HITS = 10
MID_SHARE = 0.025  # 5,000 of 200,000
COMMON_SHARE = 0.75  # 150,000 of 200,000
CJK_SHARE = 0.10  # rows written in CJK
CJK3_SHARE = 0.005  # 1,000 of 200,000
CJK1_RARE_HITS = 10
TOOL_CALL_SHARE = 0.1  # assistant rows that carry tool_calls


class Corpus:
    """Deterministic message generator (``random.Random(seed)`` only)."""

    def __init__(self, seed: int = SEED, vocab_size: int = 20_000, zipf_s: float = 1.05):
        rng = Random(seed)
        words: set[str] = set()
        vocab: list[str] = []
        while len(vocab) < vocab_size:
            w = "".join(rng.choice(_SYLLABLES) for _ in range(rng.choice((1, 2, 2, 3, 3, 4))))
            if w not in words:
                words.add(w)
                vocab.append(w)
        vocab.sort(key=len)  # frequent words are short, as in natural text
        self.vocab = vocab
        self.cum_weights = _cumulative([1.0 / (r**zipf_s) for r in range(1, vocab_size + 1)])
        planted = set(CJK3_TERM + CJK2_TERM + CJK1_RARE_TERM)
        pool = [chr(c) for c in range(0x4E00, 0x6800) if chr(c) not in planted]
        rng.shuffle(pool)
        pool = pool[:1500]
        self.cjk_vocab = ["".join(rng.sample(pool, rng.choice((1, 2, 2, 3)))) for _ in range(4000)]
        self.cjk_cum = _cumulative([1.0 / (r**zipf_s) for r in range(1, len(self.cjk_vocab) + 1)])
        self.seed = seed

    def messages(self, n: int, *, seed_offset: int = 0, plant: bool = True) -> list[dict[str, Any]]:
        """``n`` message dicts (role, content, timestamp; tool rows and tool calls mixed in).

        With ``plant``, the search terms are planted at exact counts (see the *_SHARE
        constants), so hit counts do not depend on the Zipf tail.
        """
        rng = Random(self.seed * 1_000_003 + seed_offset)
        n_words = [rng.randint(9, 37) for _ in range(n)]
        flat = rng.choices(self.vocab, cum_weights=self.cum_weights, k=sum(n_words))
        texts: list[list[str]] = []
        at = 0
        for k in n_words:
            texts.append(flat[at : at + k])
            at += k
        cjk_rows = set(rng.sample(range(n), int(n * CJK_SHARE)))
        for i in cjk_rows:
            k = rng.randint(8, 18)
            parts = rng.choices(self.cjk_vocab, cum_weights=self.cjk_cum, k=k)
            # CJK runs with some punctuation; unicode61 sees each run as one token.
            texts[i] = ["".join(parts[: k // 2]) + "，" + "".join(parts[k // 2 :]) + "。"]
        if plant:
            idx = list(range(n))
            cjk_list = sorted(cjk_rows)
            # CJK first: the CJK rows are still one run of text here.
            for i in rng.sample(cjk_list, min(len(cjk_list), int(n * CJK3_SHARE))):
                texts[i][0] = _insert_in(texts[i][0], CJK3_TERM, rng)
            for i in rng.sample(cjk_list, min(len(cjk_list), CJK1_RARE_HITS)):
                texts[i][0] = _insert_in(texts[i][0], CJK1_RARE_TERM, rng)
            for i in rng.sample(idx, int(n * COMMON_SHARE)):
                texts[i].insert(rng.randint(0, len(texts[i])), COMMON_TERM)
            for i in rng.sample(idx, int(n * MID_SHARE)):
                texts[i].insert(rng.randint(0, len(texts[i])), MID_TERM)
            for i in rng.sample(idx, min(n, SELECTIVE_HITS)):
                texts[i].insert(rng.randint(0, len(texts[i])), SELECTIVE_TERM)
        out: list[dict[str, Any]] = []
        ts = 1_700_000_000.0 + seed_offset * 1000.0
        call_no = 0
        pending_call: str | None = None
        for i, words in enumerate(texts):
            content = " ".join(words)
            ts += 0.5
            if pending_call is not None:
                out.append(
                    {
                        "role": "tool",
                        "content": content,
                        "tool_call_id": pending_call,
                        "name": "terminal",
                        "timestamp": ts,
                    }
                )
                pending_call = None
                continue
            role = "user" if i % 2 == 0 else "assistant"
            msg: dict[str, Any] = {"role": role, "content": content, "timestamp": ts}
            if role == "assistant" and rng.random() < TOOL_CALL_SHARE:
                call_no += 1
                pending_call = f"call_{seed_offset}_{call_no}"
                msg["tool_calls"] = [
                    {
                        "id": pending_call,
                        "type": "function",
                        "function": {"name": "terminal", "arguments": '{"command":"ls -la"}'},
                    }
                ]
                msg["finish_reason"] = "tool_calls"
            out.append(msg)
        return out


def _cumulative(weights: Sequence[float]) -> list[float]:
    out, acc = [], 0.0
    for w in weights:
        acc += w
        out.append(acc)
    return out


def _insert_in(text: str, term: str, rng: Random) -> str:
    at = rng.randint(0, len(text))
    return text[:at] + term + text[at:]


def session_ids(n: int = SESSIONS) -> list[str]:
    return [f"bench-{i:03d}" for i in range(n)]


# --------------------------------------------------------------------------------------
# Stores
# --------------------------------------------------------------------------------------


@dataclass
class Workspace:
    """A temporary folder holding the library's home and the raw copies."""

    root: Path

    def home(self, name: str) -> Path:
        p = self.root / name
        p.mkdir(parents=True, exist_ok=True)
        return p


@contextmanager
def workspace() -> Iterator[Workspace]:
    root = Path(tempfile.mkdtemp(prefix="hermes-bench-"))
    try:
        yield Workspace(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def driver() -> Driver:
    return select_driver()


def raw_connect(path: Path) -> Any:
    """A raw DB-API connection configured exactly like the library's (see engine._on_connect)."""
    drv = driver()
    con = drv.module.connect(str(path), isolation_level=None)
    con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_MS)}")
    con.execute("PRAGMA foreign_keys = ON")
    con.execute("PRAGMA synchronous = NORMAL")
    mode = con.execute("PRAGMA journal_mode").fetchone()[0].upper()
    if mode != drv.journal_mode:
        con.execute(f"PRAGMA journal_mode = {drv.journal_mode}")
    return con


def new_store(home: Path, sessions: Sequence[str] = ()) -> StateStore:
    """A store built by the migrations, with the given sessions created."""
    store = StateStore.open(home)
    if sessions:
        with store.unit_of_work() as uow:
            for i, sid in enumerate(sessions):
                uow.sessions.create("bench", id=sid, started_at=1_700_000_000.0 + i)
            uow.commit()
    return store


def fill(
    store: StateStore,
    corpus: Corpus,
    n: int,
    sessions: Sequence[str],
    *,
    chunk: int = 5000,
    seed_offset: int = 0,
) -> None:
    """Append ``n`` corpus messages with append_many, ``chunk`` per transaction.

    Consecutive runs of 20 messages go to the same session, round-robin over ``sessions``,
    so every session holds an interleaved conversation.
    """
    msgs = corpus.messages(n, seed_offset=seed_offset)
    run = 20
    for start in range(0, n, chunk):
        block = msgs[start : start + chunk]
        with store.unit_of_work() as uow:
            for j in range(0, len(block), run):
                sid = sessions[((start + j) // run) % len(sessions)]
                uow.messages.append_many(sid, block[j : j + run])
            uow.commit()


def copy_db(src: Path, dst: Path) -> None:
    """Copy a (live, WAL) store with the backup API: never a file copy of the db alone."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    mod = driver().module
    s = mod.connect(str(src))
    d = mod.connect(str(dst))
    try:
        s.backup(d)
    finally:
        d.close()
        s.close()
    con = raw_connect(dst)  # puts the copy in the same journal mode
    con.close()


def store_db(store: StateStore) -> Path:
    return store.home / DB_NAME


# --------------------------------------------------------------------------------------
# Rows and SQL checks
# --------------------------------------------------------------------------------------


def raw_rows(session_id: str, messages: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """The parameter tuples the library would insert (built before timing)."""
    out = []
    for m in messages:
        row = message_to_row(session_id, m)
        out.append(tuple(row[c] for c in INSERT_COLUMNS))
    return out


def tool_calls_of(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(len(m["tool_calls"]) for m in messages if isinstance(m.get("tool_calls"), list))


_LITERAL = re.compile(
    r"'(?:[^']|'')*'"  # a string literal (as the trace expands a bound text)
    r"|\b[xX]'[0-9a-fA-F]*'"  # a blob literal
    r"|(?<![\w.])-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w.])"  # a number, not in a name
    r"|\bNULL\b"
    r"|:\w+|\?\d*"  # a placeholder, named or not
)


def _norm(sql: str) -> str:
    """One statement's text with every value and placeholder as ``?``, spaces collapsed.

    The trace callback reports statements with their bound values expanded into literals;
    statements written with placeholders and the ones written with literals therefore
    compare equal when they are the same statement, whatever the values.
    """
    return re.sub(r"\s+", " ", _LITERAL.sub("?", sql)).strip()


class SqlMismatch(SystemExit):
    """The library ran other SQL than the raw side: the ratio would compare different
    work, so the benchmark stops (a non-zero exit) instead of reporting it."""


def _tracer(seen: list[tuple[str, Any, bool]]) -> Callable[[str], None]:
    def record(sql: str) -> None:
        # SQLite reports the statements it runs on its own behalf as "-- ..." (trigger
        # bodies) or, for FTS5's shadow tables, qualified with the schema as a string
        # ('main'.'x_config'): work of SQLite, whichever connection first needs it; left out.
        if not sql.startswith("--") and "'main'." not in sql:
            seen.append((sql, None, False))

    return record


@contextmanager
def capture_sql(store: StateStore) -> Iterator[list[tuple[str, Any, bool]]]:
    """Record everything SQLite runs for the store: ``(statement, None, False)`` each.

    A trace callback on every DB-API connection the store's pool hands out, so the
    statements sent on the driver's cursor (the append and search fast paths) are seen
    as well as SQLAlchemy's. An ``executemany`` shows as one statement per row. Values
    are expanded into the text (see :func:`_norm`).
    """
    seen: list[tuple[str, Any, bool]] = []
    record = _tracer(seen)
    traced: list[Any] = []

    def on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        dbapi_conn.set_trace_callback(record)
        traced.append(dbapi_conn)

    event.listen(store.engine.pool, "checkout", on_checkout)
    try:
        yield seen
    finally:
        event.remove(store.engine.pool, "checkout", on_checkout)
        for c in traced:
            c.set_trace_callback(None)


@contextmanager
def capture_raw_sql(con: Any) -> Iterator[list[tuple[str, Any, bool]]]:
    """What SQLite runs for a raw DB-API connection (same form as :func:`capture_sql`)."""
    seen: list[tuple[str, Any, bool]] = []
    con.set_trace_callback(_tracer(seen))
    try:
        yield seen
    finally:
        con.set_trace_callback(None)


@contextmanager
def trace_sql(store: StateStore) -> Iterator[list[str]]:
    """Every statement SQLite runs for the store's connections, as text, filled as they
    run (values expanded; SQLite's own ``-- ...`` statements left out)."""
    seen: list[str] = []
    traced: list[Any] = []

    def record(sql: str) -> None:
        if not sql.startswith("--"):
            seen.append(sql)

    def on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        dbapi_conn.set_trace_callback(record)
        traced.append(dbapi_conn)

    event.listen(store.engine.pool, "checkout", on_checkout)
    try:
        yield seen
    finally:
        event.remove(store.engine.pool, "checkout", on_checkout)
        for c in traced:
            c.set_trace_callback(None)


_CONTROL = {"BEGIN", "BEGIN IMMEDIATE", "BEGIN DEFERRED", "COMMIT", "ROLLBACK"}
# The store's FTS merge after writes (hermes_repo.schema.fts.merge): a transaction of
# its own after every 50 messages a store commits, whose place in a one-write capture
# depends on how many messages the store wrote before. A capture check compares what
# one write runs, so it leaves the merge out on both sides; the timed runs do count it,
# the raw sides running the same merge at the same cadence (RawFtsMerge).
_MAINTENANCE = {
    "PRAGMA busy_timeout",
    "PRAGMA busy_timeout = ?",
    *(" ".join(_LITERAL.sub("?", s).split()) for s in MERGE_STATEMENTS),
}


def is_maintenance(sql: str) -> bool:
    """Whether ``sql`` belongs to the store's FTS merge after writes."""
    return _norm(sql) in _MAINTENANCE


class RawFtsMerge:
    """The store's FTS merge after writes, on a raw connection: the same statements at
    the same cadence (:mod:`hermes_repo.schema.fts.merge`), so a raw side does what a
    store's write does. Its count starts at zero, as a store's does when it is opened:
    a library side that wrote before timing is at another point of its cadence, so
    over a run the two differ by one merge at most."""

    def __init__(self) -> None:
        self.cadence = MergeCadence()

    def after_commit(self, cur: Any, messages: int) -> None:
        """After a raw write of ``messages`` committed: the merge, when due."""
        if not self.cadence.add(messages):
            return
        wait = cur.execute("PRAGMA busy_timeout").fetchone()[0]
        cur.execute("PRAGMA busy_timeout = 0")
        cur.execute("BEGIN IMMEDIATE")
        for statement in MERGE_STATEMENTS:
            cur.execute(statement)
        cur.execute("COMMIT")
        cur.execute(f"PRAGMA busy_timeout = {int(wait)}")
        self.cadence.merged()


def _statements(items: Sequence[Any]) -> list[str]:
    out: list[str] = []
    for item in items:
        sql = _norm(item[0] if isinstance(item, tuple) else item)
        if sql.upper() in _CONTROL or sql in _MAINTENANCE:
            continue
        if out and out[-1] == sql:
            continue  # one executemany, or a loop of the same statement: one entry
        out.append(sql)
    return out


def check_same_sql(
    label: str,
    captured: Sequence[tuple[str, Any, bool]],
    expected: Sequence[str] | Sequence[tuple[str, Any, bool]],
) -> bool:
    """Stop the benchmark unless the library ran exactly the raw side's statements.

    ``captured`` comes from :func:`capture_sql`; ``expected`` is the raw side's SQL
    (text, or a :func:`capture_raw_sql` capture). Both are normalised (:func:`_norm`);
    transaction control is ignored, and a run of one statement repeated counts once (an
    ``executemany`` traces one statement per row). An empty capture is a mismatch too:
    a check that saw nothing proves nothing. Returns True; a mismatch raises
    :class:`SqlMismatch` (the script exits with status 1, printing both lists).
    """
    got = _statements(captured)
    want = _statements(expected)
    if got != want or not got:
        raise SqlMismatch(
            f"ERROR [{label}]: the library's SQL differs from the raw side's, so the "
            "ratio would compare different work; make the raw side run what the library "
            "runs (or fix the library), then rerun.\n"
            f"  library: {got}\n  raw:     {want}"
        )
    return True


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


@dataclass
class Sample:
    wall: float
    cpu: float


@dataclass
class Result:
    """One benchmark line: library vs raw, medians of interleaved runs."""

    name: str
    unit: str  # "msg/s" (higher is better) or "ms" (lower is better)
    library: list[Sample] = field(default_factory=list)
    raw: list[Sample] = field(default_factory=list)
    work: float = 1.0  # messages per run (throughput) or calls per run (latency)
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def _value(self, samples: list[Sample], attr: str) -> float:
        t = statistics.median(getattr(s, attr) for s in samples)
        if self.unit == "msg/s":
            return self.work / t if t > 0 else float("inf")
        return t / self.work * 1000.0

    def lib(self, attr: str = "wall") -> float:
        return self._value(self.library, attr)

    def raw_value(self, attr: str = "wall") -> float:
        return self._value(self.raw, attr)

    def ratio(self, attr: str = "wall") -> float:
        """library / raw throughput (1.0 = as fast as raw; 0.5 = half as fast)."""
        lib_t = statistics.median(getattr(s, attr) for s in self.library)
        raw_t = statistics.median(getattr(s, attr) for s in self.raw)
        return raw_t / lib_t if lib_t > 0 else float("inf")

    def spread(self, samples: list[Sample]) -> tuple[float, float]:
        vals = [self._value([s], "wall") for s in samples]
        return min(vals), max(vals)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "library": self.lib(),
            "raw": self.raw_value(),
            "ratio_throughput": self.ratio(),
            "ratio_throughput_cpu": self.ratio("cpu"),
            "library_spread": self.spread(self.library),
            "raw_spread": self.spread(self.raw),
            "runs": len(self.library),
            "work_per_run": self.work,
            "note": self.note,
            "samples": {
                "library": [asdict(s) for s in self.library],
                "raw": [asdict(s) for s in self.raw],
            },
            **self.extra,
        }


def timed(fn: Callable[[], Any]) -> tuple[Sample, Any]:
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    t1, c1 = time.perf_counter(), time.process_time()
    return Sample(t1 - t0, c1 - c0), out


def interleave(
    result: Result,
    runs: int,
    library: Callable[[int], Any],
    raw: Callable[[int], Any],
) -> Result:
    """library, raw, library, raw...; each callable gets the run number."""
    for i in range(runs):
        s, _ = timed(lambda i=i: library(i))
        result.library.append(s)
        s, _ = timed(lambda i=i: raw(i))
        result.raw.append(s)
    return result


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import os

    drv = driver()
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "driver": drv.name,
        "sqlite": drv.sqlite_version,
        "journal_mode": drv.journal_mode,
        "sqlalchemy": sqlalchemy.__version__,
    }


def _fmt(v: float, unit: str) -> str:
    if unit == "msg/s":
        return f"{v:,.0f}"
    return f"{v:.3f}" if v < 10 else f"{v:.1f}"


def print_table(
    title: str, results: Sequence[Result], target: dict[str, str] | None = None
) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("case")
    table.add_column("unit")
    table.add_column("library", justify="right")
    table.add_column("raw", justify="right")
    table.add_column("lib/raw thr.", justify="right")
    table.add_column("(cpu)", justify="right")
    table.add_column("lib spread", justify="right")
    table.add_column("note")
    for r in results:
        lo, hi = r.spread(r.library)
        table.add_row(
            r.name,
            r.unit,
            _fmt(r.lib(), r.unit),
            _fmt(r.raw_value(), r.unit),
            f"{r.ratio():.2f}x",
            f"{r.ratio('cpu'):.2f}x",
            f"{_fmt(lo, r.unit)}–{_fmt(hi, r.unit)}",
            (target or {}).get(r.name, r.note),
        )
    Console(width=160).print(table)


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument("--runs", type=int, default=None, help="interleaved runs per side")
    p.add_argument("--json", metavar="FILE", help="write the results as JSON")
    p.add_argument(
        "--dataset",
        choices=DATASETS,
        default="synthetic",
        help="synthetic: ~100-character messages; realistic: corpus_realistic.py "
        "(tool outputs of 1-16 KB, CJK, tool calls)",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=None,
        help="realistic corpus size as a share of its 200k messages (default 1; --quick 0.05)",
    )
    return p


DATASETS = ("synthetic", "realistic")


def make_corpus(args: argparse.Namespace) -> Corpus | RealisticCorpus:
    """The corpus ``--dataset`` names; both have ``messages(n, seed_offset=, plant=)``."""
    return RealisticCorpus() if args.dataset == "realistic" else Corpus()


def scale_of(args: argparse.Namespace) -> float:
    """The realistic corpus' scale (``--scale``; 0.05 with ``--quick``, else 1)."""
    if args.scale is not None:
        return float(args.scale)
    return 0.05 if args.quick else 1.0


def fill_realistic(store: StateStore, plan: Layout, *, chunk: int = 2000) -> RealisticCorpus:
    """Create ``plan``'s sessions and append their realistic conversations
    (``append_many``, at most ``chunk`` messages per transaction)."""
    corpus = RealisticCorpus()
    with store.unit_of_work() as uow:
        for i, sid in enumerate(plan.ids):
            uow.sessions.create("bench", id=sid, started_at=1_730_000_000.0 + i)
        uow.commit()
    for sid, msgs in corpus.conversations(plan):
        for start in range(0, len(msgs), chunk):
            with store.unit_of_work() as uow:
                uow.messages.append_many(sid, msgs[start : start + chunk])
                uow.commit()
    return corpus


def realistic_store(home: Path, scale: float) -> tuple[StateStore, Layout]:
    """A migrated store holding the realistic corpus at ``scale`` (for the search and
    flush benchmarks: ``realistic_store(ws.home("lib"), scale_of(args))``); the long
    session is ``corpus_realistic.LONG_SESSION``."""
    plan = layout(scale)
    store = new_store(home)
    fill_realistic(store, plan)
    return store, plan


def dataset_label(args: argparse.Namespace) -> str:
    """How a result names its corpus (appended to the case name)."""
    if args.dataset == "realistic":
        return f"realistic x{scale_of(args):g}"
    return "synthetic"


def payload(name: str, params: dict[str, Any], results: Sequence[Result]) -> dict[str, Any]:
    return {
        "benchmark": name,
        "params": params,
        "environment": environment(),
        "results": [r.as_dict() for r in results],
    }


def write_json(path: str | None, data: Any) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def checkpoint(path: Path) -> None:
    """Move the WAL into the main file (PASSIVE; nothing else is writing at this point)."""
    con = raw_connect(path)
    try:
        con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    finally:
        con.close()


def run_main(main: Callable[[list[str] | None], dict[str, Any]]) -> None:
    """Entry point of a benchmark script."""
    main(None)
