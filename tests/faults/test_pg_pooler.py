"""The store behind PgBouncer in transaction mode, and the pooler failing under writers.

In transaction mode each transaction may run on another server connection, shared with
other clients: nothing may outlive a transaction on the server side (a prepared
statement, a ``SET``, an advisory lock). The store's everyday work runs through a
pooler with ONE server connection per database, so two stores share it for every
transaction, and afterwards that connection holds no prepared statement, no advisory
lock and the server's default settings. A store in a schema of its own
(``?hermes_schema=``) is refused by PgBouncer's startup check, and the store's error
says to set the role's search_path instead.

Then four writer processes flush through a pooler while it is told to ``RECONNECT``,
its clients and server connections are killed (``KILL``, the admin console) and the
process itself is killed and started again: every acknowledged message is stored
exactly once, each writer's in its own order, counters equal to the rows, nothing left
in a spool.

The pooler of ``HERMES_TEST_PGBOUNCER_URL`` (CI starts one) serves the first tests when
set; otherwise, and for the fault test always, each test starts its own in front of the
server of ``HERMES_TEST_PG_URL`` (the ``pgbouncer`` program is needed: without it the
tests skip, or fail when ``HERMES_TEST_REQUIRE_PG=1``).
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from hermes_repo import ServerConfigError, StateStore, TranscriptWriter
from tests.support import pg
from tests.support.pg import PgServer
from tests.support.pg_cluster import Rows, copied_database
from tests.support.pg_ha_worker import check_exactly_once, collect, spawn
from tests.support.processes import reaped
from tests.support.spooling import pending_files
from tests.support.summary import record

pytestmark = pytest.mark.pg

WRITERS = ("p1", "p2", "p3", "p4")
PER_WRITER = int(os.environ.get("HERMES_POOLER_MESSAGES", "150"))


def _need_pgbouncer() -> None:
    if pg.find_pgbouncer() is None:
        why = "pgbouncer is not installed (Debian: apt-get install pgbouncer)"
        if os.environ.get(pg.REQUIRE_ENV) == "1":
            pytest.fail(f"{pg.REQUIRE_ENV}=1 but {why}")
        pytest.skip(why)


@pytest.fixture
def own_pooler(pg_server: PgServer) -> Iterator[tuple[str, Path]]:
    """A pooler this test owns (it may kill it): its URL and folder."""
    _need_pgbouncer()
    folder = Path(tempfile.mkdtemp(prefix="hermes-pgbouncer-"))
    try:
        yield pg.start_pgbouncer(folder, pg_server.url.render_as_string(False)), folder
    finally:
        pg.stop_pgbouncer(folder, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)


def _through(pooled: str, database_url: str) -> str:
    """The database of ``database_url`` reached through the pooler at ``pooled``."""
    return make_url(pooled).set(database=make_url(database_url).database).render_as_string(False)


def _one_connection_pooler(pg_server: PgServer) -> Iterator[str]:
    _need_pgbouncer()
    folder = Path(tempfile.mkdtemp(prefix="hermes-pgbouncer-"))
    try:
        yield pg.start_pgbouncer(folder, pg_server.url.render_as_string(False), pool_size=1)
    finally:
        pg.stop_pgbouncer(folder, signal.SIGKILL)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def shared_connection_pooler(pg_server: PgServer) -> Iterator[str]:
    """A pooler whose every client shares one server connection per database."""
    yield from _one_connection_pooler(pg_server)


def _server_state(pooled_db: str) -> tuple[object, ...]:
    """What the pooled server connection carries from earlier transactions."""
    row = Rows(pooled_db).query(
        "SELECT (SELECT count(*) FROM pg_prepared_statements), "
        "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'), "
        "current_setting('lock_timeout'), current_setting('default_transaction_read_only'), "
        "current_setting('transaction_isolation')"
    )
    return row[0]


def test_two_stores_sharing_one_pooled_connection_leave_no_session_state(
    pg_server: PgServer, shared_connection_pooler: str, tmp_path: Path
) -> None:
    # An empty database: the migrations themselves run through the pooler (their
    # advisory lock is a transaction's, released by its own COMMIT).
    name = pg_server.new_name("pooled")
    direct = pg_server.create(name).render_as_string(False)
    pooled = _through(shared_connection_pooler, direct)
    try:
        before = _server_state(pooled)
        with (
            StateStore.open(tmp_path / "a", url=pooled) as a,
            StateStore.open(tmp_path / "b", url=pooled) as b,
        ):
            for store, sid in ((a, "sa"), (b, "sb"), (a, "sw")):
                store.write(lambda uow, sid=sid: uow.sessions.ensure(sid))
            # The same statements many times from both: a store that prepared them on
            # the server (psycopg does after 5 runs) would meet the other's prepared
            # statement of the same name on the shared connection.
            for i in range(12):
                for store, sid in ((a, "sa"), (b, "sb")):
                    store.append_message(sid, {"role": "user", "content": f"pooled {sid} {i}"})
                    assert len(store.load_conversation(sid).messages) == i + 1
            writer = TranscriptWriter(tmp_path / "a", "sw", a)
            convo = [{"role": "user", "content": f"flushed {i}"} for i in range(7)]
            assert writer.flush(convo).ok
            assert [m["content"] for m in a.load_conversation("sw").messages] == [
                m["content"] for m in convo
            ]
            assert len(b.search("pooled")) > 0
            assert a.get_session("sb").message_count == 12
        assert _server_state(pooled) == before == (0, 0, "0", "off", "read committed")
        assert Rows(direct).counter_drift() == []
    finally:
        pg_server.drop(name)


def test_a_store_in_its_own_schema_behind_pgbouncer_is_refused_naming_the_role_setting(
    pg_server: PgServer, pg_template: str, shared_connection_pooler: str, tmp_path: Path
) -> None:
    # PgBouncer refuses the startup option that carries the schema: the store must not
    # fall back to another schema's tables, and says what to set instead.
    with copied_database(pg_server, pg_template, "schema") as url:
        pooled = make_url(_through(shared_connection_pooler, url))
        in_schema = pooled.update_query_dict({"hermes_schema": "tenant_a"})
        with pytest.raises(ServerConfigError) as refused:
            StateStore.open(tmp_path / "home", url=in_schema.render_as_string(False))
        assert "unsupported startup parameter: options" in str(refused.value)
        assert "ALTER ROLE" in str(refused.value) and "search_path" in str(refused.value)


def test_writers_through_a_pooler_lose_nothing_when_it_reconnects_kills_and_restarts(
    pg_server: PgServer, pg_template: str, own_pooler: tuple[str, Path], tmp_path: Path
) -> None:
    pooled_server, folder = own_pooler
    go = tmp_path / "go"
    total = PER_WRITER * len(WRITERS)
    with copied_database(pg_server, pg_template, "pooler") as direct:
        pooled = _through(pooled_server, direct)
        database = make_url(direct).database
        rows = Rows(direct)
        procs = [spawn(pooled, tmp_path / tag, tag, PER_WRITER, go) for tag in WRITERS]
        faults_mid_flush = 0
        with reaped(procs):
            go.touch()
            faults = [
                lambda: pg.pooler_command(pooled_server, "RECONNECT"),
                lambda: (
                    pg.pooler_command(pooled_server, f'KILL "{database}"'),
                    pg.pooler_command(pooled_server, f'RESUME "{database}"'),
                ),
                lambda: pg.restart_pgbouncer(folder, signal.SIGKILL),
            ]
            for step, fault in enumerate(faults, start=1):
                # Each fault once the writers are a quarter further (the rows say so).
                while rows.query("SELECT count(*) FROM messages")[0][0] < step * total // 4:
                    if all(p.poll() is not None for p in procs):
                        break
                    time.sleep(0.005)
                faults_mid_flush += any(p.poll() is None for p in procs)
                fault()
            told = [collect(tag, proc) for tag, proc in zip(WRITERS, procs, strict=True)]
        # Whatever was spooled is replayed by the next open (through the pooler too).
        for tag in WRITERS:
            StateStore.open(tmp_path / tag, url=pooled).close()
            assert pending_files(tmp_path / tag) == []
        sessions = {f"ha-{tag}": rows.uids(f"ha-{tag}") for tag in WRITERS}
        counts = check_exactly_once(sessions, told, PER_WRITER)
        record(
            "pg_pooler_faults",
            backend="postgresql+pgbouncer(transaction)",
            writers=len(WRITERS),
            faults="RECONNECT, KILL+RESUME, SIGKILL+restart",
            faults_mid_flush=faults_mid_flush,
            spooled=sum(t.spooled for t in told),
            **counts,
        )
        assert counts["lost"] == 0 and counts["doubled"] == 0
        assert counts["acknowledged"] == total  # every message was acknowledged
        assert rows.counter_drift() == [] and rows.duplicated_uids() == []
        # The faults hit running writers (else they proved nothing).
        assert faults_mid_flush == len(faults)
