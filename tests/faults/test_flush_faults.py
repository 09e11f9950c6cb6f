"""Flush with fallback under real faults: a held write lock (BUSY), a read-only
connection (READONLY), a full database (FULL via max_page_count, ENOSPC injected into
SQLite's own writes), and a damaged file (CORRUPT); then recovery, exactly once."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateStore, TranscriptWriter
from tests.support import damage
from tests.support.faultinject import FaultInjector, under
from tests.support.locking import write_lock_held_by_another_process
from tests.support.retries import RETRY_LOGGER, retries, watching_retries
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

Msg = dict[str, Any]
BUDGET = 0.5


def recover_and_check(home: Path, session_id: str, messages: list[Msg]) -> None:
    """Recovery restores every message exactly once, in the list's order."""
    with StateStore.open(home, replay=False) as store:
        report = store.replay_pending()
        assert not report.errors, report.errors
        assert store.replay_pending().inserted == 0  # a second pass finds nothing
    assert [r["uid"] for r in stored(home, session_id)] == uids(messages)
    assert pending_files(home) == []
    check_store(home)


# -- BUSY ----------------------------------------------------------------------------


def test_lock_held_past_the_budget_spools_within_budget_then_recovers(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    writer = store.transcript_writer("busy", write_budget_s=BUDGET)
    messages = convo(2)
    assert writer.flush(messages).written == 2
    holder = raw(store.home)
    holder.execute("BEGIN IMMEDIATE")
    try:
        messages += convo(3, start=2)
        with caplog.at_level(logging.DEBUG, logger="hermes_repo"):
            result = writer.flush(messages)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (result.written, result.spooled, result.unsaved) == (0, 3, 0)
    # Replayed while the budget lasted (one attempt can itself wait busy_timeout, longer
    # than this budget), then spooled: the error counts exactly the attempts made.
    replays = retries(caplog)
    assert replays == list(range(1, len(replays) + 1))
    assert result.error is not None
    assert "database is locked by another process for" in result.error
    n = len(replays) + 1
    assert f"({n} attempt{'s' * (n != 1)} within a {BUDGET:g} s budget" in result.error
    assert "unknown" not in result.error.lower()
    assert any("transient" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")
    assert result.spooled_uids == tuple(uids(messages[2:]))
    assert pending_files(store.home) == ["busy.pending.jsonl"]
    recover_and_check(store.home, "busy", messages)


def test_lock_released_within_the_budget_never_spools(
    store: StateStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The holder outlasts SQLite's own busy timeout, so the store's retry loop (not
    busy_timeout) is what waits it out: released after the first replay is logged."""
    writer = store.transcript_writer("busy", write_budget_s=60.0)
    writer.flush(convo(1))
    messages = convo(3)
    with write_lock_held_by_another_process(store.path, tmp_path / "signals") as lock:

        class ReleaseOnFirstReplay(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.name == RETRY_LOGGER:
                    lock.release()

        handler = ReleaseOnFirstReplay(logging.DEBUG)
        logging.getLogger(RETRY_LOGGER).addHandler(handler)
        try:
            with watching_retries(caplog):
                result = writer.flush(messages)
        finally:
            logging.getLogger(RETRY_LOGGER).removeHandler(handler)
    assert (result.written, result.spooled, result.error) == (3, 0, None)
    replays = retries(caplog)
    assert replays[:1] == [1]  # at least one whole replay after a BUSY attempt
    assert replays == list(range(1, len(replays) + 1))
    assert [r["uid"] for r in stored(store.home, "busy")][1:] == uids(messages)
    assert pending_files(store.home) == []
    check_store(store.home)


def test_flushing_again_while_still_locked_neither_loses_nor_doubles(store: StateStore) -> None:
    writer = store.transcript_writer("busy", write_budget_s=0.2)
    messages = convo(1)
    writer.flush(messages)
    holder = raw(store.home)
    holder.execute("BEGIN IMMEDIATE")
    try:
        for n in range(3):
            messages += convo(2, start=10 + 2 * n)
            result = writer.flush(messages)
            assert (result.written, result.spooled) == (0, len(messages) - 1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    lines = (store.home / "sessions" / "busy.pending.jsonl").read_bytes().splitlines()
    assert len(lines) == 6  # every spooled message once
    # The database is back: the next flush writes the backlog first, then the new one.
    messages += convo(1, start=99)
    result = writer.flush(messages)
    assert (result.written, result.spooled, result.error) == (7, 0, None)
    assert [r["uid"] for r in stored(store.home, "busy")] == uids(messages)
    assert pending_files(store.home) == []
    check_store(store.home)


def test_recovery_at_open_does_not_wait_long_for_a_held_lock(home: Path) -> None:
    messages = convo(2)
    TranscriptWriter(home, "s1").flush(messages)
    others = {f"s{i}": convo(1) for i in range(2, 6)}
    for sid, msgs in others.items():
        TranscriptWriter(home, sid).flush(msgs)
    holder = raw(home)
    holder.execute("BEGIN IMMEDIATE")
    try:
        store = StateStore.open(home)
        report = store.last_replay
        store.close()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    # One short budget (2 s, not the store's 20 s) for the first file, then the others
    # are left alone.
    assert report is not None and report.kept == 2 and report.inserted == 0
    assert "s budget" in report.errors[0] and "within a 2 s budget" in report.errors[0]
    assert "4 more file(s) not tried" in report.errors[-1]
    assert len(pending_files(home)) == 5  # kept for the next open
    recover_and_check(home, "s1", messages)
    for sid, msgs in others.items():
        assert [r["uid"] for r in stored(home, sid)] == uids(msgs)


# -- READONLY ------------------------------------------------------------------------


def test_read_only_connections_are_retried_then_spooled(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    writer = store.transcript_writer("ro", write_budget_s=0.3)
    messages = convo(3)
    with on_store_connections(store, "PRAGMA query_only = 1"), watching_retries(caplog):
        result = writer.flush(messages)
    assert (result.written, result.spooled) == (0, 3)
    assert result.error is not None and "database is read-only for" in result.error
    replays = retries(caplog)  # replayed, not given up at the first error
    assert replays and f"{len(replays) + 1} attempts" in result.error
    recover_and_check(store.home, "ro", messages)


# -- FULL ----------------------------------------------------------------------------


def test_full_database_spools_at_once_then_recovers_when_space_returns(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    writer = store.transcript_writer("full")
    messages = convo(2)
    writer.flush(messages)
    probe = raw(store.home)
    pages = probe.execute("PRAGMA page_count").fetchone()[0]
    probe.close()
    messages += convo(4, start=2, size=20_000)  # each needs new (overflow) pages
    with on_store_connections(store, f"PRAGMA max_page_count = {pages}"), watching_retries(caplog):
        result = writer.flush(messages)
    assert (result.written, result.spooled) == (0, 4)
    assert result.error is not None and result.error.startswith("disk:")
    assert "full" in result.error
    assert retries(caplog) == []  # not a transient error: no retry loop
    recover_and_check(store.home, "full", messages)


def test_enospc_on_sqlite_writes_spools_then_recovers(store: StateStore) -> None:
    writer = store.transcript_writer("enospc")
    messages = convo(2)
    writer.flush(messages)
    messages += convo(3, start=2)
    with FaultInjector(MODULE) as fi:
        rule = fi.fail("write", under(store.home), errno.ENOSPC, count=None)
        result = writer.flush(messages)
        assert rule.fired >= 1
        # Spooling is plain file I/O, not SQLite's: it still works on this "full" disk.
        assert (result.written, result.spooled, result.unsaved) == (0, 3, 0)
        assert result.error is not None and result.error.startswith("disk:")
        fi.clear()  # space returns
        messages += convo(1, start=9)
        later = writer.flush(messages)
    assert (later.written, later.spooled, later.error) == (4, 0, None)
    assert [r["uid"] for r in stored(store.home, "enospc")] == uids(messages)
    assert pending_files(store.home) == []
    check_store(store.home)


def test_a_failure_midway_keeps_written_rows_and_spools_the_rest_in_order(
    store: StateStore,
) -> None:
    writer = store.transcript_writer("mid")
    writer.flush(convo(1))
    probe = raw(store.home)
    pages = probe.execute("PRAGMA page_count").fetchone()[0]
    probe.close()
    # Small rows fit in the pages the file has; the big one needs new pages and fails.
    messages = convo(2, start=1) + convo(1, start=3, size=50_000) + convo(2, start=4)
    with on_store_connections(store, f"PRAGMA max_page_count = {pages}"):
        result = writer.flush(messages)
    assert (result.written, result.spooled) == (2, 3)
    assert result.written_uids + result.spooled_uids == tuple(uids(messages))
    recover_and_check(store.home, "mid", stored_before(store.home, "mid", 1) + messages)


def stored_before(home: Path, session_id: str, n: int) -> list[Msg]:
    return [{"uid": r["uid"]} for r in stored(home, session_id)[:n]]


# -- false alarm ---------------------------------------------------------------------


def test_a_message_both_committed_and_spooled_is_recovered_once(store: StateStore) -> None:
    messages = convo(3)
    store.transcript_writer("fa").flush(messages[:2])
    # A failure reported after the commit had in fact happened spools the same messages.
    TranscriptWriter(store.home, "fa").flush(messages)
    report = store.replay_pending()
    assert (report.inserted, report.duplicates) == (1, 2)
    assert [r["uid"] for r in stored(store.home, "fa")] == uids(messages)
    check_store(store.home)


# -- CORRUPT -------------------------------------------------------------------------


def test_damaged_file_diverts_to_the_salvage_file_which_is_never_replayed(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with StateStore.open(home) as store:
        store.transcript_writer("late").flush(
            [{"role": "user", "content": f"late {i} " + "pad " * 30} for i in range(600)]
        )
    db = home / "state.db"
    damage.checkpoint_and_close(db, module=MODULE)
    damage.overwrite_page(db, damage.btree_pages(db, "messages", module=MODULE)[-1])
    before = damage.file_digest(db)
    store = StateStore.open(home)
    try:
        messages = convo(4)
        with traced(store.engine) as seen, caplog.at_level(logging.INFO, logger="hermes_repo"):
            result = store.transcript_writer("late").flush(messages)
        assert result.spooled == 4 and result.error is not None
        assert result.error.startswith("corrupt:")
        # The group's one write attempt; no per-message fallback on a quarantined file.
        assert count(seen, "BEGIN IMMEDIATE") == 1 and write_commits(seen) == 0
        assert not any("one per transaction" in r.getMessage() for r in caplog.records)
        assert (home / "sessions" / "late.jsonl").exists()
        assert pending_files(home) == []
        assert store.replay_pending().inserted == 0
    finally:
        store.close()
    assert damage.file_digest(db) == before
