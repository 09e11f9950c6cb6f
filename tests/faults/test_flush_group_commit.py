"""Group commit of a flush, observed for real: every statement SQLite runs for the store's
connections is traced (``set_trace_callback``), so a test sees how many transactions a
flush made; faults are SQLite's own (a uid stored meanwhile by another writer, a row
longer than the connection's length limit, a held write lock, a damaged file)."""

from __future__ import annotations

import ctypes
import logging
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from hermes_repo import StateStore, TranscriptWriter, sqlite_capi
from tests.support import damage
from tests.support.fts_checks import read_state
from tests.support.retries import retries, watching_retries
from tests.support.spooling import (
    MODULE,
    check_store,
    convo,
    on_store_connections,
    pending_files,
    raw,
    stored,
    uids,
)
from tests.support.sqltrace import count, traced, write_commits

FALLBACK_LOG = "writing them one per transaction"
SQLITE_LIMIT_LENGTH = 0


def session_counters(home: Path, session_id: str) -> tuple[int, int]:
    con = raw(home)
    try:
        row = con.execute(
            "SELECT message_count, tool_call_count FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
    finally:
        con.close()
    return (int(row[0]), int(row[1]))


def with_tool_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            m["tool_calls"] = [
                {"id": f"c{i}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ]
    return messages


# -- one transaction -----------------------------------------------------------------


def test_a_flush_of_n_messages_commits_them_in_one_transaction_in_list_order(
    store: StateStore,
) -> None:
    writer = store.transcript_writer("g")
    writer.flush(convo(1))
    messages = with_tool_calls(convo(10, start=1))
    with traced(store.engine) as seen:
        result = writer.flush(messages)
    assert (result.written, result.spooled, result.error) == (10, 0, None)
    assert result.written_uids == tuple(uids(messages))
    assert count(seen, "BEGIN") == 1 and count(seen, "COMMIT") == 1, seen
    assert write_commits(seen) == 1 and count(seen, "ROLLBACK") == 0
    assert count(seen, "UPDATE SESSIONS") == 1  # the counters bumped once
    # The ten rows in ONE multi-row INSERT (one FTS5 segment an index, not ten).
    assert count(seen, "INSERT INTO MESSAGES") == 1
    rows = stored(store.home, "g")
    assert [r["uid"] for r in rows[1:]] == uids(messages)  # ids follow the list
    assert session_counters(store.home, "g") == (11, 5)
    check_store(store.home)


def test_a_new_sessions_first_group_creates_it_in_the_same_transaction(
    store: StateStore,
) -> None:
    messages = with_tool_calls(convo(4))
    writer = store.transcript_writer("fresh", source="telegram")
    writer.flush([])  # learns (by a read) that nothing is stored yet
    with traced(store.engine) as seen:
        result = writer.flush(messages)
    assert (result.written, result.error) == (4, None)
    # The first try finds no session (its empty transaction is rolled back); the
    # session and the four messages then commit together.
    assert write_commits(seen) == 1 and count(seen, "ROLLBACK") == 1, seen
    assert count(seen, "INSERT INTO SESSIONS") == 1
    assert [r["uid"] for r in stored(store.home, "fresh")] == uids(messages)
    assert session_counters(store.home, "fresh") == (4, 2)
    session = store.get_session("fresh")
    assert session is not None and session.source == "telegram"
    assert session.started_at == messages[0]["timestamp"]
    check_store(store.home)


def test_another_connection_never_sees_part_of_a_group(store: StateStore) -> None:
    writer = store.transcript_writer("g")
    writer.flush(convo(1))
    messages = convo(6, start=1)
    reader = raw(store.home)
    counts: list[int] = []
    looked: set[str] = set()

    def after_each_insert(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        def look(sql: str) -> None:
            if sql.startswith(("INSERT INTO messages", "COMMIT")) and sql not in looked:
                looked.add(sql)
                # Read from another connection between the group's statements, and
                # after the last of them, just before the commit.
                counts.append(
                    reader.execute(
                        "SELECT count(*) FROM messages WHERE session_id = 'g'"
                    ).fetchone()[0]
                )

        dbapi_conn.set_trace_callback(look)

    event.listen(store.engine.pool, "checkout", after_each_insert)
    try:
        result = writer.flush(messages)
    finally:
        event.remove(store.engine.pool, "checkout", after_each_insert)
        reader.close()
    assert result.written == 6
    # One multi-row INSERT, then the commit: before the commit, none of the six is visible.
    assert counts == [1, 1]
    assert len(stored(store.home, "g")) == 7


# -- one bad message: the fallback ---------------------------------------------------


def test_a_uid_stored_meanwhile_fails_the_group_and_the_fallback_writes_the_others(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    writer = store.transcript_writer("g")
    writer.flush(convo(1))  # the writer now knows what is committed
    messages = convo(5, start=1)
    # Another writer (another process, in the field) stores the middle message: the
    # group's INSERT of it violates UNIQUE(session_id, uid) at the database.
    assert TranscriptWriter(store.home, "g", store).flush([messages[2]]).written == 1
    with traced(store.engine) as seen, caplog.at_level(logging.INFO, logger="hermes_repo"):
        result = writer.flush(messages)
    assert (result.written, result.spooled, result.error) == (5, 0, None)
    assert result.written_uids == tuple(uids(messages))  # the stored one is durable
    assert any(FALLBACK_LOG in r.getMessage() for r in caplog.records)
    assert "constraint" in next(
        r.getMessage() for r in caplog.records if FALLBACK_LOG in r.getMessage()
    )
    # The group rolled back; the four others, one transaction each.
    assert write_commits(seen) == 4 and count(seen, "ROLLBACK") >= 1
    order = [r["uid"] for r in stored(store.home, "g")[1:]]
    assert order == [messages[2]["uid"]] + [m["uid"] for m in messages if m is not messages[2]]
    assert pending_files(store.home) == []
    check_store(store.home)


def _limit_row_length(dbapi_conn: Any, limit: int) -> None:
    """``sqlite3_limit(db, SQLITE_LIMIT_LENGTH, limit)`` on one connection (the DB-API
    offers no ``setlimit`` on every driver)."""
    lib = sqlite_capi._library(MODULE)
    assert lib is not None
    db_path = Path(dbapi_conn.execute("PRAGMA database_list").fetchone()[2])
    handle = sqlite_capi._handle(lib, dbapi_conn, db_path)
    assert handle is not None
    lib.sqlite3_limit.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    lib.sqlite3_limit.restype = ctypes.c_int
    lib.sqlite3_limit(handle, SQLITE_LIMIT_LENGTH, limit)


def test_a_message_failing_in_the_fallback_too_spools_from_it_on_in_order(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    writer = store.transcript_writer("g")
    writer.flush(convo(1))
    messages = convo(2, start=1) + convo(1, start=3, size=30_000) + convo(2, start=4)
    too_big = on_store_connections(store, lambda conn: _limit_row_length(conn, 20_000))
    with too_big, caplog.at_level(logging.INFO, logger="hermes_repo"):
        result = writer.flush(messages)
    assert any(FALLBACK_LOG in r.getMessage() for r in caplog.records)
    # The two before the big one committed (one by one); it and the rest spooled.
    assert (result.written, result.spooled, result.unsaved) == (2, 3, 0)
    assert result.written_uids == tuple(uids(messages[:2]))
    assert result.spooled_uids == tuple(uids(messages[2:]))
    # SQLITE_TOOBIG at bind time, in the driver's words (pysqlite3 does not name it).
    assert result.error is not None and result.error.startswith("other:")
    assert "too big" in result.error or "Error binding parameter" in result.error
    assert pending_files(store.home) == ["g.pending.jsonl"]
    # Recovery without the limit restores every message once, in the list's order.
    report = store.replay_pending()
    assert (report.inserted, report.duplicates, report.errors) == (3, 0, ())
    assert [r["uid"] for r in stored(store.home, "g")[1:]] == uids(messages)
    check_store(store.home)


# -- a damaged full-text index: detached inside the write core ----------------------


def test_a_damaged_index_is_detached_and_the_group_commits_whole_without_fallback(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with StateStore.open(home) as store:
        store.transcript_writer("f").flush(convo(2))
    damage.fts_delete_averages(home / "state.db", module=MODULE)  # FTS writes now fail
    with StateStore.open(home) as store:
        writer = store.transcript_writer("f")
        writer.flush([])
        messages = convo(4, start=2)
        with traced(store.engine) as seen, caplog.at_level(logging.INFO, logger="hermes_repo"):
            result = writer.flush(messages)
        assert (result.written, result.spooled, result.error) == (4, 0, None)
        # The marker, the trigger drops and the four messages: one transaction.
        assert write_commits(seen) == 1, seen
        assert not any(FALLBACK_LOG in r.getMessage() for r in caplog.records)
    state = read_state(home / "state.db")
    assert state.detached
    assert [r["uid"] for r in stored(home, "f")[2:]] == uids(messages)


# -- failures that never fall back ---------------------------------------------------


def test_a_lock_outlasting_the_budget_spools_the_group_after_one_budget(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    writer = store.transcript_writer("busy", write_budget_s=0.5)
    writer.flush(convo(1))
    messages = convo(6, start=1)
    holder = raw(store.home)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with watching_retries(caplog), caplog.at_level(logging.INFO, logger="hermes_repo"):
            result = writer.flush(messages)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (result.written, result.spooled, result.unsaved) == (0, 6, 0)
    # One retry loop (numbered 1..n once), no per-message fallback spending another.
    replays = retries(caplog)
    assert replays == list(range(1, len(replays) + 1))
    assert not any(FALLBACK_LOG in r.getMessage() for r in caplog.records)
    assert result.error is not None and result.error.startswith("transient:")
    assert result.spooled_uids == tuple(uids(messages))
    report = store.replay_pending()
    assert (report.inserted, report.errors) == (6, ())
    assert [r["uid"] for r in stored(store.home, "busy")[1:]] == uids(messages)
    check_store(store.home)
