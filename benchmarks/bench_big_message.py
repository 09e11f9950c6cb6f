"""Appending one huge message (1, 10, 50 MB of text, each role) vs raw DB-API, and
what indexing CJK tool rows costs on the benchmark corpus.

**Big messages.** Each run appends one message of the given size with
``store.append_message`` (one write transaction: the write lock is held for about this
long) and, on a copy of the same migrated store, the raw side runs ``BEGIN IMMEDIATE``,
the counters ``UPDATE``, the ``INSERT`` (the same triggers fire) and ``COMMIT``. Two
kinds of text: *prose* (the corpus's messages joined: words, 10% CJK runs) and *random*
(base64 of random bytes, the worst case for the trigram tokenizer). The message is
deleted again after each timed run, untimed. ``--uncapped`` adds the raw cost with
revision 0001's triggers (no cap) for the sizes up to 10 MB: what the caps remove.

**Corpus.** ``--corpus N`` fills N corpus messages (500 per transaction, raw
``executemany``) into stores with revision 0001's indexes (tool rows never in the
trigram index), the head revision's (tool rows in it when they hold CJK), and a variant
with every tool row in it; reports the fill rate and the bytes of each index.

    python benchmarks/bench_big_message.py [--quick] [--runs N] [--sizes 1,10,50]
        [--uncapped] [--corpus 50000] [--json FILE]
"""

from __future__ import annotations

import base64
import dataclasses
import statistics
import time
from pathlib import Path
from random import Random
from typing import Any

from _common import (
    RAW_INSERT,
    RAW_UPDATE_COUNTERS,
    Corpus,
    Result,
    copy_db,
    new_store,
    parser,
    payload,
    print_table,
    raw_connect,
    raw_rows,
    run_main,
    store_db,
    timed,
    workspace,
    write_json,
)
from sqlalchemy.pool import NullPool

from hermes_repo.engine import create_store_engine
from hermes_repo.schema import fts, migrate

NAME = "big_message"
ROLES = ("system", "user", "assistant", "tool")
MB = 1_000_000  # characters


def _prose(chars: int) -> str:
    corpus, parts, total, offset = Corpus(), [], 0, 0
    while total < chars:
        block = " ".join(m["content"] for m in corpus.messages(20_000, seed_offset=offset))
        parts.append(block)
        total += len(block) + 1
        offset += 1
    return " ".join(parts)[:chars]


