"""Many processes at once: nothing lost, nothing doubled, the indexes consistent.

``HERMES_CONCURRENCY_MESSAGES`` (default 60) sets the messages per writer;
``HERMES_FAULT_SUMMARY=<file>`` records the run's counts there as JSON (docs/reliability.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text

from hermes_repo import StateStore
from hermes_repo.schema import fts
from tests.support.summary import record

ROOT = Path(__file__).resolve().parents[2]
PER_WRITER = int(os.environ.get("HERMES_CONCURRENCY_MESSAGES", "60"))


def _spawn(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.concurrency_worker", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@contextmanager
def _workers() -> Iterator[list[subprocess.Popen[str]]]:
    """Every worker started in the block is stopped when it ends, on failure too: a
    reader that never sees its stop file (or a writer stuck on a lock) must not outlive
    the test."""
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        for proc in procs:
            proc.communicate()  # reaps it and closes its pipes


def test_six_writers_and_a_reader_lose_and_double_nothing(home: Path, tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    # Four writers on their own sessions, two sharing one session.
    plan = [("solo-1", "w1"), ("solo-2", "w2"), ("solo-3", "w3"), ("solo-4", "w4")]
    plan += [("shared", "w5"), ("shared", "w6")]
    reported: dict[str, str] = {}
    with _workers() as procs:
        reader = _spawn(str(home), "search", str(stop))
        procs.append(reader)
        writers = []
        for sid, tag in plan:
            writers.append(_spawn(str(home), "write", sid, str(PER_WRITER), tag))
            procs.append(writers[-1])
        try:
            for (sid, _tag), proc in zip(plan, writers, strict=True):
                out, err = proc.communicate(timeout=300)
                assert proc.returncode == 0, err
                for line in out.splitlines():
                    assert line.startswith("OK "), line
                    reported[line[3:]] = sid
        finally:
            stop.touch()  # the reader ends by itself once the writers are done or failed
        out, err = reader.communicate(timeout=60)
    assert reader.returncode == 0, err
    assert out.strip().endswith("ERRORS 0"), out[-2000:]
    assert len(reported) == PER_WRITER * len(plan)

    with StateStore.open(home) as store, store.engine.connect() as conn:
        rows = conn.execute(text("SELECT uid, session_id FROM messages")).all()
        stored = {r.uid for r in rows}
        record(
            "concurrency",
            iterations=1,
            writers=len(plan),
            messages_per_writer=PER_WRITER,
            reader_searches=int(out.split("SEARCHES ")[-1].split()[0]),
            reported_durable=len(reported),
            checked=len(rows),
            lost=len(reported.keys() - stored),
            duplicated=len(rows) - len(stored),
        )
        assert sorted(r.uid for r in rows) == sorted(reported)  # exactly once each
        assert {r.uid: r.session_id for r in rows} == reported
        shared = store.load_conversation("shared").messages
        assert len(shared) == 2 * PER_WRITER
        for sid in {s for s, _ in plan}:
            with store.unit_of_work() as uow:
                assert uow.sessions.require(sid).message_count == len(
                    store.load_conversation(sid).messages
                )
        assert fts.integrity_errors(conn) == {}  # rank = 1: also sees an index left behind
        matched = conn.execute(
            text("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'concurrent'")
        ).scalar_one()
        assert matched == len(reported)
