"""Real PostgreSQL faults meet the write core's one classification.

Each fault is produced on the server: a second connection holding a table lock past the
unit's ``lock_timeout``, the store's own backend terminated (``pg_terminate_backend``),
a deadlock of two connections taking row locks in opposite order, a ``statement_timeout``
and a server that refuses connections. What a caller sees is always a
``HermesRepoError``: transient faults are replayed whole within the budget, a timeout is
reported once, and none of the SQLite file rules (quarantine, holder lock, FTS detach)
fires.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import event, text

from hermes_repo import (
    DatabaseBusyError,
    HermesRepoError,
    NotFoundError,
    QueryTimeoutError,
    StateStore,
)
from hermes_repo.driver_errors import classify, pg_sqlstate
from hermes_repo.errors import ErrorKind
from hermes_repo.uow import UnitOfWork
from tests.support.pg import PgServer, free_port
from tests.support.stores import new_session


@pytest.fixture
def pg_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    name = pg_server.new_name("fault")
    url = pg_server.create(name, template=pg_template)
    yield url.render_as_string(hide_password=False)
    pg_server.drop(name)


@pytest.fixture
def pg_store(tmp_path: Path, pg_url: str) -> Iterator[StateStore]:
    store = StateStore.open(tmp_path / "pg-home", url=pg_url, write_budget_s=10)
    try:
        yield store
    finally:
        store.close()


def _admin(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)


def _sqlstates(exc: BaseException) -> list[str]:
    found, err = [], exc.__cause__
    while err is not None:
        state = pg_sqlstate(err)
        if state is not None:
            found.append(state)
        err = err.__cause__
    return found


def _no_sqlite_rules_fired(store: StateStore) -> None:
    assert not store.quarantined
    assert not any(p.name.startswith("state.db") for p in store.home.iterdir())


def test_a_lock_past_lock_timeout_is_replayed_whole_until_the_holder_lets_go(
    pg_store: StateStore, pg_url: str
) -> None:
    sid = new_session(pg_store)
    locker = _admin(pg_url)
    locker.autocommit = False
    locker.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")
    attempts = []

    def work(uow: UnitOfWork) -> int:
        attempts.append(1)
        if len(attempts) == 2:
            locker.rollback()  # the holder lets go only after the first attempt failed
        uow.connection.execute(text("SET LOCAL lock_timeout = '200ms'"))
        return uow.messages.append(sid, {"role": "user", "content": "after the lock"})

    try:
        pg_store.write(work)
    finally:
        locker.close()
    assert len(attempts) == 2
    assert [m["content"] for m in pg_store.load_conversation(sid).messages] == ["after the lock"]
    _no_sqlite_rules_fired(pg_store)


def test_a_lock_held_for_the_whole_budget_ends_as_busy_naming_lock_timeout(
    tmp_path: Path, pg_url: str
) -> None:
    with StateStore.open(tmp_path / "pg-home", url=pg_url, write_budget_s=1) as store:
        sid = new_session(store)
        locker = _admin(pg_url)
        locker.autocommit = False
        locker.execute("LOCK TABLE messages IN ACCESS EXCLUSIVE MODE")

        def work(uow: UnitOfWork) -> int:
            uow.connection.execute(text("SET LOCAL lock_timeout = '100ms'"))
            return uow.messages.append(sid, {"role": "user", "content": "never"})

        try:
            with pytest.raises(DatabaseBusyError, match="lock_timeout") as caught:
                store.write(work)
        finally:
            locker.close()
        assert caught.value.elapsed_s is not None and caught.value.elapsed_s >= 1
        assert _sqlstates(caught.value)[-1] == "55P03"
        assert store.load_conversation(sid).messages == []
        _no_sqlite_rules_fired(store)


def test_a_terminated_backend_between_two_writes_is_replaced_transparently(
    pg_store: StateStore, pg_url: str
) -> None:
    sid = new_session(pg_store)
    pg_store.append_message(sid, {"role": "user", "content": "one"})
    pid = pg_store.read(lambda conn: conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
    with _admin(pg_url) as admin:
        assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    pg_store.append_message(sid, {"role": "assistant", "content": "two"})
    contents = [m["content"] for m in pg_store.load_conversation(sid).messages]
    assert contents == ["one", "two"]
    _no_sqlite_rules_fired(pg_store)


def test_a_connection_killed_inside_a_unit_replays_the_whole_unit(
    pg_store: StateStore, pg_url: str
) -> None:
    sid = new_session(pg_store)
    attempts = []

    def work(uow: UnitOfWork) -> int:
        attempts.append(1)
        first = uow.messages.append(sid, {"role": "user", "content": "q", "uid": "u1"})
        if len(attempts) == 1:
            pid = uow.connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with _admin(pg_url) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        uow.messages.append(sid, {"role": "assistant", "content": "a", "uid": "u2"})
        return first

    pg_store.write(work)
    assert len(attempts) == 2
    stored = pg_store.load_conversation(sid).messages
    assert [m["uid"] for m in stored] == ["u1", "u2"]  # the first attempt left nothing
    assert pg_store.get_session(sid).message_count == 2
    _no_sqlite_rules_fired(pg_store)


def test_a_deadlock_victim_unit_is_replayed_and_both_transactions_finish(
    pg_store: StateStore, pg_url: str
) -> None:
    a, b = new_session(pg_store), new_session(pg_store)
    rival = _admin(pg_url)
    rival.autocommit = False
    # The rival waits long before looking for a deadlock: the store's unit is the one
    # that finds it and is aborted (40P01).
    rival.execute("SET LOCAL deadlock_timeout = '10s'")
    rival.execute("UPDATE sessions SET title = 'rival' WHERE id = %s", (b,))
    store_holds_a = threading.Event()
    rival_done: list[BaseException | None] = []

    def rival_takes_a() -> None:
        store_holds_a.wait(10)
        try:
            rival.execute("UPDATE sessions SET title = 'rival' WHERE id = %s", (a,))
            rival.commit()
            rival_done.append(None)
        except BaseException as exc:
            rival_done.append(exc)

    thread = threading.Thread(target=rival_takes_a)
    thread.start()
    attempts = []

    def work(uow: UnitOfWork) -> None:
        attempts.append(1)
        conn = uow.connection
        conn.execute(text("SET LOCAL deadlock_timeout = '200ms'"))
        conn.execute(text("UPDATE sessions SET model = 'store' WHERE id = :a"), {"a": a})
        store_holds_a.set()
        if len(attempts) == 1:
            # Let the rival queue behind our lock on a before we ask for b.
            conn.execute(text("SELECT pg_sleep(0.3)"))
        conn.execute(text("UPDATE sessions SET model = 'store' WHERE id = :b"), {"b": b})

    try:
        pg_store.write(work)
    finally:
        thread.join(20)
        rival.close()
    assert len(attempts) == 2 and rival_done == [None]
    assert pg_store.get_session(a).model == "store" and pg_store.get_session(b).model == "store"
    assert pg_store.get_session(a).title == "rival"


def test_a_statement_timeout_is_reported_once_not_retried(pg_store: StateStore) -> None:
    attempts = []

    def work(uow: UnitOfWork) -> None:
        attempts.append(1)
        uow.connection.execute(text("SET LOCAL statement_timeout = '100ms'"))
        uow.connection.execute(text("SELECT pg_sleep(2)"))

    with pytest.raises(QueryTimeoutError, match="statement_timeout") as caught:
        pg_store.write(work)
    assert attempts == [1]
    assert caught.value.kind is ErrorKind.TIMEOUT
    assert set(_sqlstates(caught.value)) == {"57014"}


def test_a_server_that_refuses_connections_is_transient_and_never_shows_the_password(
    tmp_path: Path,
) -> None:
    home = tmp_path / "pg-home"
    url = f"postgresql+psycopg://postgres:s3cret-pw@127.0.0.1:{free_port()}/nowhere"
    with pytest.raises(DatabaseBusyError) as caught:
        StateStore.open(home, url=url, write_budget_s=0.5)
    message = str(caught.value)
    assert "s3cret-pw" not in message
    assert "server is running and reachable" in message
    assert classify(caught.value) is ErrorKind.TRANSIENT
    assert isinstance(caught.value, HermesRepoError)
    # The driver's error stays reachable through the chain (SQLAlchemy wraps it).
    cause = caught.value.__cause__
    assert isinstance(getattr(cause, "orig", None), psycopg.OperationalError)
    assert not any(p.name.startswith("state.db") for p in home.iterdir())


# The one-message append keeps its connection between calls (no checkout ping per
# message); a kept connection the server lost is replaced transparently.


def _terminate_every_other_backend(url: str) -> int:
    with _admin(url) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def test_consecutive_appends_check_out_no_connection_after_the_first(
    pg_store: StateStore,
) -> None:
    sid = new_session(pg_store)
    pg_store.append_message(sid, {"role": "user", "content": "first"})
    checkouts: list[object] = []
    event.listen(pg_store.engine.pool, "checkout", lambda *a: checkouts.append(a[0]))
    for i in range(5):
        pg_store.append_message(sid, {"role": "user", "content": f"m{i}"})
    assert checkouts == []
    assert pg_store.get_session(sid).message_count == 6


def test_an_append_after_the_server_dropped_the_kept_connection_is_replayed(
    pg_store: StateStore, pg_url: str
) -> None:
    sid = new_session(pg_store)
    pg_store.append_message(sid, {"role": "user", "content": "one"})
    assert _terminate_every_other_backend(pg_url) >= 1
    pg_store.append_message(sid, {"role": "assistant", "content": "two"})
    pg_store.append_message(sid, {"role": "user", "content": "three"})
    contents = [m["content"] for m in pg_store.load_conversation(sid).messages]
    assert contents == ["one", "two", "three"]
    assert pg_store.get_session(sid).message_count == 3


def test_an_append_to_a_missing_session_still_names_the_session(pg_store: StateStore) -> None:
    sid = new_session(pg_store)
    pg_store.append_message(sid, {"role": "user", "content": "one"})
    with pytest.raises(NotFoundError, match="nosuch"):
        pg_store.append_message("nosuch", {"role": "user", "content": "x"})
    pg_store.append_message(sid, {"role": "user", "content": "two"})
    assert pg_store.get_session(sid).message_count == 2


def test_a_session_created_by_another_host_mid_unit_is_found_not_a_failure(
    pg_store: StateStore, pg_url: str
) -> None:
    """Two hosts flushing the first messages of one session: the one whose insert of the
    session waits on the other's uncommitted row finds it created and writes on."""
    other = _admin(pg_url)
    other.autocommit = False
    other.execute("INSERT INTO sessions (id, source, started_at) VALUES ('both', 'cli', 0)")
    result: list[object] = []

    def flush() -> None:
        try:
            result.append(pg_store.write(lambda uow: uow.sessions.ensure("both")))
        except BaseException as exc:  # reported below
            result.append(exc)

    writer = threading.Thread(target=flush)
    writer.start()
    watch = _admin(pg_url)
    # The writer's insert of the session waits on the other host's uncommitted row.
    while not watch.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    ).fetchone()[0]:  # type: ignore[index]
        assert writer.is_alive(), result
    other.commit()
    writer.join(timeout=30)
    other.close()
    watch.close()

    assert result == [False]
    with pg_store.unit_of_work() as uow:
        uow.messages.append("both", {"role": "user", "content": "after the race"})
        uow.commit()
    assert [m["content"] for m in pg_store.load_conversation("both").messages] == ["after the race"]
