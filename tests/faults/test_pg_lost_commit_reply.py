"""A COMMIT that reaches PostgreSQL and whose reply is lost: every write lands once.

The store talks to the server through a real TCP proxy (``tests/support/lostreply.py``)
that forwards the COMMIT, waits until the server has answered it (so it committed) and
then cuts the connection instead of passing the answer on. The client sees a lost
connection during COMMIT; the write core must look for the unit's own rows on a fresh
connection and report the commit as done, never run the unit again. Every write path
of the store and both framework doors are driven through a cut, and the rows are
counted behind the store's back (a direct connection to the server).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import text

from hermes_repo import DatabaseBusyError, StateStore, TranscriptWriter
from hermes_repo.errors import UidConflictError
from hermes_repo.uow import UnitOfWork
from tests.support.lostreply import LostReply
from tests.support.pg import PgServer
from tests.support.pg_cluster import Rows
from tests.support.spooling import convo, uids
from tests.support.stores import new_session


@pytest.fixture
def pg_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    name = pg_server.new_name("lost")
    url = pg_server.create(name, template=pg_template)
    yield url.render_as_string(hide_password=False)
    pg_server.drop(name)


@pytest.fixture
def proxy(pg_url: str) -> Iterator[LostReply]:
    with LostReply(pg_url, lifetime_s=60) as lost:
        yield lost


@pytest.fixture
def store(tmp_path: Path, proxy: LostReply) -> Iterator[StateStore]:
    opened = StateStore.open(tmp_path / "pg-home", url=proxy.url(), write_budget_s=10)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def rows(pg_url: str) -> Rows:
    return Rows(pg_url)


def _once(rows: Rows) -> None:
    assert rows.duplicated_uids() == [] and rows.counter_drift() == []


def _ids(rows: Rows, sid: str) -> list[int]:
    return [int(r[0]) for r in rows.query("SELECT id FROM messages WHERE session_id = ?", (sid,))]


def test_append_message_without_uid_lands_once_and_returns_its_row_id(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    sid = new_session(store, "s-lost")
    proxy.arm()
    row_id = store.append_message(sid, {"role": "user", "content": "hello"})
    assert proxy.cuts == 1  # the reply was really lost
    assert _ids(rows, sid) == [row_id]
    _once(rows)


def test_append_message_with_uid_returns_the_row_it_stored_not_a_conflict(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    sid = new_session(store, "s-lost")
    proxy.arm()
    row_id = store.append_message(sid, {"role": "user", "content": "hi", "uid": "u-1"})
    assert proxy.cuts == 1
    assert _ids(rows, sid) == [row_id] and rows.uids(sid) == ["u-1"]
    # Handing the same message again (the caller's own retry) returns the same row;
    # another message under that uid is refused, naming the uid.
    again = store.append_message(sid, {"role": "user", "content": "hi", "uid": "u-1"})
    assert again == row_id
    with pytest.raises(UidConflictError, match="u-1"):
        store.append_message(sid, {"role": "user", "content": "other", "uid": "u-1"})
    _once(rows)


def test_append_messages_without_uids_stores_each_message_once(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    sid = new_session(store, "s-lost")
    proxy.arm()
    assert store.append_messages(sid, convo(2)) == 2
    assert proxy.cuts == 1
    assert len(rows.uids(sid)) == 2
    assert store.get_session(sid).message_count == 2
    _once(rows)


def test_a_session_created_without_an_id_is_created_once_and_its_id_returned(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    proxy.arm()
    sid = store.write(lambda uow: uow.sessions.create(source="cli", title="one"))
    assert proxy.cuts == 1
    assert rows.query("SELECT id FROM sessions") == [(sid,)]


def test_a_commit_cut_before_it_reached_the_server_is_written_again_once(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    sid = new_session(store, "s-lost")
    proxy.arm(deliver=False)  # the server never sees the COMMIT: it rolls back
    row_id = store.append_message(sid, {"role": "user", "content": "again", "uid": "u-a"})
    assert proxy.cuts == 1
    assert _ids(rows, sid) == [row_id] and rows.uids(sid) == ["u-a"]
    _once(rows)


def test_a_unit_that_writes_no_identity_is_settled_by_its_transaction_id(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    sid = new_session(store, "s-lost")
    attempts: list[int] = []

    def bump(uow: UnitOfWork) -> str:
        attempts.append(1)
        uow.connection.execute(
            text("UPDATE sessions SET input_tokens = input_tokens + 7 WHERE id = :s"), {"s": sid}
        )
        return "done"

    proxy.arm()
    assert store.write(bump) == "done"
    assert proxy.cuts == 1 and attempts == [1]  # settled by looking, not run again
    assert rows.query("SELECT input_tokens FROM sessions WHERE id = ?", (sid,)) == [(7,)]


def test_a_transcript_flush_of_several_messages_writes_each_once(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    writer = store.transcript_writer("s-flush")
    messages = convo(2)
    assert writer.flush(messages).ok  # creates the session
    messages += convo(4, start=2)
    proxy.arm()
    result = writer.flush(messages)
    assert proxy.cuts == 1
    assert result.ok and (result.written, result.spooled) == (4, 0)
    assert rows.uids("s-flush") == uids(messages)
    assert writer.pending_path.exists() is False
    _once(rows)


def test_a_lost_reply_the_server_cannot_be_asked_about_is_spooled_and_stored_once(
    tmp_path: Path, proxy: LostReply, rows: Rows
) -> None:
    with StateStore.open(tmp_path / "pg-home", url=proxy.url(), write_budget_s=1) as store:
        writer = store.transcript_writer("s-unknown")
        messages = convo(1)
        assert writer.flush(messages).ok
        messages += convo(2, start=1)
        proxy.arm(then_refuse=True)  # the commit lands, then the server is out of reach
        result = writer.flush(messages)
        assert proxy.cuts == 1
        assert (result.written, result.spooled, result.unsaved) == (0, 2, 0)
        assert result.error is not None and "commit outcome unknown" in result.error
        proxy.refuse_new = False
        report = store.replay_pending()
        # The spool's records carry the uids the lost commit stored: none twice.
        assert (report.inserted, report.duplicates, report.errors) == (0, 2, ())
    assert rows.uids("s-unknown") == uids(messages)
    _once(rows)


def test_recover_pending_reports_its_inserts_as_inserted_after_a_lost_reply(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    spooled = convo(3)
    # A writer without a store names the server it could not reach: the store's own.
    alone = TranscriptWriter(store.home, "s-spool", None, target=proxy.url()).flush(spooled)
    assert alone.spooled == 3
    proxy.arm()
    report = store.replay_pending()
    assert proxy.cuts == 1
    assert (report.inserted, report.duplicates, report.kept) == (3, 0, 0)
    assert report.errors == ()
    assert rows.uids("s-spool") == uids(spooled)
    _once(rows)


def test_the_agents_sdk_door_add_items_lands_each_item_once(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    agents = pytest.importorskip("hermes_repo.integrations.openai_agents")
    import asyncio

    session = agents.HermesSession("sdk-lost", store=store)
    try:
        asyncio.run(session.add_items([{"role": "user", "content": "first"}]))
        proxy.arm()
        items: list[dict[str, Any]] = [
            {"role": "assistant", "content": "second"},
            {"role": "user", "content": "third"},
        ]
        asyncio.run(session.add_items(items))
        assert proxy.cuts == 1
        got = asyncio.run(session.get_items())
    finally:
        session.close()
    assert [item["content"] for item in got] == ["first", "second", "third"]
    assert len(rows.uids(session.key)) == 3
    _once(rows)


def test_a_pydantic_ai_save_whose_reply_is_lost_is_neither_a_conflict_nor_doubled(
    store: StateStore, proxy: LostReply, rows: Rows
) -> None:
    pytest.importorskip("pydantic_ai")
    import asyncio

    from pydantic_ai.conversation import Conversation
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart

    from hermes_repo.integrations.pydantic_ai import HermesConversationStore

    conversations = HermesConversationStore(store)
    first = Conversation(
        conversation_id="lost-save",
        messages=[ModelRequest(parts=[UserPromptPart(content="q1")])],
    )
    asyncio.run(conversations.save(first))
    before = rows.query("SELECT count(*) FROM messages")[0][0]
    loaded = asyncio.run(conversations.load("lost-save"))
    assert loaded is not None
    loaded.messages.append(ModelResponse(parts=[TextPart(content="a1")]))
    proxy.arm()
    asyncio.run(conversations.save(loaded))  # no ConversationConflict
    assert proxy.cuts == 1
    again = asyncio.run(conversations.load("lost-save"))
    assert again is not None and len(again.messages) == 2
    assert rows.duplicated_uids() == []
    assert rows.query("SELECT count(*) FROM messages")[0][0] > before  # the entries landed
    # The save after it starts from the revision that landed.
    again.messages.append(ModelRequest(parts=[UserPromptPart(content="q2")]))
    asyncio.run(conversations.save(again))
    final = asyncio.run(conversations.load("lost-save"))
    assert final is not None and len(final.messages) == 3


def test_a_flush_behind_another_hosts_row_lock_gives_up_at_its_budget_and_spools(
    tmp_path: Path, pg_url: str, rows: Rows
) -> None:
    # No proxy: the lock is the fault. The holder keeps the session row locked until
    # after the flush returned, so only the flush's own lock_timeout can end its wait.
    with StateStore.open(tmp_path / "pg-home", url=pg_url) as store:
        sid = new_session(store, "s-locked")
        holder = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"))
        try:
            holder.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", (sid,))
            writer = TranscriptWriter(store.home, sid, store, write_budget_s=1.0)
            result = writer.flush(convo(2))
            # The holder's transaction (and its row lock) was still open.
            status = holder.info.transaction_status
        finally:
            holder.close()
    assert (result.written, result.spooled, result.unsaved) == (0, 2, 0)
    assert result.error is not None and "lock_timeout" in result.error
    assert "SQLSTATE 55P03" in result.error
    assert status is psycopg.pq.TransactionStatus.INTRANS
    assert rows.uids(sid) == []


def test_a_write_behind_a_row_lock_ends_as_busy_naming_lock_timeout(
    tmp_path: Path, pg_url: str
) -> None:
    with StateStore.open(tmp_path / "pg-home", url=pg_url, write_budget_s=0.5) as store:
        sid = new_session(store, "s-locked")
        holder = psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://"))
        try:
            holder.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", (sid,))
            with pytest.raises(DatabaseBusyError, match="lock_timeout") as caught:
                store.append_message(sid, {"role": "user", "content": "blocked"})
        finally:
            holder.close()
    # The retry loop ended it at the budget (not an inner error), on the server's 55P03.
    assert caught.value.elapsed_s is not None and "0.5 s budget" in str(caught.value)
    assert "SQLSTATE 55P03" in str(caught.value)
