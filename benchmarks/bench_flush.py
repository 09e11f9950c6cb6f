"""Transcript flush (``TranscriptWriter.flush``, spool idle) vs raw DB-API, per message.

The store already holds 50k messages (``--quick``: 5k) across 50 sessions; each run
gives one session's writer ``--per-run`` new messages. Two library cases:

* ``one flush``: a single ``flush(list)`` with all the new messages (a turn that
  produced many messages);
* ``flush per message``: the list grows by one message and is flushed each time (an
  agent flushing every turn; each call also scans the whole list by uid).

Both write one transaction per message. The raw side runs, per message, ``BEGIN
IMMEDIATE``, the counters ``UPDATE`` (checking that it matched), the 16-column
``INSERT`` (both FTS triggers fire) and ``COMMIT`` on a copy of the same store, with
parameter tuples built before timing. The warm-up flush (which loads the session's
stored uids once) doubles as the same-SQL check.

    python benchmarks/bench_flush.py [--quick] [--runs N] [--json FILE]
"""

from __future__ import annotations

from typing import Any

from _common import (
    RAW_INSERT,
    RAW_UPDATE_COUNTERS,
    Corpus,
    Result,
    capture_sql,
    check_same_sql,
    checkpoint,
    copy_db,
    fill,
    interleave,
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

from hermes_repo.codec import new_uid

NAME = "flush"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--base", type=int, default=None, help="messages in the store before timing")
    p.add_argument("--per-run", type=int, default=None, help="messages flushed per run")
    args = p.parse_args(argv)
    base = args.base or (5_000 if args.quick else 50_000)
    per_run = args.per_run or (300 if args.quick else 2_000)
    runs = args.runs or (3 if args.quick else 7)
    sessions = session_ids()
    corpus = Corpus()

    with workspace() as ws:
        store = new_store(ws.home("lib"), sessions)
        fill(store, corpus, base, sessions)
        checkpoint(store_db(store))
        raw_path = ws.root / "raw" / "state.db"
        copy_db(store_db(store), raw_path)
        con = raw_connect(raw_path)
        cur = con.cursor()

        # Two library cases per run, so twice the messages; uid and timestamp are set
        # up front on both sides (the raw side needs them in its tuples).
        msgs = corpus.messages(2 * per_run * runs + 1, seed_offset=202, plant=False)
        for m in msgs:
            m["uid"] = new_uid()
        warm, msgs = msgs[0], msgs[1:]
        blocks = [msgs[i * per_run : (i + 1) * per_run] for i in range(2 * runs)]
        # Run i of each case writes to its own session (a writer is per session).
        sid_one = [sessions[i % len(sessions)] for i in range(runs)]
        sid_each = [sessions[(runs + i) % len(sessions)] for i in range(runs)]
        writers = {sid: store.transcript_writer(sid) for sid in set(sid_one + sid_each)}
        raw_one = [
            [(sid_one[i], tool_calls_of([m]), raw_rows(sid_one[i], [m])[0]) for m in blocks[i]]
            for i in range(runs)
        ]
        raw_each = [
            [
                (sid_each[i], tool_calls_of([m]), raw_rows(sid_each[i], [m])[0])
                for m in blocks[runs + i]
            ]
            for i in range(runs)
        ]

        def raw_append(sid: str, tool_calls: int, row: tuple[Any, ...]) -> None:
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.execute(RAW_UPDATE_COUNTERS, (1, tool_calls, sid))
                if cur.rowcount == 0:
                    raise LookupError(sid)
                cur.execute(RAW_INSERT, row)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise

        # Warm every writer (it loads the session's uids once), outside the timing.
        for writer in writers.values():
            writer.flush([])
        first = writers[sid_one[0]]
        with capture_sql(store) as seen:
            result = first.flush([warm])
        assert result.written == 1 and result.error is None, result
        same = check_same_sql(NAME, seen, [RAW_UPDATE_COUNTERS, RAW_INSERT])
        raw_append(sid_one[0], tool_calls_of([warm]), raw_rows(sid_one[0], [warm])[0])

        def lib_one(i: int) -> None:
            r = writers[sid_one[i]].flush(blocks[i])
            assert r.written == per_run and r.error is None, r

        def lib_each(i: int) -> None:
            writer = writers[sid_each[i]]
            growing: list[dict[str, Any]] = []
            for m in blocks[runs + i]:
                growing.append(m)
                writer.flush(growing)

        def raw_run(batch: list[tuple[str, int, tuple[Any, ...]]]) -> None:
            for sid, tc, row in batch:
                raw_append(sid, tc, row)

        one = Result(
            f"flush, one call, 1 msg/txn ({base // 1000}k in store)",
            "msg/s",
            work=per_run,
            extra={"same_sql": same},
        )
        interleave(one, runs, lib_one, lambda i: raw_run(raw_one[i]))
        each = Result(
            f"flush per message, list grows to {per_run}",
            "msg/s",
            work=per_run,
            extra={"same_sql": same},
        )
        interleave(each, runs, lib_each, lambda i: raw_run(raw_each[i]))

        health = store.health()
        lib_count = health.counts["messages"]
        raw_count = con.execute("SELECT count(*) FROM messages").fetchone()[0]
        expected = base + 1 + 2 * per_run * runs
        assert lib_count == raw_count == expected, (lib_count, raw_count, expected)
        assert health.pending_files == 0
        con.close()
        store.close()

    print_table(
        f"TranscriptWriter.flush, spool idle, one transaction per message, {runs} "
        f"interleaved runs of {per_run}",
        [one, each],
        {one.name: "target >= 0.75x"},
    )
    data = payload(NAME, {"base": base, "per_run": per_run, "runs": runs}, [one, each])
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
