"""A primary killed mid-flush and its synchronous standby promoted, three times over.

A primary and a streaming standby it waits for at every commit
(``synchronous_commit=on``, ``synchronous_standby_names='*'``), built with PostgreSQL's
own tools on loopback ports. Four writer processes flush on a multi-host URL
(``host=...&host=...&target_session_attrs=read-write``: each connect finds the node
that takes writes). While they flush the primary is stopped as in a crash
(``pg_ctl stop -m immediate``), the standby promoted (``pg_ctl promote``) and the old
primary rebuilt as the new one's standby (``pg_basebackup -R``); three times. The
writers reach the new primary within their budget or spool and replay: every message
they were told about is stored exactly once on the last primary, each writer's in its
own order, counters equal to the rows, nothing left in a spool.

Needs ``pg_basebackup``/``pg_ctl`` beside the test server's ``initdb`` (a ``pg`` test:
skipped without ``HERMES_TEST_PG_URL``, failed when ``HERMES_TEST_REQUIRE_PG=1``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from hermes_repo import StateStore
from tests.support.pg import REQUIRE_ENV, PgServer, find_binary
from tests.support.pg_cluster import Rows, replicated_pair
from tests.support.pg_ha_worker import check_exactly_once, collect, spawn
from tests.support.processes import reaped
from tests.support.spooling import pending_files
from tests.support.summary import record

pytestmark = [pytest.mark.pg, pytest.mark.slow]

WRITERS = ("f1", "f2", "f3", "f4")
FAILOVERS = 3
PER_WRITER = int(os.environ.get("HERMES_FAILOVER_MESSAGES", "150"))


def test_writers_lose_nothing_when_the_primary_dies_and_the_standby_takes_over(
    pg_server: PgServer, tmp_path: Path
) -> None:
    # pg_server only decides whether PostgreSQL tests run here (skip, or fail when
    # required); the servers this test kills are its own.
    del pg_server
    try:
        find_binary("pg_basebackup")
    except SystemExit as missing:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but {missing}")
        pytest.skip(str(missing))
    go = tmp_path / "go"
    total = PER_WRITER * len(WRITERS)
    with replicated_pair() as pair:
        assert pair.is_streaming_synchronously()
        url = pair.multi_host_url()
        procs = [spawn(url, tmp_path / tag, tag, PER_WRITER, go) for tag in WRITERS]
        mid_flush = 0
        with reaped(procs):
            go.touch()
            for step in range(1, FAILOVERS + 1):
                # Each failover once the writers are a quarter further (the rows say so).
                primary = Rows(pair.node_url(pair.primary))
                while primary.query("SELECT count(*) FROM messages")[0][0] < step * total // 4:
                    if all(p.poll() is not None for p in procs):
                        break
                    time.sleep(0.005)
                mid_flush += any(p.poll() is None for p in procs)
                pair.fail_over()
                assert pair.is_streaming_synchronously()
            told = [collect(tag, proc) for tag, proc in zip(WRITERS, procs, strict=True)]
        # Whatever was spooled is replayed by the next open, on the multi-host URL too.
        for tag in WRITERS:
            StateStore.open(tmp_path / tag, url=url).close()
            assert pending_files(tmp_path / tag) == []
        rows = Rows(pair.node_url(pair.primary))
        sessions = {f"ha-{tag}": rows.uids(f"ha-{tag}") for tag in WRITERS}
        counts = check_exactly_once(sessions, told, PER_WRITER)
        record(
            "pg_failover",
            backend="postgresql primary + synchronous standby",
            writers=len(WRITERS),
            failovers=FAILOVERS,
            failovers_mid_flush=mid_flush,
            spooled=sum(t.spooled for t in told),
            **counts,
        )
        assert counts["lost"] == 0 and counts["doubled"] == 0
        assert counts["acknowledged"] == total
        assert rows.counter_drift() == [] and rows.duplicated_uids() == []
        assert mid_flush == FAILOVERS  # every failover hit running writers
