"""Spool replay (``store.replay_pending``) vs raw DB-API, by spool size.

One session already holds 100k messages (``--quick``: 10k). For each spool size (10k,
50k, 100k records; ``--quick``: 1k, 5k, 10k) a fresh copy of that store gets a
``<sid>.pending.jsonl`` of new wrapped records with uids, and one replay puts it back.
Two more cases at the largest size: the same spool recovered again after its rows are
committed (a crash before the delete: everything is a duplicate), and records without
uid (the seed's overlap search against the stored tail).

The raw side does what a replay must at least do, on a copy of the same store: read and
parse the JSON lines, ``BEGIN IMMEDIATE``, read the session's stored uids, the counters
``UPDATE``, the new rows in multi-row INSERTs as the library writes them (both FTS
triggers fire),
``COMMIT``. Row tuples are built while timed on both sides (parsing is part of the
work). Linear scaling shows as a flat "us/record" column.

    python benchmarks/bench_replay.py [--quick] [--runs N] [--json FILE]
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from _common import (
    INSERT_COLUMNS,
    RAW_UPDATE_COUNTERS,
    Result,
    Sample,
    checkpoint,
    copy_db,
    make_corpus,
    new_store,
    parser,
    payload,
    print_table,
    raw_connect,
    raw_insert_rows,
    run_main,
    store_db,
    timed,
    tool_calls_of,
    workspace,
    write_json,
)

from hermes_repo import StateStore
from hermes_repo.codec import message_to_row, new_uid
from hermes_repo.transcript import spool

NAME = "replay"
SID = "bench-replay"


def spool_lines(messages: list[dict[str, Any]], *, with_uid: bool = True) -> bytes:
    out = []
    for m in messages:
        rec = dict(m)
        if not with_uid:
            rec.pop("uid", None)
        out.append(spool.encode_record(spool.wrap(rec, at=time.time())) + b"\n")
    return b"".join(out)


def place_spool(home: Path, data: bytes) -> None:
    folder = spool.sessions_dir(home)
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / spool.pending_name(SID)
    path.write_bytes(data)
    path.chmod(0o600)


def raw_recover(db: Path, data: bytes) -> int:
    """The minimum a replay does, by hand: parse, dedup by uid, insert, commit."""
    records = [json.loads(line) for line in data.split(b"\n") if line.strip()]
    con = raw_connect(db)
    cur = con.cursor()
    try:
        cur.execute("BEGIN IMMEDIATE")
        stored = {
            u for (u,) in cur.execute("SELECT uid FROM messages WHERE session_id = ?", (SID,))
        }
        messages = [r["message"] for r in records if r["message"]["uid"] not in stored]
        rows = []
        for m in messages:
            row = message_to_row(SID, m)
            rows.append(tuple(row[c] for c in INSERT_COLUMNS))
        cur.execute(RAW_UPDATE_COUNTERS, (len(rows), tool_calls_of(messages), SID))
        raw_insert_rows(cur, rows)
        cur.execute("COMMIT")
    finally:
        con.close()
    return len(rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--base", type=int, default=None, help="messages in the session")
    args = p.parse_args(argv)
    base = args.base or (10_000 if args.quick else 100_000)
    sizes = [base // 10, base // 2, base]
    runs = args.runs or (1 if args.quick else 3)
    corpus = make_corpus(args)

    results: list[Result] = []
    with workspace() as ws:
        template = ws.home("template")
        store = new_store(template, [SID])
        stored_msgs = corpus.messages(base, seed_offset=303, plant=False)
        for start in range(0, base, 5000):
            with store.unit_of_work() as uow:
                uow.messages.append_many(SID, stored_msgs[start : start + 5000])
                uow.commit()
        store.close()
        checkpoint(store_db(store))
        new = corpus.messages(base, seed_offset=404, plant=False)
        for m in new:
            m["uid"] = new_uid()

        def fresh(name: str) -> Path:
            home = ws.home(name)
            copy_db(template / "state.db", home / "state.db")
            return home

        def lib_case(label: str, data: bytes, expect: int, prepare: Any = None) -> None:
            result = Result(label, "ms", work=1.0)
            for r in range(runs):
                lib_home = fresh(f"lib-{label}-{r}")
                if prepare is not None:
                    prepare(lib_home)
                with StateStore.open(lib_home, replay=False) as st:
                    place_spool(lib_home, data)
                    sample, report = timed(st.replay_pending)
                assert report.inserted == expect and not report.errors, report
                result.library.append(sample)
                raw_home = fresh(f"raw-{label}-{r}")
                if prepare is not None:
                    prepare(raw_home)
                sample, inserted = timed(lambda h=raw_home: raw_recover(h / "state.db", data))
                assert inserted == expect, (inserted, expect)
                result.raw.append(sample)
            records = data.count(b"\n")
            result.extra["records"] = records
            result.extra["us_per_record_library"] = (
                min(s.wall for s in result.library) / records * 1e6
            )
            result.note = f"{result.extra['us_per_record_library']:.1f} us/record"
            results.append(result)

        for n in sizes:
            lib_case(f"{n // 1000}k new records", spool_lines(new[:n]), n)

        big = spool_lines(new[:base])

        def commit_first(home: Path) -> None:
            with StateStore.open(home, replay=False) as st:
                place_spool(home, big)
                st.replay_pending()

        lib_case(f"{base // 1000}k, all already stored", big, 0, prepare=commit_first)

        # Records without uid repeating the stored tail (half) then new (half): the
        # overlap search. The raw side cannot dedup these by uid; it is timed on the
        # uid spool of the same size for reference.
        half = base // 2
        legacy = spool_lines(stored_msgs[-half:] + new[:half], with_uid=False)
        result = Result(f"{base // 1000}k without uid (half overlap)", "ms", work=1.0)
        for r in range(runs):
            h = fresh(f"legacy-{r}")
            with StateStore.open(h, replay=False) as st:
                place_spool(h, legacy)
                sample, report = timed(st.replay_pending)
            assert (report.inserted, report.duplicates) == (half, half), report
            result.library.append(sample)
            raw_home = fresh(f"legacy-raw-{r}")
            sample, _ = timed(lambda h=raw_home: raw_recover(h / "state.db", big))
            result.raw.append(Sample(sample.wall, sample.cpu))
        result.extra["us_per_record_library"] = min(s.wall for s in result.library) / base * 1e6
        result.note = f"{result.extra['us_per_record_library']:.1f} us/record; raw: uid spool"
        results.append(result)

    print_table(
        f"replay_pending into a session of {base:,} messages, one transaction, "
        f"{runs} run(s) each (ms, lower is better)",
        results,
    )
    params = {"base": base, "sizes": sizes, "runs": runs, "dataset": args.dataset}
    data = payload(NAME, params, results)
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
