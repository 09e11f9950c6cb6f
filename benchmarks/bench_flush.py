"""Transcript flush (``TranscriptWriter.flush``, spool idle) vs raw DB-API, per message.

The store already holds 50k messages (``--quick``: 5k) across 50 sessions; each run
gives one session's writer ``--per-run`` new messages. Three library cases:

* ``flush of 10`` (``--flush-size``): the new messages arrive ``10`` at a time, each
  batch handed to ``flush`` as its own list (a turn that produced a tool call, its
  result and an answer...). The library writes each batch in ONE transaction (the
  group commit). Two raw sides, interleaved with it in the same run: one transaction
  per message (``BEGIN IMMEDIATE``, the counters ``UPDATE``, the ``INSERT``,
  ``COMMIT``: what the flush did before group commit) and one transaction per flush
  (``BEGIN IMMEDIATE``, one counters ``UPDATE`` for the batch, the batch's rows in
  one multi-row ``INSERT``, ``COMMIT``: the same SQL the library runs);
* ``one flush``: a single ``flush(list)`` with all the new messages: one transaction,
  against raw one transaction (multi-row ``INSERT``s, as the library's);
* ``flush per message``: the list grows by one message and is flushed each time (an
  agent flushing every turn; each call also scans the whole list by uid): one
  transaction per message on both sides.

A fourth case, ``flush of 10 onto a long session`` (``--long``, default 20,000 stored
messages; ``--only-long`` runs it alone), is the agent's steady state: one session
already ``--long`` messages long, each flush handing it 10 new messages, against raw
sqlite3 writing the same 10 rows onto the same session of the copy in one transaction
(``BEGIN IMMEDIATE``, the counters ``UPDATE``, one 10-row ``INSERT``, ``COMMIT``). Each
run is ``--long-flushes`` flushes per side; which side goes first alternates from run
to run (the second of a pair finds the caches warm). The per-flush cost is reported in
milliseconds, wall and CPU, with the ratio; its statements are checked like the group's.

Raw parameter tuples are built before timing. The warm-up flush (which loads the
session's stored uids once) doubles as the same-SQL check of the one-message path; the
group path is checked by SQLite's own statement trace (``set_trace_callback`` on the
store's pooled connections and on the raw one, parameters expanded into literals): the
same batch flushed by the library and written by the raw per-flush side must run the
very same statements, transaction control included, or the benchmark fails.

    python benchmarks/bench_flush.py [--quick] [--runs N] [--flush-size N] [--json FILE]
                                     [--long N] [--long-flushes N] [--only-long]
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from _common import (
    RAW_INSERT,
    RAW_UPDATE_COUNTERS,
    Corpus,
    RawFtsMerge,
    Result,
    capture_sql,
    check_same_sql,
    checkpoint,
    copy_db,
    fill,
    interleave,
    is_maintenance,
    new_store,
    parser,
    payload,
    print_table,
    raw_connect,
    raw_insert_rows,
    raw_rows,
    run_main,
    session_ids,
    store_db,
    timed,
    tool_calls_of,
    trace_sql,
    workspace,
    write_json,
)

from hermes_repo.codec import new_uid

NAME = "flush"


def _collapsed(statements: list[str]) -> list[str]:
    """Statements as one line each, a trigger's repeat of its statement dropped (SQLite
    reports a statement again as each of its triggers starts), and so are FTS5's reads
    of its own shadow tables ('main'.'x_config'): work of SQLite, run by whichever
    connection first needs it."""
    out: list[str] = []
    for sql in statements:
        text = " ".join(sql.split())
        if text.startswith("--") or "'main'." in text or is_maintenance(text):
            continue
        if not (out and out[-1] == text):
            out.append(text)
    return out


@contextmanager
def _raw_trace(con: Any) -> Iterator[list[str]]:
    seen: list[str] = []
    con.set_trace_callback(seen.append)
    try:
        yield seen
    finally:
        con.set_trace_callback(None)


def _check_group_sql(library: list[str], raw: list[str]) -> bool:
    """The library's group flush ran exactly the raw per-flush side's statements."""
    lib, want = _collapsed(library), _collapsed(raw)
    if lib == want:
        return True
    print(
        f"MISMATCH [{NAME}, group]: the library's SQL differs from the raw side's; the "
        f"ratio would compare different work.\n  library: {lib}\n  raw:     {want}",
        file=sys.stderr,
    )
    return False


LONG_SESSION = "bench-long-session"


def long_case(
    store: Any,
    con: Any,
    corpus: Corpus,
    *,
    size: int,
    runs: int,
    flushes: int,
    long_len: int,
) -> Result:
    """Flushes of ``size`` onto the long session (already in both copies), library
    against raw sqlite3 writing the same rows in one transaction; interleaved, the side
    going first alternating. Fails (SystemExit) unless both run the same statements."""
    cur = con.cursor()
    writer = store.transcript_writer(LONG_SESSION)
    writer.flush([])  # loads the session's stored uids once, outside the timing
    msgs = corpus.messages(size * (1 + 2 * runs * flushes), seed_offset=505, plant=False)
    for m in msgs:
        m["uid"] = new_uid()
    check, msgs = msgs[:size], msgs[size:]
    batches = [msgs[i : i + size] for i in range(0, len(msgs), size)]
    lib_runs = [batches[(2 * i) * flushes : (2 * i + 1) * flushes] for i in range(runs)]
    raw_runs = [
        [
            (len(b), tool_calls_of(b), raw_rows(LONG_SESSION, b))
            for b in batches[(2 * i + 1) * flushes : (2 * i + 2) * flushes]
        ]
        for i in range(runs)
    ]

    raw_merge = RawFtsMerge()

    def raw_flush(count: int, tool_calls: int, rows: list[tuple[Any, ...]]) -> None:
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute(RAW_UPDATE_COUNTERS, (count, tool_calls, LONG_SESSION))
            if cur.rowcount == 0:
                raise LookupError(LONG_SESSION)
            raw_insert_rows(cur, rows)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        raw_merge.after_commit(cur, count)  # the store's FTS merge, when due

    # The same batch, same uids and timestamps, onto the same session of both copies:
    # even the expanded literals must agree.
    with trace_sql(store) as lib_seen:
        r = writer.flush(check)
    assert r.written == size and r.error is None, r
    with _raw_trace(con) as raw_seen:
        raw_flush(size, tool_calls_of(check), raw_rows(LONG_SESSION, check))
    if not _check_group_sql(lib_seen, raw_seen):
        raise SystemExit(f"{NAME}: the long session's flush SQL differs from the raw side's")

    def lib(i: int) -> None:
        for batch in lib_runs[i]:
            r = writer.flush(batch)
            assert r.written == size and r.error is None, r

    def raw(i: int) -> None:
        for f in raw_runs[i]:
            raw_flush(*f)

    result = Result(
        f"flush of {size} onto a {long_len // 1000}k-message session vs raw 1 txn",
        "ms",
        work=flushes,
        extra={"same_sql": True, "flush_size": size, "session_messages": long_len},
    )
    for i in range(runs):
        if i % 2 == 0:
            result.library.append(timed(lambda i=i: lib(i))[0])
            result.raw.append(timed(lambda i=i: raw(i))[0])
        else:
            result.raw.append(timed(lambda i=i: raw(i))[0])
            result.library.append(timed(lambda i=i: lib(i))[0])
    want = long_len + size * (1 + runs * flushes)
    count = "SELECT message_count, (SELECT count(*) FROM messages WHERE session_id = :s) "
    count += "FROM sessions WHERE id = :s"
    raw_n = tuple(con.execute(count, {"s": LONG_SESSION}).fetchone())
    lib_n = store.read(lambda c: tuple(c.exec_driver_sql(count, {"s": LONG_SESSION}).one()))
    assert raw_n == lib_n == (want, want), (raw_n, lib_n, want)
    cpu = (result.lib("cpu"), result.raw_value("cpu"))
    result.note = f"CPU {cpu[0]:.3f} vs {cpu[1]:.3f} ms a flush"
    result.extra.update({"library_cpu_ms": cpu[0], "raw_cpu_ms": cpu[1]})
    return result


def fill_long(store: Any, corpus: Corpus, n: int, *, chunk: int = 5000) -> None:
    """The long session: ``n`` corpus messages, ``chunk`` per transaction."""
    msgs = corpus.messages(n, seed_offset=404, plant=False)
    for start in range(0, n, chunk):
        with store.unit_of_work() as uow:
            uow.messages.append_many(LONG_SESSION, msgs[start : start + chunk])
            uow.commit()


def long_main(args: Any) -> dict[str, Any]:
    """``--only-long``: the long-session case alone."""
    long_len = args.long or (5_000 if args.quick else 20_000)
    runs = args.runs or (5 if args.quick else 15)
    flushes = args.long_flushes or (10 if args.quick else 40)
    size = args.flush_size
    corpus = Corpus()
    with workspace() as ws:
        store = new_store(ws.home("lib"), [LONG_SESSION])
        fill_long(store, corpus, long_len)
        checkpoint(store_db(store))
        raw_path = ws.root / "raw" / "state.db"
        copy_db(store_db(store), raw_path)
        con = raw_connect(raw_path)
        result = long_case(
            store, con, corpus, size=size, runs=runs, flushes=flushes, long_len=long_len
        )
        con.close()
        store.close()
    print_table(
        f"TranscriptWriter.flush onto one long session, {runs} interleaved runs of "
        f"{flushes} flushes (ms per flush)",
        [result],
        {result.name: f"target >= 0.8x; {result.note}"},
    )
    data = payload(
        NAME,
        {"long": long_len, "runs": runs, "flushes": flushes, "flush_size": size},
        [result],
    )
    write_json(args.json, data)
    return data


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--base", type=int, default=None, help="messages in the store before timing")
    p.add_argument("--per-run", type=int, default=None, help="messages flushed per run")
    p.add_argument("--flush-size", type=int, default=10, help="new messages per flush (group)")
    p.add_argument(
        "--long", type=int, default=None, help="messages of the long session (default 20,000)"
    )
    p.add_argument(
        "--long-flushes", type=int, default=None, help="flushes per run onto the long session"
    )
    p.add_argument(
        "--only-long", action="store_true", help="only the flushes onto the long session"
    )
    args = p.parse_args(argv)
    if args.only_long:
        return long_main(args)
    base = args.base or (5_000 if args.quick else 50_000)
    per_run = args.per_run or (300 if args.quick else 2_000)
    runs = args.runs or (3 if args.quick else 7)
    size = args.flush_size
    per_run -= per_run % size  # whole flushes
    long_len = args.long or (5_000 if args.quick else 20_000)
    long_runs = args.runs or (5 if args.quick else 15)
    long_flushes = args.long_flushes or (10 if args.quick else 40)
    sessions = session_ids()
    corpus = Corpus()

    with workspace() as ws:
        store = new_store(ws.home("lib"), [*sessions, LONG_SESSION])
        fill(store, corpus, base, sessions)
        fill_long(store, corpus, long_len)
        checkpoint(store_db(store))
        raw_path = ws.root / "raw" / "state.db"
        copy_db(store_db(store), raw_path)
        con = raw_connect(raw_path)
        cur = con.cursor()

        # Three library cases per run, plus a group for the SQL check; uid and
        # timestamp are set up front on both sides (the raw side needs them in its
        # tuples).
        msgs = corpus.messages(3 * per_run * runs + 1 + size, seed_offset=202, plant=False)
        for m in msgs:
            m["uid"] = new_uid()
        warm, check, msgs = msgs[0], msgs[1 : 1 + size], msgs[1 + size :]
        blocks = [msgs[i * per_run : (i + 1) * per_run] for i in range(3 * runs)]
        # Run i of each case writes to its own session (a writer is per session). The
        # group case's two raw sides write the same messages to two sessions of the raw
        # copy (a uid is unique per session).
        n = len(sessions)
        sid_one = [sessions[i % n] for i in range(runs)]
        sid_each = [sessions[(runs + i) % n] for i in range(runs)]
        sid_group = [sessions[(2 * runs + i) % n] for i in range(runs)]
        sid_group_raw = [sessions[(3 * runs + i) % n] for i in range(runs)]
        writers = {sid: store.transcript_writer(sid) for sid in set(sid_one + sid_each + sid_group)}

        def rows_of(sid: str, block: list[dict[str, Any]]) -> list[tuple[str, int, Any]]:
            return [(sid, tool_calls_of([m]), raw_rows(sid, [m])[0]) for m in block]

        raw_one = [
            (sid_one[i], len(blocks[i]), tool_calls_of(blocks[i]), raw_rows(sid_one[i], blocks[i]))
            for i in range(runs)
        ]
        raw_each = [rows_of(sid_each[i], blocks[runs + i]) for i in range(runs)]
        group_blocks = [blocks[2 * runs + i] for i in range(runs)]
        lib_groups = [
            [group_blocks[i][j : j + size] for j in range(0, per_run, size)] for i in range(runs)
        ]
        raw_group_per_msg = [rows_of(sid_group[i], group_blocks[i]) for i in range(runs)]
        raw_group_per_flush = [
            [
                (sid_group_raw[i], len(b), tool_calls_of(b), raw_rows(sid_group_raw[i], b))
                for b in lib_groups[i]
            ]
            for i in range(runs)
        ]

        raw_merge = RawFtsMerge()

        def raw_flush(sid: str, count: int, tool_calls: int, rows: list[tuple[Any, ...]]) -> None:
            """One transaction: the counters UPDATE, then the rows' INSERT (one execute
            for one row, multi-row INSERTs for several: what the library runs); then the
            store's FTS merge when due."""
            cur.execute("BEGIN IMMEDIATE")
            try:
                cur.execute(RAW_UPDATE_COUNTERS, (count, tool_calls, sid))
                if cur.rowcount == 0:
                    raise LookupError(sid)
                if len(rows) == 1:
                    cur.execute(RAW_INSERT, rows[0])
                else:
                    raw_insert_rows(cur, rows)
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            raw_merge.after_commit(cur, count)

        def raw_append(sid: str, tool_calls: int, row: tuple[Any, ...]) -> None:
            raw_flush(sid, 1, tool_calls, [row])

        # Warm every writer (it loads the session's uids once), outside the timing.
        for writer in writers.values():
            writer.flush([])
        first = writers[sid_one[0]]
        with capture_sql(store) as seen:
            result = first.flush([warm])
        assert result.written == 1 and result.error is None, result
        same = check_same_sql(NAME, seen, [RAW_UPDATE_COUNTERS, RAW_INSERT])
        raw_append(sid_one[0], tool_calls_of([warm]), raw_rows(sid_one[0], [warm])[0])
        # The group path, statement by statement: the same batch into the same session
        # of both copies (same uids, timestamps and counters, so even the expanded
        # literals must agree).
        with trace_sql(store) as lib_seen:
            result = first.flush(check)
        assert result.written == size and result.error is None, result
        with _raw_trace(con) as raw_seen:
            raw_flush(sid_one[0], size, tool_calls_of(check), raw_rows(sid_one[0], check))
        same_group = _check_group_sql(lib_seen, raw_seen)

        def lib_one(i: int) -> None:
            r = writers[sid_one[i]].flush(blocks[i])
            assert r.written == per_run and r.error is None, r

        def lib_each(i: int) -> None:
            writer = writers[sid_each[i]]
            growing: list[dict[str, Any]] = []
            for m in blocks[runs + i]:
                growing.append(m)
                writer.flush(growing)

        def lib_group(i: int) -> None:
            writer = writers[sid_group[i]]
            for batch in lib_groups[i]:
                r = writer.flush(batch)
                assert r.written == size and r.error is None, r

        def raw_run(batch: list[tuple[str, int, tuple[Any, ...]]]) -> None:
            for sid, tc, row in batch:
                raw_append(sid, tc, row)

        group_msg = Result(
            f"flush of {size} (1 txn) vs raw 1 msg/txn",
            "msg/s",
            work=per_run,
            extra={"same_sql": same_group, "flush_size": size},
        )
        group_flush = Result(
            f"flush of {size} (1 txn) vs raw 1 txn/flush",
            "msg/s",
            work=per_run,
            extra={"same_sql": same_group, "flush_size": size},
        )
        # library, raw per message, raw per flush; library, ...
        for i in range(runs):
            s, _ = timed(lambda i=i: lib_group(i))
            group_msg.library.append(s)
            group_flush.library.append(s)
            s, _ = timed(lambda i=i: raw_run(raw_group_per_msg[i]))
            group_msg.raw.append(s)
            s, _ = timed(lambda i=i: [raw_flush(*f) for f in raw_group_per_flush[i]])
            group_flush.raw.append(s)

        one = Result(
            f"flush, one call of {per_run} (1 txn) ({base // 1000}k in store)",
            "msg/s",
            work=per_run,
            extra={"same_sql": same},
        )
        interleave(one, runs, lib_one, lambda i: raw_flush(*raw_one[i]))
        each = Result(
            f"flush per message, list grows to {per_run}",
            "msg/s",
            work=per_run,
            extra={"same_sql": same},
        )
        interleave(each, runs, lib_each, lambda i: raw_run(raw_each[i]))

        long = long_case(
            store,
            con,
            corpus,
            size=size,
            runs=long_runs,
            flushes=long_flushes,
            long_len=long_len,
        )
        long_written = long_len + size * (1 + long_runs * long_flushes)

        health = store.health()
        lib_count = health.counts["messages"]
        raw_count = con.execute("SELECT count(*) FROM messages").fetchone()[0]
        lib_expected = base + 1 + size + 3 * per_run * runs + long_written
        raw_expected = lib_expected + per_run * runs  # the group case's two raw sides
        assert (lib_count, raw_count) == (lib_expected, raw_expected), (lib_count, raw_count)
        assert health.pending_files == 0
        con.close()
        store.close()

    results = [group_msg, group_flush, one, each, long]
    print_table(
        f"TranscriptWriter.flush, spool idle, {runs} interleaved runs of {per_run} messages",
        results,
        {
            group_msg.name: "target >= 2.5x",
            group_flush.name: "same SQL as the library",
            each.name: "target >= 0.75x",
            long.name: f"target >= 0.8x; {long.note}",
        },
    )
    data = payload(
        NAME,
        {
            "base": base,
            "per_run": per_run,
            "runs": runs,
            "flush_size": size,
            "long": long_len,
            "long_runs": long_runs,
            "long_flushes": long_flushes,
        },
        results,
    )
    write_json(args.json, data)
    if not same_group:
        raise SystemExit(f"{NAME}: the group flush's SQL differs from the raw side's")
    return data


if __name__ == "__main__":
    run_main(main)
