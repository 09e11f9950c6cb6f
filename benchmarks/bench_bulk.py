"""Bulk append: 10k messages in one transaction (``uow.messages.append_many`` + commit)
vs raw multi-row ``INSERT``s.

Each run starts from a fresh copy of one migrated store holding the session (so every
run inserts into the same empty store, on both sides). The raw side runs ``BEGIN
IMMEDIATE``, the counters ``UPDATE``, the rows in multi-row ``INSERT``s of the sizes
the library uses (``raw_insert_rows``: powers of two up to 1,024 rows, then one
statement for the last 64 or fewer; both FTS triggers fire per row) and ``COMMIT``.
The raw parameter tuples are built before timing; the library converts the message
dicts while timed.

    python benchmarks/bench_bulk.py [--quick] [--runs N] [--json FILE] [--dataset realistic]
"""

from __future__ import annotations

import shutil
from typing import Any

from _common import (
    RAW_UPDATE_COUNTERS,
    RawFtsMerge,
    Result,
    capture_raw_sql,
    capture_sql,
    check_same_sql,
    copy_db,
    dataset_label,
    make_corpus,
    new_store,
    parser,
    payload,
    print_table,
    raw_connect,
    raw_insert_rows,
    raw_rows,
    run_main,
    store_db,
    timed,
    tool_calls_of,
    workspace,
    write_json,
)

from hermes_repo.store import StateStore

NAME = "bulk"
SESSION = "bulk-session"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None, help="messages per transaction")
    args = p.parse_args(argv)
    size = args.size or (2_000 if args.quick else 10_000)
    runs = args.runs or (3 if args.quick else 7)
    corpus = make_corpus(args)
    msgs = corpus.messages(size, seed_offset=202)
    tool_calls = tool_calls_of(msgs)

    with workspace() as ws:
        template = new_store(ws.home("template"), [SESSION])
        template_db = store_db(template)
        template.close()

        def lib_once(tag: str, capture: bool = False) -> Any:
            home = ws.home(f"lib-{tag}")
            copy_db(template_db, home / "state.db")
            store = StateStore.open(home)

            def work() -> None:
                with store.unit_of_work() as uow:
                    uow.messages.append_many(SESSION, msgs)
                    uow.commit()

            try:
                if capture:
                    with capture_sql(store) as seen:
                        work()
                    return seen
                sample, _ = timed(work)
                return sample
            finally:
                store.close()
                shutil.rmtree(home, ignore_errors=True)

        def raw_once(tag: str, capture: bool = False) -> Any:
            path = ws.root / f"raw-{tag}" / "state.db"
            copy_db(template_db, path)
            rows = raw_rows(SESSION, msgs)
            con = raw_connect(path)
            cur = con.cursor()
            raw_merge = RawFtsMerge()  # a fresh store's count, as the library's

            def work() -> None:
                cur.execute("BEGIN IMMEDIATE")
                try:
                    cur.execute(RAW_UPDATE_COUNTERS, (len(rows), tool_calls, SESSION))
                    if cur.rowcount == 0:
                        raise LookupError(SESSION)
                    raw_insert_rows(cur, rows)
                    cur.execute("COMMIT")
                except BaseException:
                    cur.execute("ROLLBACK")
                    raise
                raw_merge.after_commit(cur, len(rows))  # the store's FTS merge

            try:
                if capture:
                    with capture_raw_sql(con) as seen:
                        work()
                    return seen
                sample, _ = timed(work)
                n = con.execute("SELECT count(*) FROM messages").fetchone()[0]
                assert n == size, n
                return sample
            finally:
                con.close()
                shutil.rmtree(path.parent, ignore_errors=True)

        seen = lib_once("check", capture=True)
        raw_seen = raw_once("check", capture=True)
        same = check_same_sql(NAME, seen, raw_seen)
        raw_once("warm")
        result = Result(
            f"bulk append_many, {size // 1000}k msgs in 1 txn ({dataset_label(args)})",
            "msg/s",
            work=size,
            extra={"same_sql": same},
        )
        for i in range(runs):
            result.library.append(lib_once(str(i)))
            result.raw.append(raw_once(str(i)))

    print_table(
        f"bulk append, {size} messages in one transaction, {runs} interleaved runs",
        [result],
        {result.name: "target >= 0.95x"},
    )
    data = payload(NAME, {"size": size, "runs": runs, "dataset": dataset_label(args)}, [result])
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
