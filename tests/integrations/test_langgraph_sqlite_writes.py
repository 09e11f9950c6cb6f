"""A put or put_writes on SQLite of a thread the saver knows runs on the driver's cursor,
and writes what the store's unit would: the same message rows and counters as
``append_many`` (full-text indexes included), each message once even when another
writer stored it meanwhile, the new generation's uids after another saver deleted the
thread, nothing at all when the owner check refuses or the database stays locked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from sqlalchemy import func, select

from hermes_repo import DatabaseBusyError, MessageRepository, SessionTakenError, StateStore
from hermes_repo.integrations._langgraph_rows import message_rows
from hermes_repo.integrations.langgraph import HermesSaver
from hermes_repo.models import langgraph_checkpoints_table as CK
from hermes_repo.models import langgraph_writes_table as WR
from hermes_repo.models import messages_table
from tests.support.locking import write_lock_held_by_another_process
from tests.support.sqltrace import count, traced, write_commits

pytestmark = pytest.mark.sqlite_only


def _conversation(turns: int) -> list[Any]:
    """A chat with tool calls and tool results, in English and Japanese."""
    said: list[Any] = []
    for n in range(turns):
        said.append(HumanMessage(content=f"question {n}: 大阪の天気は?", id=f"h-{n}"))
        call = {"name": "weather", "args": {"city": "大阪", "day": n}, "id": f"call-{n}"}
        said.append(AIMessage(content="", tool_calls=[call], id=f"ai-{n}"))
        said.append(ToolMessage(content="晴れ、23度", tool_call_id=f"call-{n}", id=f"t-{n}"))
    return said


def _put(saver: HermesSaver, thread: str, messages: Sequence[Any] | None, step: int) -> Any:
    values: dict[str, Any] = {"step": step}
    if messages is not None:
        values["messages"] = list(messages)
    versions = {channel: saver.get_next_version(None, None) for channel in values}
    checkpoint: dict[str, Any] = dict(empty_checkpoint())
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = versions
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(config, checkpoint, {"source": "loop", "step": step}, versions)  # type: ignore[arg-type]


def _units(store: StateStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one for every attempt run through the store's unit of work."""
    calls: list[int] = []
    real = store.database.write_once

    def counted(work: Callable[..., Any]) -> Any:
        calls.append(1)
        return real(work)

    monkeypatch.setattr(store.database, "write_once", counted)
    return calls


def _stored(store: StateStore, session_id: str) -> list[dict[str, Any]]:
    """Every message row of the session as stored, in id order, without what differs
    between two sessions written at two moments (id, session, timestamp)."""
    m = messages_table
    stmt = select(m).where(m.c.session_id == session_id).order_by(m.c.id)
    rows = store.read(lambda conn: [dict(row) for row in conn.execute(stmt).mappings()])
    for row in rows:
        del row["id"], row["session_id"], row["timestamp"]
    return rows


def _uids(store: StateStore, session_id: str) -> list[tuple[str, bool]]:
    rows = store.read(lambda conn: MessageRepository(conn).list(session_id, include_inactive=True))
    return [(row["uid"], bool(row.get("active", True))) for row in rows]


