"""hermes_repo vs Hermes Agent's own store (``hermes_state.SessionDB``, hermes-agent 0.19.0).

Both stores hold the same realistic corpus (``corpus_realistic.py``), filled before
timing; then the same workloads run on both, interleaved (hermes_repo, peer, hermes_repo,
peer ...), in one process:

* append: one message per transaction, round-robin over the sessions
  (``store.append_message`` vs ``SessionDB.append_message``);
* batch: 1,000 messages in one transaction into a new session (``append_many`` in one
  unit of work vs ``SessionDB.replace_messages``, the peer's only many-message write);
* load: the long session (``store.load_conversation`` vs
  ``SessionDB.get_messages_as_conversation``);
* search: planted terms of several frequencies, 20 results (``store.search`` vs
  ``SessionDB.search_messages``);
* file size: main file plus WAL after a checkpoint, of the filled stores.

The peer is installed on first use with ``pip install --no-deps hermes-agent==0.19.0``
into this interpreter's environment (``hermes_state`` runs on the standard library
alone); nothing of it is copied here. The peer always uses the standard ``sqlite3``
module, with its own settings: ``journal_mode=WAL``, SQLite's default
``synchronous=FULL``, a WAL checkpoint every 50 writes and an FTS ``optimize`` every
1,000. hermes_repo uses its driver (``HERMES_REPO_DRIVER=stdlib`` gives it the same
SQLite library as the peer) with ``synchronous=NORMAL``. The ratio is hermes_repo
throughput / peer throughput: above 1, hermes_repo is faster.

    python benchmarks/bench_peer.py [--quick] [--scale S] [--runs N] [--json FILE]
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import (
    CJK3_TERM,
    COMMON_TERM,
    MID_TERM,
    SELECTIVE_TERM,
    Result,
    checkpoint,
    driver,
    interleave,
    parser,
    payload,
    print_table,
    realistic_store,
    run_main,
    scale_of,
    store_db,
    workspace,
    write_json,
)
from corpus_realistic import LONG_SESSION, RealisticCorpus

NAME = "peer"
PEER = "hermes-agent"
PEER_VERSION = "0.19.0"
BATCH = 1000


def peer_module() -> Any:
    """``hermes_state``, installed (``--no-deps``, pinned) when missing."""
    try:
        have = importlib.metadata.version(PEER)
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have != PEER_VERSION:
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", f"{PEER}=={PEER_VERSION}"],
            check=True,
        )
        importlib.invalidate_caches()
    return importlib.import_module("hermes_state")


def peer_kwargs(m: dict[str, Any]) -> dict[str, Any]:
    """A message dict as ``SessionDB.append_message``'s arguments."""
    kw: dict[str, Any] = {"role": m["role"], "content": m.get("content")}
    for key in ("tool_calls", "tool_call_id", "finish_reason", "timestamp"):
        if m.get(key) is not None:
            kw[key] = m[key]
    if m["role"] == "tool" and m.get("name"):
        kw["tool_name"] = m["name"]
    return kw


