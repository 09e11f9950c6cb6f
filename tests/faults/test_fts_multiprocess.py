"""Two processes share a store whose search index gets damaged (seed 003, part 1).

Process B is a real subprocess with the store open, as a gateway would have it. Process
A (the test) damages the index and writes, which detaches the index. B then notices on
its own (the schema cookie changes when the triggers are dropped): its writes and
searches keep working, its searches answer from the canonical rows. While B holds the
store, a guarded rebuild is refused and names B; once B has closed, it runs.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import create_store_engine
from hermes_repo.holders import HolderLock
from hermes_repo.maintenance.fts_rebuild import REPAIR_COMMAND, guarded_rebuild
from hermes_repo.ops.doctor import diagnose
from tests.support import damage
from tests.support.fts_checks import (
    MODULE,
    SEED_ROWS,
    SEED_SESSION,
    like_search_ids,
    read_state,
    ro_connect,
)

TIMEOUT_S = 60.0

# Process B: open the store, then answer one JSON command per line until "close".
PEER = textwrap.dedent(
    """
    import json, os, sys
    from hermes_repo import StateStore

    store = StateStore.open(sys.argv[1])
    print(json.dumps({"pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "append":
                message = {"role": "user", "content": cmd["content"]}
                out = {"id": store.append_message(cmd["session"], message)}
            elif cmd["op"] == "search":
                hits = store.search(cmd["query"], limit=1000)
                out = {"ids": [h.message_id for h in hits], "stale": store.health().fts_stale}
            else:
                store.close()
                out = {"closed": True}
        except Exception as exc:  # reported to the test, which fails on it
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)
        if cmd["op"] == "close":
            break
    """
)


class Peer:
    """Process B: a subprocess holding the store open, driven line by line."""

    def __init__(self, home: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PEER, str(home)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.pid = int(self._reply()["pid"])

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def _reply(self) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=TIMEOUT_S)
        except queue.Empty:
            self.proc.kill()
            _, err = self.proc.communicate()
            pytest.fail(f"process B did not answer: {err}")
        out = json.loads(line)
        assert isinstance(out, dict)
        assert "error" not in out, out["error"]
        return out

    def call(self, op: str, **args: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        """Close B's store and wait for B to exit."""
        if self.proc.poll() is None:
            assert self.call("close") == {"closed": True}
            assert self.proc.wait(timeout=TIMEOUT_S) == 0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=TIMEOUT_S)


def _guarded_rebuild(db: Path) -> Any:
    """What `hermes-repo sessions repair` runs, from a process that holds nothing."""
    engine = create_store_engine(db)
    try:
        return guarded_rebuild(engine, db, HolderLock(db), automatic=False)
    finally:
        engine.dispose()


def test_other_process_notices_a_detached_index_and_a_rebuild_waits_for_it(
    seeded_home: Path,
) -> None:
    db = seeded_home / "state.db"
    peer = Peer(seeded_home)
    try:
        # B is idle between calls: A can checkpoint and damage the file under it.
        damage.fts_delete_averages(db, module=MODULE)
        with StateStore.open(seeded_home) as store:
            a_id = store.append_message(SEED_SESSION, {"role": "user", "content": "A zephyr"})
        assert read_state(db).detached

        b_id = peer.call("append", session=SEED_SESSION, content="B zephyr")["id"]
        found = peer.call("search", query="zephyr")
        assert found["stale"] is True
        assert set(found["ids"]) == {a_id, b_id}
        with ro_connect(db) as con:  # the LIKE fallback's answers, newest first
            assert found["ids"] == like_search_ids(con, "zephyr")
            assert peer.call("search", query="amber")["ids"] == like_search_ids(con, "amber")

        # The doctor reads beside B without writing, and names the fix.
        digest = damage.file_digest(db)
        report = diagnose(seeded_home)
        assert damage.file_digest(db) == digest
        # ... and names B, which must stop before that fix can run.
        assert [f.code for f in report.findings] == ["fts-stale", "store-held"]
        assert f"hermes-repo --home {seeded_home} sessions repair" in report.findings[0].fix
        assert str(peer.pid) in report.findings[1].summary

        refused = _guarded_rebuild(db)
        assert not refused.ran and not refused.ok
        assert f"another process (pid {peer.pid}) has the store open" in refused.reason
        assert REPAIR_COMMAND in refused.reason
        with StateStore.open(seeded_home) as store:  # an open postpones it too
            assert store.last_rebuild is None
        assert read_state(db).detached

        peer.close()
        outcome = _guarded_rebuild(db)
        assert outcome.ran and outcome.ok, outcome.reason
    finally:
        peer.kill()

    state = read_state(db)
    assert state.live
    assert state.messages == SEED_ROWS + 2
    with StateStore.open(seeded_home) as store:
        assert not store.health().fts_stale
        assert {h.message_id for h in store.search("zephyr")} == {a_id, b_id}


def test_a_process_that_searched_before_the_index_was_detached_notices_it_next_time(
    seeded_home: Path,
) -> None:
    """B has searched once (the index was live then, and B's connection knows it); A
    detaches the index and writes. B's next search must answer from the canonical rows
    (A's new message, which the detached index never saw, included)."""
    db = seeded_home / "state.db"
    peer = Peer(seeded_home)
    try:
        first = peer.call("search", query="amber")
        assert first["stale"] is False
        with ro_connect(db) as con:  # ranked by the index: the same rows, another order
            assert sorted(first["ids"]) == sorted(like_search_ids(con, "amber"))

        damage.fts_delete_averages(db, module=MODULE)
        with StateStore.open(seeded_home) as store:
            a_id = store.append_message(SEED_SESSION, {"role": "user", "content": "A zephyr"})
        assert read_state(db).detached

        found = peer.call("search", query="zephyr")
        assert found["stale"] is True
        assert found["ids"] == [a_id]
        peer.close()
    finally:
        peer.kill()