def _random(chars: int) -> str:
    return base64.b64encode(Random(7).randbytes(chars * 3 // 4 + 3)).decode()[:chars]


def _message(role: str, content: str) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": role, "content": content, "timestamp": 1_700_000_000.0}
    if role == "tool":
        msg["tool_call_id"] = "call_big"
        msg["tool_name"] = "terminal"
    return msg


def _raw_append(con: Any, row: tuple[Any, ...], sid: str) -> int:
    con.execute("BEGIN IMMEDIATE")
    con.execute(RAW_UPDATE_COUNTERS, (1, 0, sid))
    rowid = int(con.execute(RAW_INSERT, row).lastrowid)
    con.execute("COMMIT")
    return rowid


def _delete(con: Any, rowid: int) -> None:
    con.execute("BEGIN IMMEDIATE")
    con.execute("DELETE FROM messages WHERE id = ?", (rowid,))
    con.execute("COMMIT")
    con.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()


def _store_at(path: Path, revision: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    engine = create_store_engine(path, poolclass=NullPool)
    try:
        migrate.upgrade(engine, revision)
    finally:
        engine.dispose()


def big_messages(
    ws: Any, sizes: list[int], kinds: list[str], runs: int, uncapped: bool
) -> list[Result]:
    sid = "big"
    store = new_store(ws.home("lib"), [sid])
    raw_path = ws.root / "raw" / "state.db"
    copy_db(store_db(store), raw_path)
    raw = raw_connect(raw_path)
    old = None
    if uncapped:
        old_path = ws.root / "old" / "state.db"
        _store_at(old_path, "0001_initial")
        old = raw_connect(old_path)
        old.execute("INSERT INTO sessions (id, source, started_at) VALUES (?, 'bench', 0)", (sid,))
    lib_con = raw_connect(store_db(store))
    results = []
    try:
        for kind in kinds:
            for size in sizes:
                text = (_prose if kind == "prose" else _random)(size * MB)
                for role in ROLES:
                    msg = _message(role, text)
                    row = raw_rows(sid, [msg])[0]
                    result = Result(f"{size} MB {kind}, {role}", "ms", work=1.0)
                    old_samples: list[float] = []
                    for run in range(runs if size < 50 else 1):
                        sample, rowid = timed(lambda msg=msg: store.append_message(sid, msg))
                        result.library.append(sample)
                        _delete(lib_con, rowid)
                        sample, rowid = timed(lambda row=row: _raw_append(raw, row, sid))
                        result.raw.append(sample)
                        _delete(raw, rowid)
                        if old is not None and size <= 10 and run == 0:  # minutes each
                            sample, rowid = timed(lambda row=row: _raw_append(old, row, sid))
                            old_samples.append(sample.wall)
                            _delete(old, rowid)
                    if old_samples:
                        result.extra["raw_0001_uncapped_ms"] = statistics.median(old_samples) * 1e3
                        result.note = (
                            f"0001 uncapped raw: {result.extra['raw_0001_uncapped_ms']:.0f} ms"
                        )
                    results.append(result)
                    print(
                        f"{result.name}: library {result.lib():.0f} ms, raw "
                        f"{result.raw_value():.0f} ms {result.note}",
                        flush=True,
                    )
    finally:
        raw.close()
        lib_con.close()
        if old is not None:
            old.close()
        store.close()
    return results


def _index_bytes(con: Any, name: str) -> int:
    data = con.execute(f"SELECT coalesce(sum(length(block)), 0) FROM {name}_data").fetchone()[0]
    idx = con.execute(f"SELECT coalesce(sum(length(term)) + 16 * count(*), 0) FROM {name}_idx")
    docsize = con.execute(f"SELECT coalesce(sum(length(sz)) + 8 * count(*), 0) FROM {name}_docsize")
    return int(data) + int(idx.fetchone()[0]) + int(docsize.fetchone()[0])


def _all_tool_rows_variant(con: Any) -> None:
    """Swap the trigram index for one over every tool row too (the costlier design)."""
    trigram = dataclasses.replace(fts.INDEXES[1], row_filter=None)
    con.execute("BEGIN IMMEDIATE")
    for statement in [*fts.drop_statements([trigram]), *fts.create_statements([trigram])]:
        con.execute(statement)
    con.execute("COMMIT")


def corpus_costs(ws: Any, n: int, runs: int) -> list[dict[str, Any]]:
    msgs = Corpus().messages(n)
    sid = "corpus"
    rows = raw_rows(sid, msgs)
    tool_rows = sum(1 for m in msgs if m["role"] == "tool")
    cjk_tool = sum(1 for m in msgs if m["role"] == "tool" and fts.has_cjk(m["content"]))
    text_chars = sum(len(m["content"]) for m in msgs)
    designs = (
        ("0001: tool rows never in trigram", "0001_initial", False),
        ("head: tool rows with CJK in trigram", "head", False),
        ("every tool row in trigram", "head", True),
    )
    walls: dict[str, list[float]] = {label: [] for label, _, _ in designs}
    sizes: dict[str, dict[str, int]] = {}
    docs: dict[str, int] = {}
    # Designs interleaved within each run: the machine is shared, so a slow spell must
    # not fall on one design only.
    for r in range(runs):
        for label, revision, variant in designs:
            path = ws.root / f"corpus-{revision}-{variant}-{r}" / "state.db"
            _store_at(path, revision)
            con = raw_connect(path)
            try:
                if variant:
                    _all_tool_rows_variant(con)
                con.execute(
                    "INSERT INTO sessions (id, source, started_at) VALUES (?, 'b', 0)", (sid,)
                )
                t0 = time.perf_counter()
                for start in range(0, n, 500):
                    con.execute("BEGIN IMMEDIATE")
                    con.executemany(RAW_INSERT, rows[start : start + 500])
                    con.execute("COMMIT")
                walls[label].append(time.perf_counter() - t0)
                sizes[label] = {ix.name: _index_bytes(con, ix.name) for ix in fts.INDEXES}
                docs[label] = int(
                    con.execute("SELECT count(*) FROM messages_fts_trigram_docsize").fetchone()[0]
                )
            finally:
                con.close()
            path.unlink()
    out = []
    for label, _, _ in designs:
        wall = statistics.median(walls[label])
        line = {
            "design": label,
            "messages": n,
            "tool_rows": tool_rows,
            "tool_rows_with_cjk": cjk_tool,
            "text_chars": text_chars,
            "fill_msg_per_s": n / wall,
            "fill_msg_per_s_runs": [n / w for w in walls[label]],
            "trigram_documents": docs[label],
            "index_bytes": sizes[label],
        }
        out.append(line)
        print(
            f"{label}: {n / wall:,.0f} msg/s (runs {[f'{n / w:,.0f}' for w in walls[label]]}), "
            f"trigram {sizes[label]['messages_fts_trigram']:,} B ({docs[label]} docs), "
            f"words {sizes[label]['messages_fts']:,} B; {tool_rows} tool rows, {cjk_tool} "
            f"with CJK, {text_chars:,} characters",
            flush=True,
        )
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default=None, help="message sizes in MB, comma-separated")
    p.add_argument("--kinds", default="prose,random", help="prose, random or both")
    p.add_argument("--uncapped", action="store_true", help="also time revision 0001's triggers")
    p.add_argument("--corpus", type=int, default=None, help="corpus messages for the CJK part")
    args = p.parse_args(argv)
    sizes = [int(s) for s in (args.sizes or ("1" if args.quick else "1,10,50")).split(",")]
    runs = args.runs or (1 if args.quick else 3)
    corpus_n = args.corpus if args.corpus is not None else (2_000 if args.quick else 50_000)
    with workspace() as ws:
        results = big_messages(ws, sizes, args.kinds.split(","), runs, args.uncapped)
        corpus = corpus_costs(ws, corpus_n, runs) if corpus_n else []
    print_table("append one huge message (ms, medians)", results)
    data = payload(
        NAME,
        {"sizes_mb": sizes, "runs": runs, "corpus": corpus_n, "uncapped": args.uncapped},
        results,
    )
    data["corpus"] = corpus
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
