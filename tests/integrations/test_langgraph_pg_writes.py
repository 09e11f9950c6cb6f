"""HermesSaver on PostgreSQL, as the server sees it: a ``put`` is one round trip, a
``put_writes`` one (pipelined on the store's kept connection) and a ``get_tuple`` two;
and that path gives up nothing of the unit of work: the owner is checked before
anything is written, a row lock is waited out within the budget and then ends as the
library's error, and a COMMIT whose reply was lost is written again without storing
anything twice."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from hermes_repo import DatabaseBusyError, SessionTakenError, StateStore
from hermes_repo.integrations.langgraph import HermesSaver, session_id_for
from tests.support.lostreply import LostReply
from tests.support.pg import PgServer
from tests.support.pg_cluster import Rows
from tests.support.stores import new_session
from tests.support.wiretrace import wire

_versions = itertools.count(1)

#: A put once the thread's session exists, all of it in one round trip: the
#: transaction, its lock budget, the owner's lock, the values and checkpoint, the new
#: message row with the session's counters, COMMIT.
_PUT = [
    r"BEGIN",
    r"SET LOCAL lock_timeout = \d+",
    r"SELECT source, extra FROM sessions WHERE id = \$1 FOR UPDATE",
    r"WITH b AS \(INSERT INTO langgraph_blobs .*",
    r"WITH m AS \(INSERT INTO messages \(session_id, uid, .* UPDATE sessions SET message_count .*",
    r"COMMIT",
]
#: A put_writes: all of it, COMMIT included, in one round trip.
_PUT_WRITES = [
    r"BEGIN",
    r"SET LOCAL lock_timeout = \d+",
    r"WITH o AS \(SELECT source, extra FROM sessions WHERE id = \$1 FOR UPDATE\), .*",
    r"COMMIT",
]


class Chat:
    """The checkpoints of one chat thread, one new message each, as LangGraph makes them."""

    def __init__(self, saver: HermesSaver, thread_id: str) -> None:
        self.saver = saver
        self.thread_id = thread_id
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
        self.messages: list[Any] = []

    def put(self) -> dict[str, Any]:
        n = len(self.messages)
        kind = HumanMessage if n % 2 == 0 else AIMessage
        self.messages = [*self.messages, kind(content=f"message {n}", id=f"m-{n}")]
        values = {"messages": self.messages, "step": n}
        checkpoint: dict[str, Any] = dict(empty_checkpoint())
        checkpoint["channel_values"] = values
        checkpoint["channel_versions"] = {channel: next(_versions) for channel in values}
        versions = dict(checkpoint["channel_versions"])
        config = {"configurable": {**self.config["configurable"], "checkpoint_ns": ""}}
        self.config = dict(self.saver.put(config, checkpoint, {"step": n}, versions))  # type: ignore[arg-type]
        return self.config

    def put_writes(self, task: str) -> None:
        self.saver.put_writes(self.config, [("a", task), ("b", 2)], task)  # type: ignore[arg-type]


@pytest.fixture
def pg_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    name = pg_server.new_name("lgw")
    url = pg_server.create(name, template=pg_template)
    yield url.render_as_string(hide_password=False)
    pg_server.drop(name)


@pytest.fixture
def rows(pg_url: str) -> Rows:
    return Rows(pg_url)


def _checkpoints(rows: Rows, thread_id: str) -> int:
    sql = "SELECT count(*) FROM langgraph_checkpoints WHERE session_id = ?"
    return int(rows.query(sql, (session_id_for(thread_id),))[0][0])


def _writes(rows: Rows, thread_id: str) -> int:
    sql = "SELECT count(*) FROM langgraph_writes WHERE session_id = ?"
    return int(rows.query(sql, (session_id_for(thread_id),))[0][0])


def _matches(statements: list[str], patterns: list[str]) -> None:
    assert len(statements) == len(patterns), statements
    for got, want in zip(statements, patterns, strict=True):
        assert re.fullmatch(want, got, re.DOTALL), (want, got)


def test_a_put_is_one_round_trip_put_writes_one_and_get_tuple_two(
    tmp_path: Path, pg_url: str
) -> None:
    with StateStore.open(tmp_path / "home", url=pg_url) as store:
        chat = Chat(HermesSaver(store), "wire")
        chat.put()  # creates the thread's session
        # Traced from the kept connection's checkout on (its ping comes before it, once).
        store.database._kept.close()
        with wire(store.engine) as sent:
            for _ in range(3):
                chat.put()
        _matches(sent.statements, _PUT * 3)
        assert sent.round_trips == 3
        store.database._kept.close()
        with wire(store.engine) as sent:
            for task in ("t1", "t2", "t3"):
                chat.put_writes(task)
        _matches(sent.statements, _PUT_WRITES * 3)
        assert sent.round_trips == 3
        # What they wrote is all there, once.
        latest = chat.saver.get_tuple({"configurable": {"thread_id": "wire"}})
        assert latest is not None and latest.config == chat.config
        assert [m.id for m in latest.checkpoint["channel_values"]["messages"]] == [
            f"m-{n}" for n in range(4)
        ]
        assert sorted(w[0] for w in latest.pending_writes) == ["t1", "t1", "t2", "t2", "t3", "t3"]
        assert store.get_session(session_id_for("wire")).message_count == 4
        # A get_tuple: the owner with the checkpoint, then its values with its writes;
        # no BEGIN, no COMMIT, no ping.
        store.database._kept.close()
        with wire(store.engine) as sent:
            again = chat.saver.get_tuple({"configurable": {"thread_id": "wire"}})
        _matches(
            sent.statements,
            [
                r"SELECT s\.source, s\.extra, .*",
                r"SELECT 1, task_id, .* UNION ALL SELECT 0, channel, .*",
            ],
        )
        assert sent.round_trips == 2
        assert again == latest


def test_a_session_of_another_source_is_refused_on_the_pipelined_path_leaving_nothing(
    tmp_path: Path, pg_url: str, rows: Rows
) -> None:
    with StateStore.open(tmp_path / "home", url=pg_url) as store:
        sid = new_session(store, "cli-owned")  # a CLI session whose id a thread maps to
        saver = HermesSaver(store)
        with pytest.raises(SessionTakenError):
            Chat(saver, sid).put()
        chat = Chat(saver, sid)
        chat.config = {"configurable": {"thread_id": sid, "checkpoint_id": "c-1"}}
        with pytest.raises(SessionTakenError):
            chat.put_writes("t1")
    assert _checkpoints(rows, sid) == 0 and _writes(rows, sid) == 0
    assert rows.uids(sid) == []
    assert rows.query("SELECT count(*) FROM langgraph_blobs")[0][0] == 0


def test_a_thread_whose_session_changed_under_the_saver_is_written_the_ordinary_way(
    tmp_path: Path, pg_url: str, rows: Rows
) -> None:
    # Another process deleted the thread: its generation moved, so this saver's memory
    # of the session row is stale; the pipelined write finds that before writing
    # anything and hands over, and the new messages get the new generation's uids.
    with StateStore.open(tmp_path / "home", url=pg_url) as store:
        chat = Chat(HermesSaver(store), "moved")
        chat.put()
        chat.put()
        HermesSaver(store).delete_thread("moved")
        chat.put()
    sid = session_id_for("moved")
    assert rows.uids(sid) == [
        "langgraph:m-0",
        "langgraph:m-1",
        *(f"langgraph:1:m-{n}" for n in range(3)),
    ]
    assert _checkpoints(rows, "moved") == 1
    assert rows.counter_drift() == [] and rows.duplicated_uids() == []


@pytest.mark.parametrize("call", ["put", "put_writes"])
def test_a_row_lock_held_past_the_budget_ends_as_busy_and_stores_nothing(
    tmp_path: Path, pg_url: str, rows: Rows, call: str
) -> None:
    with StateStore.open(tmp_path / "home", url=pg_url, write_budget_s=0.5) as store:
        chat = Chat(HermesSaver(store), "locked")
        chat.put()
        chat.put()  # the pipelined path is the one in use
        before = (_checkpoints(rows, "locked"), _writes(rows, "locked"), rows.uids(chat.thread_id))
        holder = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"))
        try:
            holder.execute(
                "SELECT id FROM sessions WHERE id = %s FOR UPDATE", (session_id_for("locked"),)
            )
            with pytest.raises(DatabaseBusyError, match="lock_timeout") as caught:
                chat.put() if call == "put" else chat.put_writes("t1")
            status = holder.info.transaction_status
        finally:
            holder.close()
    # The retry loop ended it at the budget, on the server's lock timeout; the holder
    # kept its lock all along.
    assert caught.value.elapsed_s is not None and "0.5 s budget" in str(caught.value)
    assert "SQLSTATE 55P03" in str(caught.value)
    assert status is psycopg.pq.TransactionStatus.INTRANS
    after = (_checkpoints(rows, "locked"), _writes(rows, "locked"), rows.uids(chat.thread_id))
    assert after == before


@pytest.mark.parametrize("call", ["put", "put_writes"])
def test_a_row_lock_released_within_the_budget_is_waited_out(
    tmp_path: Path, pg_url: str, rows: Rows, call: str
) -> None:
    raw = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with StateStore.open(tmp_path / "home", url=pg_url, write_budget_s=60) as store:
        chat = Chat(HermesSaver(store), "busy")
        chat.put()
        chat.put()
        holder = psycopg.connect(raw)
        holder.execute(
            "SELECT id FROM sessions WHERE id = %s FOR UPDATE", (session_id_for("busy"),)
        )

        def release_once_waited_for() -> None:
            # The holder lets go once the write is seen waiting for its lock.
            with psycopg.connect(raw, autocommit=True) as watcher:
                while not watcher.execute(
                    "SELECT count(*) FROM pg_locks WHERE NOT granted"
                ).fetchone()[0]:  # type: ignore[index]
                    pass
            holder.rollback()

        releaser = threading.Thread(target=release_once_waited_for)
        releaser.start()
        try:
            chat.put() if call == "put" else chat.put_writes("t1")
        finally:
            releaser.join()
            holder.close()
    if call == "put":
        assert _checkpoints(rows, "busy") == 3
        assert rows.uids(chat.thread_id) == [f"langgraph:m-{n}" for n in range(3)]
    else:
        assert _writes(rows, "busy") == 2
    assert rows.counter_drift() == []


@pytest.fixture
def proxy(pg_url: str) -> Iterator[LostReply]:
    with LostReply(pg_url, lifetime_s=60) as lost:
        yield lost


@pytest.mark.parametrize("deliver", [True, False], ids=["landed", "not-landed"])
def test_a_put_and_put_writes_whose_commit_reply_is_lost_are_stored_once(
    tmp_path: Path, proxy: LostReply, rows: Rows, deliver: bool
) -> None:
    with StateStore.open(tmp_path / "home", url=proxy.url(), write_budget_s=10) as store:
        chat = Chat(HermesSaver(store), "lost")
        chat.put()
        chat.put()
        proxy.arm(deliver=deliver)
        stored = chat.put()  # written again: nothing of it twice
        assert proxy.cuts == 1
        proxy.arm(deliver=deliver)
        chat.put_writes("t1")
        assert proxy.cuts == 2
        latest = chat.saver.get_tuple({"configurable": {"thread_id": "lost"}})
        chat.put()  # and the thread goes on
    assert latest is not None and latest.config == stored
    assert [w[0] for w in latest.pending_writes] == ["t1", "t1"]
    assert rows.uids(chat.thread_id) == [f"langgraph:m-{n}" for n in range(4)]
    assert _checkpoints(rows, "lost") == 4 and _writes(rows, "lost") == 2
    assert rows.duplicated_uids() == [] and rows.counter_drift() == []


def test_a_kept_connection_the_server_dropped_is_replaced_and_every_call_lands(
    tmp_path: Path, pg_url: str, rows: Rows
) -> None:
    raw = pg_url.replace("postgresql+psycopg://", "postgresql://")

    def drop_the_kept_connection(store: StateStore) -> None:
        pooled = store.database._kept._pooled
        assert pooled is not None and pooled.dbapi_connection is not None
        pid = pooled.dbapi_connection.info.backend_pid
        with psycopg.connect(raw, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))

    with StateStore.open(tmp_path / "home", url=pg_url) as store:
        chat = Chat(HermesSaver(store), "dropped")
        chat.put()
        chat.put()
        # Each call after a drop lands through the ordinary path; the next one keeps a
        # fresh connection again.
        drop_the_kept_connection(store)
        chat.put()
        stored = chat.put()
        drop_the_kept_connection(store)
        chat.put_writes("t1")
        chat.put_writes("t2")
        drop_the_kept_connection(store)
        latest = chat.saver.get_tuple({"configurable": {"thread_id": "dropped"}})
    assert latest is not None and latest.config == stored
    assert sorted(w[0] for w in latest.pending_writes) == ["t1", "t1", "t2", "t2"]
    assert rows.uids(chat.thread_id) == [f"langgraph:m-{n}" for n in range(4)]
    assert rows.counter_drift() == [] and rows.duplicated_uids() == []
