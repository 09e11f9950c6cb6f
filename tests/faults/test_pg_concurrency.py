"""Several hosts on one PostgreSQL database: one order, nothing lost or doubled.

Four processes (two appending one message per transaction, two flushing groups through
a ``TranscriptWriter``) write at once to one shared session and each to a session of
its own, while a ``REPEATABLE READ`` transaction stays open on the same tables. After:
every reported message is stored exactly once (by uid), ids give one total order that
keeps each writer's own order, the counters on ``sessions`` equal the rows, no spool
file is left, and the reader never held a writer up (the writers finished while it
was open, and it still saw its snapshot).

``HERMES_CONCURRENCY_MESSAGES`` (default 40) sets the messages per writer and session;
``HERMES_FAULT_SUMMARY=<file>`` records the counts (docs/reliability.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.support.pg import PgServer
from tests.support.pg_cluster import Rows, copied_database
from tests.support.processes import reaped
from tests.support.spooling import pending_files
from tests.support.summary import record

ROOT = Path(__file__).resolve().parents[2]
PER_WRITER = int(os.environ.get("HERMES_CONCURRENCY_MESSAGES", "40"))
WRITERS = (("w1", "append"), ("w2", "flush"), ("w3", "append"), ("w4", "flush"))


@pytest.fixture
def pg_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    with copied_database(pg_server, pg_template, "hosts") as url:
        yield url


def _spawn(url: str, home: Path, mode: str, tag: str, go: Path) -> subprocess.Popen[str]:
    args = [url, str(home), mode, tag, str(PER_WRITER), str(go)]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.pg_concurrency_worker", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_four_writers_on_one_session_keep_one_order_and_lose_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    homes = {tag: tmp_path / f"home-{tag}" for tag, _ in WRITERS}
    reader = psycopg.connect(make_url(pg_url).set(drivername="postgresql").render_as_string(False))
    reported: dict[str, list[tuple[str, str]]] = {}
    procs: list[subprocess.Popen[str]] = []
    with reaped(procs), reader:
        for tag, mode in WRITERS:
            procs.append(_spawn(pg_url, homes[tag], mode, tag, go))
        # A long read transaction on the tables the writers use, open all along.
        reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        seen_before = reader.execute("SELECT count(*) FROM messages").fetchone()
        reader.execute("SELECT count(*), sum(message_count) FROM sessions").fetchone()
        go.touch()
        for (tag, _mode), proc in zip(WRITERS, procs, strict=True):
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            lines = out.splitlines()
            assert lines[-1] == "SPOOLED 0", err
            reported[tag] = [tuple(line.split()[1:]) for line in lines[:-1]]  # type: ignore[misc]
        # Every writer finished while the read transaction was still open: it blocked
        # none of them, and it still reads its own snapshot.
        assert reader.execute("SELECT count(*) FROM messages").fetchone() == seen_before
        reader.rollback()

    rows = Rows(pg_url)
    stored = rows.query("SELECT id, session_id, uid FROM messages ORDER BY id")
    position = {(sid, uid): i for i, (_id, sid, uid) in enumerate(stored)}
    expected = {pair for pairs in reported.values() for pair in pairs}
    record(
        "pg_concurrency",
        backend="postgresql",
        writers=len(WRITERS),
        messages_per_writer_and_session=PER_WRITER,
        reported_durable=len(expected),
        checked=len(stored),
        lost=len(expected - position.keys()),
        duplicated=len(stored) - len(position),
    )
    assert len(expected) == 2 * PER_WRITER * len(WRITERS)
    assert set(position) == expected and len(stored) == len(expected)  # exactly once each
    shared = [uid for _id, sid, uid in stored if sid == "shared"]
    assert len(shared) == PER_WRITER * len(WRITERS)
    for tag, pairs in reported.items():
        # One total order by id that keeps each writer's own order, in every session.
        for sid in ("shared", f"solo-{tag}"):
            mine = [uid for s, uid in pairs if s == sid]
            assert mine == [f"{tag}-{sid}-{i}" for i in range(PER_WRITER)]
            assert [position[(sid, uid)] for uid in mine] == sorted(
                position[(sid, uid)] for uid in mine
            )
    assert rows.counter_drift() == [] and rows.duplicated_uids() == []
    assert rows.query(
        "SELECT message_count, tool_call_count FROM sessions WHERE id = ?", ("shared",)
    ) == [(PER_WRITER * len(WRITERS), (PER_WRITER // 5) * len(WRITERS))]
    assert all(pending_files(home) == [] for home in homes.values())
