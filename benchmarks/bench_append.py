"""Append one message per transaction (``store.append_message``) vs raw DB-API.

The store already holds 50k messages (``--quick``: 5k) across 50 sessions; each run
appends the next messages round-robin over those sessions. The raw side runs, per
message, ``BEGIN IMMEDIATE``, the counters ``UPDATE`` on ``sessions`` (checking that it
matched a row), the 16-column ``INSERT`` into ``messages`` (both FTS triggers fire),
reads ``lastrowid`` and ``COMMIT``s, on a copy of the same migrated store. The raw
parameter tuples are built before timing; the library converts message dicts while timed.

    python benchmarks/bench_append.py [--quick] [--runs N] [--json FILE] [--dataset realistic]
"""

from __future__ import annotations

from typing import Any

from _common import (
    RAW_INSERT,
    RAW_UPDATE_COUNTERS,
    RawFtsMerge,
    Result,
    capture_raw_sql,
    capture_sql,
    check_same_sql,
    checkpoint,
    copy_db,
    dataset_label,
    fill,
    interleave,
    make_corpus,
    new_store,
    parser,
    payload,
    print_table,
    raw_connect,
    raw_rows,
    run_main,
    session_ids,
    store_db,
    tool_calls_of,
    workspace,
    write_json,
)

NAME = "append"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--base", type=int, default=None, help="messages in the store before timing")
    p.add_argument("--per-run", type=int, default=None, help="messages appended per run")
    args = p.parse_args(argv)
    base = args.base or (5_000 if args.quick else 50_000)
    per_run = args.per_run or (150 if args.quick else 500)
    runs = args.runs or (7 if args.quick else 21)
    sessions = session_ids()
    corpus = make_corpus(args)

    with workspace() as ws:
        store = new_store(ws.home("lib"), sessions)
        fill(store, corpus, base, sessions)
        checkpoint(store_db(store))
        raw_path = ws.root / "raw" / "state.db"
        copy_db(store_db(store), raw_path)
        con = raw_connect(raw_path)
        cur = con.cursor()

        msgs = corpus.messages(per_run * runs + 1, seed_offset=101, plant=False)
        plan = [(sessions[i % len(sessions)], m) for i, m in enumerate(msgs)]
        warm, plan = plan[0], plan[1:]
        batches = [plan[i * per_run : (i + 1) * per_run] for i in range(runs)]
        raw_batches = [
            [(sid, tool_calls_of([m]), raw_rows(sid, [m])[0]) for sid, m in batch]
            for batch in batches
        ]

        raw_merge = RawFtsMerge()

        def raw_append(sid: str, tool_calls: int, row: tuple[Any, ...]) -> int:
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.execute(RAW_UPDATE_COUNTERS, (1, tool_calls, sid))
                if cur.rowcount == 0:
                    raise LookupError(sid)
                cur.execute(RAW_INSERT, row)
                rowid = cur.lastrowid
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            raw_merge.after_commit(cur, 1)  # the store's FTS merge, when due
            return int(rowid)

        # Warm-up (one message each side) doubles as the same-SQL check.
        with capture_sql(store) as seen:
            store.append_message(*warm)
        with capture_raw_sql(con) as raw_seen:
            raw_append(warm[0], tool_calls_of([warm[1]]), raw_rows(warm[0], [warm[1]])[0])
        same = check_same_sql(NAME, seen, raw_seen)

        def lib_run(i: int) -> None:
            append = store.append_message
            for sid, m in batches[i]:
                append(sid, m)

        def raw_run(i: int) -> None:
            for sid, tc, row in raw_batches[i]:
                raw_append(sid, tc, row)

        result = Result(
            f"append, 1 msg/txn ({base // 1000}k in store, {dataset_label(args)})",
            "msg/s",
            work=per_run,
            extra={"same_sql": same},
        )
        interleave(result, runs, lib_run, raw_run)

        lib_count = store.health().counts["messages"]
        raw_count = con.execute("SELECT count(*) FROM messages").fetchone()[0]
        assert lib_count == raw_count == base + 1 + per_run * runs, (lib_count, raw_count)
        con.close()
        store.close()

    print_table(
        f"append_message, one transaction per message, {runs} interleaved runs of {per_run}",
        [result],
        {result.name: "target >= 0.85x"},
    )
    params = {"base": base, "per_run": per_run, "runs": runs, "dataset": dataset_label(args)}
    data = payload(NAME, params, [result])
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