def test_the_rows_a_put_writes_on_sqlite_are_the_rows_append_many_writes_for_the_same_messages(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = HermesSaver(store)
    units = _units(store, monkeypatch)
    said = _conversation(3)
    for step in range(1, len(said) + 1):
        _put(saver, "chat", said[:step], step)
    # Only the first put, which created the session, ran the unit of work; every later
    # one committed on the driver's cursor at its first try.
    assert len(units) == 1

    _, rows = message_rows(said)
    with store.unit_of_work() as uow:
        uow.sessions.create("langgraph", id="twin", title="twin")
        uow.messages.append_many("twin", rows)
        uow.commit()

    assert _stored(store, "chat") == _stored(store, "twin")
    chat, twin = store.get_session("chat"), store.get_session("twin")
    assert (chat.message_count, chat.tool_call_count) == (twin.message_count, twin.tool_call_count)
    assert chat.message_count == len(said)
    # The full-text triggers fired for the rows written on the cursor: both indexes
    # (words, and the trigram index's CJK substrings) find them.
    for query in ("question", "天気"):
        assert {hit.session_id for hit in store.search(query, limit=100)} == {"chat", "twin"}


def test_a_message_another_writer_stored_meanwhile_is_stored_once(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    said = _conversation(2)
    ours, other = HermesSaver(store), HermesSaver(store)
    _put(ours, "shared", said[:1], 1)
    _put(ours, "shared", said[:2], 2)
    # Another worker (knowing nothing of the thread) stores the next message.
    _put(other, "shared", said[:3], 3)
    units = _units(store, monkeypatch)
    # Ours did not see it: its first try inserts it, the session's unique uids refuse
    # it, the attempt rolls back whole and the unit (which looks first) stores only
    # the new one.
    _put(ours, "shared", said[:4], 4)
    assert len(units) == 1
    _put(ours, "shared", said[:5], 5)  # known again: the cursor's first try commits
    assert len(units) == 1

    assert _uids(store, "shared") == [(f"langgraph:{m.id}", True) for m in said[:5]]
    assert store.get_session("shared").message_count == 5
    assert len(list(ours.list({"configurable": {"thread_id": "shared"}}))) == 5


def test_a_thread_another_saver_deleted_gets_its_messages_again_under_the_new_generation(
    store: StateStore,
) -> None:
    said = _conversation(1)
    ours, other = HermesSaver(store), HermesSaver(store)
    _put(ours, "again", said[:1], 1)
    _put(ours, "again", said[:2], 2)
    other.delete_thread("again")
    # Ours still remembers the first generation's uids: the session's generation tells
    # it they are not this thread's any more.
    _put(ours, "again", said[:3], 3)

    assert _uids(store, "again") == [
        ("langgraph:h-0", False),
        ("langgraph:ai-0", False),
        ("langgraph:1:h-0", True),
        ("langgraph:1:ai-0", True),
        ("langgraph:1:t-0", True),
    ]
    assert store.get_session("again").message_count == 3


def test_a_put_on_a_session_held_by_another_thread_writes_nothing(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        # A LangGraph session holding another thread (as a hash collision would).
        uow.sessions.create("langgraph", id="held", title="held")
        uow.sessions.update("held", extra={"langgraph_thread": "another thread"})
        uow.commit()
    saver = HermesSaver(store)
    for messages in (None, _conversation(1)):
        with pytest.raises(SessionTakenError, match="holds thread 'another thread'"):
            _put(saver, "held", messages, 1)

    def count(conn: Any) -> int:
        return int(
            conn.execute(
                select(func.count()).select_from(CK).where(CK.c.session_id == "held")
            ).scalar()
        )

    assert store.read(count) == 0
    assert _uids(store, "held") == []
    assert store.get_session("held").message_count == 0


def test_a_put_and_put_writes_locked_past_the_budget_write_nothing(
    home: Path, tmp_path: Path
) -> None:
    said = _conversation(1)
    with StateStore.open(home, write_budget_s=0.3) as store:
        saver = HermesSaver(store)
        stored = _put(saver, "locked", said[:1], 1)
        with write_lock_held_by_another_process(store.path, tmp_path / "signals"):
            with pytest.raises(DatabaseBusyError):
                _put(saver, "locked", said[:2], 2)
            with pytest.raises(DatabaseBusyError):
                saver.put_writes(stored, [("step", 9)], task_id="t")
        latest = saver.get_tuple({"configurable": {"thread_id": "locked"}})
        assert latest is not None and latest.config == stored
        assert latest.pending_writes == []
        assert _uids(store, "locked") == [("langgraph:h-0", True)]
        assert store.get_session("locked").message_count == 1

        # Once the lock is gone, the same put stores its message once.
        _put(saver, "locked", said[:2], 2)
        assert _uids(store, "locked") == [("langgraph:h-0", True), ("langgraph:ai-0", True)]

        def pending(conn: Any) -> int:
            return int(conn.execute(select(func.count()).select_from(WR)).scalar())

        assert store.read(pending) == 0


def test_a_put_of_a_known_thread_is_one_write_transaction_without_a_lookup_of_stored_uids(
    store: StateStore,
) -> None:
    saver = HermesSaver(store)
    said = _conversation(1)
    _put(saver, "traced", said[:1], 1)
    with traced(store.engine) as seen:
        _put(saver, "traced", said[:2], 2)
    assert write_commits(seen) == 1
    # The owner's read comes first: nothing is written before the session is known
    # to be the thread's.
    statements = [sql.split(" (")[0] for sql in seen]
    assert statements[:2] == [
        "BEGIN IMMEDIATE",
        "SELECT sessions.source, sessions.extra FROM sessions WHERE sessions.id = 'traced'",
    ]
    assert statements[-1] == "COMMIT"
    assert not [sql for sql in seen if "FROM messages" in sql]
    assert count(seen, "INSERT INTO MESSAGES") == 1
    assert _uids(store, "traced") == [("langgraph:h-0", True), ("langgraph:ai-0", True)]


def test_get_tuple_reads_the_checkpoint_and_its_values_in_one_read_transaction(
    store: StateStore,
) -> None:
    saver = HermesSaver(store)
    stored = _put(saver, "snapshot", _conversation(1), 1)
    saver.put_writes(stored, [("step", 2)], task_id="t")
    with traced(store.engine) as seen:
        found = saver.get_tuple({"configurable": {"thread_id": "snapshot"}})
    assert found is not None and found.pending_writes == [("t", "step", 2)]
    assert [sql.split(" ")[0] for sql in seen] == ["BEGIN", "SELECT", "SELECT", "COMMIT"]
