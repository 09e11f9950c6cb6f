"""A PostgreSQL server that goes down and comes back, on a cluster these tests own.

While the server is down a transcript flush spools every message it cannot commit into
``home`` (fsynced, 0600) and raises nothing; opening a store is refused with an error
that names the server (never its password), while a writer without a store still
spools. Once the server is back, ``replay_pending`` (or the replay of a fresh open)
inserts each spooled message exactly once, in the conversation's order, with the
session's counters equal to its rows; a second recovery inserts nothing. A restart
while the pool holds connections costs the next write nothing: the dead connections
are discarded and the write succeeds.
"""

from __future__ import annotations

import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url

from hermes_repo import DatabaseBusyError, StateStore, TranscriptWriter
from hermes_repo.driver_errors import classify
from hermes_repo.errors import ErrorKind
from hermes_repo.transcript import spool
from tests.support.pg import PgServer
from tests.support.pg_cluster import OwnCluster, Rows, own_cluster
from tests.support.spooling import convo, pending_files, uids

# Short enough that a flush against a stopped server spools within a second.
DOWN_BUDGET_S = 0.5


@pytest.fixture(scope="module")
def cluster(pg_server: PgServer) -> Iterator[OwnCluster]:
    # pg_server only decides whether PostgreSQL tests run here (skip, or fail when
    # required); the server these tests stop is their own.
    del pg_server
    with own_cluster() as owned:
        yield owned


@pytest.fixture
def cluster_up(cluster: OwnCluster) -> Iterator[OwnCluster]:
    """The cluster, running at the start of the test and again after it."""
    yield cluster
    cluster.up()  # a test that failed while the server was down leaves it running


def _open(home: Path, url: str, **kw: Any) -> StateStore:
    return StateStore.open(home, url=url, **kw)


def _fresh(cluster: OwnCluster, label: str, tmp_path: Path) -> tuple[str, Path, Rows]:
    """A new database on the cluster, the home folder for its spool, and its rows."""
    url = cluster.new_database(label)
    return url, tmp_path / "home", Rows(url)


def _stored_once_in_order(rows: Rows, sid: str, messages: list[dict[str, Any]]) -> None:
    assert rows.uids(sid) == uids(messages)
    assert rows.counter_drift() == [] and rows.duplicated_uids() == []


def _spooled_uids(home: Path, sid: str) -> list[str]:
    contents = spool.read_spool(home, spool.pending_name(sid))
    assert contents is not None and contents.rejected == []
    return [r.message["uid"] for r in contents.records]


