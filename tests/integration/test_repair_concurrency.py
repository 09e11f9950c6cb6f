"""Concurrent repairing loads of one malformed session: exactly one set of repairs.

Real processes on a real store file. The ``after-read`` mode holds every worker at a
barrier right after its read transaction, so all of them have planned a repair from the
same malformed rows before any opens its write unit: the worst interleaving, forced
rather than hoped for. The losers must re-read under the write lock, find nothing left
to repair, and write nothing (no lost update, no row archived twice).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from hermes_repo import StateStore
from hermes_repo.transcript.reconcile import reconcile_session
from hermes_repo.transcript.repair import violations
from tests.support.processes import reaped
from tests.support.retries import RETRY_LOGGER
from tests.support.transcripts import EXPECTED_ARCHIVED, MALFORMED, raw_connect, seed

WORKER = r"""
import json, pathlib, sys, time
from hermes_repo import StateStore
from hermes_repo.transcript.reconcile import reconcile_session

home, sid, tag, tags, barrier, mode = sys.argv[1:7]
barrier = pathlib.Path(barrier)
tags = tags.split(",")

def wait_for(prefix):
    deadline = time.monotonic() + 60
    while not all((barrier / f"{prefix}-{t}").exists() for t in tags):
        if time.monotonic() > deadline:
            raise SystemExit(f"barrier {prefix} timed out")
        time.sleep(0.001)

store = StateStore.open(home)
if mode == "after-read":
    # Hold every worker inside its read transaction, after it planned a repair.
    from hermes_repo.transcript import reconcile
    original, held = reconcile._Snapshot.read.__func__, []
    def read(cls, *args):
        out = original(cls, *args)
        if not held:
            held.append(True)
            (barrier / f"read-{tag}").touch()
            wait_for("read")
        return out
    reconcile._Snapshot.read = classmethod(read)
(barrier / f"ready-{tag}").touch()
wait_for("go")
result = reconcile_session(store, sid)
store.close()
print(json.dumps({
    "repairs": result.repairs,
    "rows_written": result.rows_written,
    "path": result.path,
    "archived": [a.id for a in result.archived],
}))
"""


def run_workers(home: Path, sid: str, n: int, mode: str, barrier: Path) -> list[dict[str, Any]]:
    barrier.mkdir()
    tags = [f"w{i}" for i in range(n)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(home), sid, tag, ",".join(tags), str(barrier), mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in tags
    ]
    out = []
    with reaped(procs):
        # Start them together once every one has opened the store.
        deadline = time.monotonic() + 60
        while not all((barrier / f"ready-{t}").exists() for t in tags):
            assert time.monotonic() < deadline, "workers did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.005)
        for t in tags:
            (barrier / f"go-{t}").touch()
        for p in procs:
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0, stderr
            out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


@pytest.mark.parametrize(("mode", "workers"), [("after-read", 2), ("after-read", 4), ("free", 4)])
def test_concurrent_repairing_loads_repair_exactly_once(
    home: Path, tmp_path: Path, mode: str, workers: int, backend: str
) -> None:
    # On PostgreSQL the workers inherit HERMES_REPO_URL: they share the server database.
    with StateStore.open(home) as store:
        sid, ids = seed(store, MALFORMED)
        rows_before = store.load_conversation(sid, include_inactive=True, with_ids=True).messages

    results = run_workers(home, sid, workers, mode, tmp_path / "barrier")

    expected_archived = {ids[p] for p in EXPECTED_ARCHIVED}
    assert sum(r["repairs"] for r in results) == len(EXPECTED_ARCHIVED)
    winners = [r for r in results if r["repairs"]]
    assert len(winners) == 1
    assert set(winners[0]["archived"]) == expected_archived
    for loser in (r for r in results if not r["repairs"]):
        assert loser["rows_written"] == 0 and loser["archived"] == []
        if mode == "after-read":
            # It had planned a repair too; its stale write was refused (SQLite's
            # snapshot, the server's 40001 at the session row lock), and it re-planned
            # under the write lock.
            assert loser["path"] == "write_unit"
    if mode == "after-read":
        assert winners[0]["path"] == "same_transaction"

    with StateStore.open(home) as store:
        audit = store.load_conversation(sid, include_inactive=True, with_ids=True).messages
        replay = store.load_conversation(sid).messages
        assert store.load_conversation(sid, repair=True).repairs == 0
        with closing(raw_connect(store)) as conn:
            stamps = {
                r[0]
                for r in conn.execute(
                    "SELECT archived_at FROM messages WHERE session_id = ? AND active = 0", (sid,)
                )
            }
    assert [m["id"] for m in audit[: len(rows_before)]] == [m["id"] for m in rows_before]
    # The survivors' rows as they were, kept once (by the one writer that repaired).
    originals = audit[len(rows_before) :]
    assert len(originals) == 2
    assert all(m["archive_reason"].startswith("repair_original of #") for m in originals)
    assert {m["id"] for m in audit[: len(rows_before)] if m.get("active") is False} == (
        expected_archived
    )
    assert len(stamps) == 1  # archived by one write, never re-archived by another
    assert violations(replay) == []
    # The merges happened once: no text doubled by a second writer.
    assert replay[1]["content"] == "first question about zebras\n\nsecond part mentions quokkas"
    assert replay[3]["content"] == "let me look\nand also this"


def test_repair_waits_out_a_held_write_lock_and_clean_loads_do_not_wait(home: Path) -> None:
    with StateStore.open(home) as store:
        sid, _ = seed(store, MALFORMED)
        clean, _ = seed(
            store, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        )
        sent: list[str] = []
        event.listen(store.engine, "before_cursor_execute", lambda *a: sent.append(a[2]))
        replayed = threading.Event()

        class OnReplay(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                replayed.set()

        retry_log = logging.getLogger(RETRY_LOGGER)
        handler, level = OnReplay(logging.DEBUG), retry_log.level
        retry_log.addHandler(handler)
        retry_log.setLevel(logging.DEBUG)
        holder = store.driver.module.connect(str(store.path), isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            # A clean session needs no write lock: it loads while another writer holds
            # it, without asking for the lock and without a replay.
            assert store.load_conversation(clean, repair=True).repairs == 0
            assert sent and not [s for s in sent if "IMMEDIATE" in s]
            assert not replayed.is_set()

            outcome: list[Any] = []
            worker = threading.Thread(
                target=lambda: outcome.append(reconcile_session(store, sid)), daemon=True
            )
            worker.start()
            # Held past busy_timeout: the unit fails with BUSY and is replayed whole.
            assert replayed.wait(timeout=60)
            assert not outcome  # nothing is written while the lock is held
        finally:
            holder.execute("COMMIT")
            holder.close()
            retry_log.removeHandler(handler)
            retry_log.setLevel(level)
        worker.join(timeout=60)
        assert outcome and outcome[0].repairs == len(EXPECTED_ARCHIVED)
        assert store.load_conversation(sid, repair=True).repairs == 0
