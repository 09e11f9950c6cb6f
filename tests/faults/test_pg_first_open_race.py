"""Several hosts opening one fresh PostgreSQL database at the same moment.

Four processes (three ``StateStore.open``, one ``hermes-repo db upgrade --url``'s
code), started together through a barrier file, meet an empty database: every one
succeeds, exactly one of them applied the migrations, and ``alembic_version`` holds one
row. Without the migration lock the losers met a duplicate ``alembic_version`` table or
read the winner's half-committed schema as a damaged store ("restore from a backup").
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_repo import DatabaseBusyError, StateStore
from hermes_repo.schema import migrate
from hermes_repo.schema.server import MIGRATION_LOCK_KEY
from tests.support.pg import PgServer, RawPg
from tests.support.processes import reaped

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("open", "open", "upgrade", "open")


@pytest.fixture
def empty_url(pg_server: PgServer) -> Iterator[str]:
    name = pg_server.new_name("race")
    url = pg_server.create(name)
    yield url.render_as_string(hide_password=False)
    pg_server.drop(name)


def _wait_for(paths: list[Path], procs: list[subprocess.Popen[str]]) -> None:
    """Until every READY file exists (a worker that died first fails the test)."""
    while not all(p.exists() for p in paths):
        for proc in procs:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"a host ended before the barrier: {out}{err}")
        os.sched_yield()


def test_four_hosts_opening_a_fresh_database_at_once_all_open_after_one_migration(
    empty_url: str, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    ready = [tmp_path / f"ready-{i}" for i in range(len(HOSTS))]
    procs: list[subprocess.Popen[str]] = []
    with reaped(procs):
        for i, mode in enumerate(HOSTS):
            args = [empty_url, str(tmp_path / f"home-{i}"), mode, str(ready[i]), str(go)]
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "tests.support.pg_first_open_worker", *args],
                    cwd=ROOT,
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        _wait_for(ready, procs)
        go.touch()
        results = [proc.communicate(timeout=120) for proc in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, out + err
    applied = [int(out.split()[-1]) for out, _err in results]
    revisions = len(migrate.known_revisions())
    # One host applied every revision; the others found the schema at head.
    assert sorted(applied) == [0] * (len(HOSTS) - 1) + [revisions]
    raw = RawPg(empty_url)
    try:
        versions = raw.execute("SELECT version_num FROM alembic_version").fetchall()
        sessions = raw.execute("SELECT count(*) FROM sessions").fetchone()
    finally:
        raw.close()
    assert versions == [(migrate.head_revision(),)]
    assert sessions == (HOSTS.count("open"),)


def test_an_open_waiting_on_another_hosts_migration_past_its_budget_says_so(
    empty_url: str, tmp_path: Path
) -> None:
    # Another host holds the migration lock (as during a long upgrade): the open waits
    # its budget, then names that cause; once the lock is released it opens normally.
    holder = RawPg(empty_url)
    try:
        holder.execute("SELECT pg_advisory_lock(hashtext(?))", (MIGRATION_LOCK_KEY,))
        with pytest.raises(DatabaseBusyError) as caught:
            StateStore.open(tmp_path / "home", url=empty_url, write_budget_s=0.3)
        message = str(caught.value)
        assert "another process has been migrating" in message
        assert "restore" not in message and caught.value.elapsed_s is not None
        holder.execute("SELECT pg_advisory_unlock(hashtext(?))", (MIGRATION_LOCK_KEY,))
        StateStore.open(tmp_path / "home", url=empty_url).close()
    finally:
        holder.close()