def test_a_flush_while_the_server_is_down_spools_and_recovery_inserts_each_once(
    cluster_up: OwnCluster, tmp_path: Path
) -> None:
    url, home, rows = _fresh(cluster_up, "outage", tmp_path)
    messages = convo(2)
    with _open(home, url) as store:
        writer = TranscriptWriter(home, "s-outage", store, write_budget_s=DOWN_BUDGET_S)
        assert writer.flush(messages).written == 2
        cluster_up.down()

        messages += convo(3, start=2)
        first = writer.flush(messages)
        messages += convo(2, start=5)
        second = writer.flush(messages)  # the list grows while the server is still down
        # Nothing raised; every new message is safe on disk, none only in memory.
        assert (first.written, first.spooled, first.unsaved) == (0, 3, 0)
        assert (second.written, second.spooled, second.unsaved) == (0, 5, 0)
        assert first.error is not None and first.error.startswith(ErrorKind.TRANSIENT.value)
        assert pending_files(home) == [spool.pending_name("s-outage")]
        path = writer.pending_path
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert _spooled_uids(home, "s-outage") == uids(messages)[2:]  # each once, in order

        # Opening is refused while the server is down, naming it without the password;
        # a writer without a store still spools.
        secret = make_url(url).set(password="s3cret-pw").render_as_string(hide_password=False)
        with pytest.raises(DatabaseBusyError) as refused:
            _open(tmp_path / "other", secret, write_budget_s=DOWN_BUDGET_S)
        assert "s3cret-pw" not in str(refused.value)
        assert f"127.0.0.1:{cluster_up.port}" in str(refused.value)
        assert classify(refused.value) is ErrorKind.TRANSIENT
        # Its records name the server it could not open (``target``): this store
        # replays them; without it they would name the home's SQLite file and stay.
        lone = convo(2, start=100)
        alone = TranscriptWriter(home, "s-no-store", None, target=secret).flush(lone)
        assert (alone.written, alone.spooled, alone.unsaved) == (0, 2, 0)
        no_store = spool.sessions_dir(home) / spool.pending_name("s-no-store")
        assert b"s3cret-pw" not in no_store.read_bytes()

        cluster_up.up()
        report = store.replay_pending()
        assert report.errors == () and not report.blocked
        assert report.inserted == 5 + 2 and report.kept == 0
        assert pending_files(home) == []
        assert rows.uids("s-outage") == uids(messages)  # committed first, then the spool
        assert rows.uids("s-no-store") == uids(lone)
        assert rows.counter_drift() == [] and rows.duplicated_uids() == []

        again = store.replay_pending()
        assert (again.files, again.inserted) == (0, 0)
        # The writer goes on: the messages the recovery stored count as durable (by
        # uid), and nothing of the spool is written twice.
        messages += convo(1, start=7)
        after = writer.flush(messages)
        assert after.ok and uids(messages)[-1] in after.written_uids
    _stored_once_in_order(rows, "s-outage", messages)


def test_a_fresh_open_after_the_outage_replays_the_spool_exactly_once(
    cluster_up: OwnCluster, tmp_path: Path
) -> None:
    url, home, rows = _fresh(cluster_up, "reopen", tmp_path)
    messages = convo(1)
    with _open(home, url) as store:
        writer = TranscriptWriter(home, "s-reopen", store, write_budget_s=DOWN_BUDGET_S)
        assert writer.flush(messages).ok
        cluster_up.down()
        messages += convo(4, start=1)
        assert writer.flush(messages).spooled == 4
    cluster_up.up()

    with _open(home, url) as reopened:
        assert reopened.last_replay is not None
        assert reopened.last_replay.inserted == 4
        assert pending_files(home) == []
        assert rows.uids("s-reopen") == uids(messages)
        assert reopened.get_session("s-reopen").message_count == 5
    with _open(home, url) as third:  # a later open finds nothing left to replay
        assert third.last_replay is not None and third.last_replay.inserted == 0
    _stored_once_in_order(rows, "s-reopen", messages)


def test_a_restart_while_the_pool_holds_connections_costs_the_next_write_nothing(
    cluster_up: OwnCluster, tmp_path: Path
) -> None:
    url, home, rows = _fresh(cluster_up, "restart", tmp_path)
    with _open(home, url) as store:
        writer = TranscriptWriter(home, "s-restart", store)
        messages = convo(2)
        assert writer.flush(messages).ok
        assert store.engine.pool.checkedin() >= 1  # connections the restart will kill
        cluster_up.restart()
        store.append_message("s-restart", {"role": "user", "content": "after the restart"})
        messages += convo(2, start=2)
        assert writer.flush(messages).ok
        assert pending_files(home) == []

        # Down in the middle of a flush that may wait longer than the outage: the unit
        # is replayed until the server is back, and nothing is spooled.
        cluster_up.down("fast")
        restarter = threading.Timer(1.0, cluster_up.up)
        restarter.start()
        try:
            messages += convo(3, start=4)
            result = writer.flush(messages)
        finally:
            restarter.join()
        assert (result.written, result.spooled) == (3, 0), result.error
    stored = rows.uids("s-restart")
    assert len(stored) == 8 and len(set(stored)) == 8
    assert [u for u in stored if u in set(uids(messages))] == uids(messages)
    assert rows.counter_drift() == [] and rows.duplicated_uids() == []