def files_size(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--per-run", type=int, default=None, help="messages appended per run")
    args = p.parse_args(argv)
    hs = peer_module()
    scale = scale_of(args)
    runs = args.runs or (3 if args.quick else 7)
    per_run = args.per_run or (50 if args.quick else 200)
    corpus = RealisticCorpus()
    results: list[Result] = []

    with workspace() as ws:
        store, plan = realistic_store(ws.home("lib"), scale)
        peer_db = ws.home("peer") / "state.db"
        peer = hs.SessionDB(db_path=peer_db)
        for sid, msgs in corpus.conversations(plan):
            peer.create_session(sid, "cli", model="bench")
            for start in range(0, len(msgs), 2000):
                chunk = [peer_kwargs(m) for m in msgs[start : start + 2000]]
                if start == 0:
                    peer.replace_messages(sid, chunk)
                else:  # replace_messages would delete the first chunk
                    for m in chunk:
                        peer.append_message(sid, **m)
        checkpoint(store_db(store))
        peer._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        lib_size, peer_size = files_size(store_db(store)), files_size(peer_db)

        # append: one message per transaction, the same messages on both sides.
        extra = corpus.messages(per_run * runs * 2, seed_offset=9_001, plant=False)
        sids = plan.ids
        lib_plan = [(sids[i % len(sids)], m) for i, m in enumerate(extra[: per_run * runs])]
        peer_plan = [(sid, peer_kwargs(m)) for sid, m in lib_plan]

        def lib_append(i: int) -> None:
            for sid, m in lib_plan[i * per_run : (i + 1) * per_run]:
                store.append_message(sid, m)

        def peer_append(i: int) -> None:
            for sid, kw in peer_plan[i * per_run : (i + 1) * per_run]:
                peer.append_message(sid, **kw)

        results.append(
            interleave(
                Result("append, 1 msg/txn", "msg/s", work=per_run), runs, lib_append, peer_append
            )
        )

        # batch: 1,000 messages in one transaction, into a new session each run.
        batch = corpus.messages(BATCH, seed_offset=9_002, plant=False)
        peer_batch = [peer_kwargs(m) for m in batch]
        with store.unit_of_work() as uow:
            for i in range(runs):
                uow.sessions.create("bench", id=f"batch-{i}", started_at=1.0)
            uow.commit()
        for i in range(runs):
            peer.create_session(f"batch-{i}", "cli", model="bench")

        def lib_batch(i: int) -> None:
            with store.unit_of_work() as uow:
                uow.messages.append_many(f"batch-{i}", batch)
                uow.commit()

        results.append(
            interleave(
                Result(f"batch, {BATCH:,} msgs in 1 txn", "msg/s", work=BATCH),
                runs,
                lib_batch,
                lambda i: peer.replace_messages(f"batch-{i}", peer_batch),
            )
        )

        # load: the long session.
        long_n = plan.sessions[0][1]
        lib_msgs = store.load_conversation(LONG_SESSION).messages
        peer_msgs = peer.get_messages_as_conversation(LONG_SESSION)
        assert len(lib_msgs) >= long_n and len(peer_msgs) >= long_n, (
            len(lib_msgs),
            len(peer_msgs),
        )
        results.append(
            interleave(
                Result(f"load, {long_n:,}-msg session", "msg/s", work=long_n),
                runs,
                lambda i: store.load_conversation(LONG_SESSION),
                lambda i: peer.get_messages_as_conversation(LONG_SESSION),
            )
        )

        # search: 20 results, terms of rising frequency.
        reps = 5
        for label, term in (
            ("selective", SELECTIVE_TERM),
            ("mid", MID_TERM),
            ("CJK 3 chars", CJK3_TERM),
            ("common", COMMON_TERM),
        ):
            lib_hits = store.search(term, limit=20)
            peer_hits = peer.search_messages(term, limit=20)
            r = Result(
                f"search {label} ({term}), 20 results",
                "ms",
                work=reps,
                note=f"hits returned: {len(lib_hits)} vs {len(peer_hits)}",
            )

            def lib_search(i: int, term: str = term) -> None:
                for _ in range(reps):
                    store.search(term, limit=20)

            def peer_search(i: int, term: str = term) -> None:
                for _ in range(reps):
                    peer.search_messages(term, limit=20)

            results.append(interleave(r, runs, lib_search, peer_search))

        peer.close()
        store.close()

    settings = {
        "hermes_repo": {
            "driver": driver().name,
            "sqlite": driver().sqlite_version,
            "journal_mode": driver().journal_mode,
            "synchronous": "NORMAL",
        },
        "peer": {
            "package": f"{PEER}=={PEER_VERSION}",
            "sqlite": sqlite3.sqlite_version,
            "journal_mode": "WAL",
            "synchronous": "FULL (SQLite's default; the peer does not set it)",
            "wal_checkpoint_every_writes": hs.SessionDB._CHECKPOINT_EVERY_N_WRITES,
            "fts_optimize_every_writes": hs.SessionDB._OPTIMIZE_EVERY_N_WRITES,
        },
    }
    print(settings)
    print_table(
        f"hermes_repo vs {PEER} {PEER_VERSION} SessionDB, realistic corpus x{scale:g} "
        f"({plan.total:,} msgs), {runs} interleaved runs; ratio = hermes_repo/peer throughput",
        results,
    )
    print(
        f"file size: hermes_repo {lib_size / 1e6:,.1f} MB, peer {peer_size / 1e6:,.1f} MB "
        f"(hermes_repo/peer {lib_size / peer_size:.2f})"
    )
    data = payload(
        NAME,
        {"scale": scale, "messages": plan.total, "runs": runs, "per_run": per_run},
        results,
    )
    data["settings"] = settings
    data["file_size"] = {"library_bytes": lib_size, "peer_bytes": peer_size}
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
