"""Faults of the matrix in docs/reliability.md that no other test produced for real.

* SQLITE_LOCKED (6): a statement still pending on the connection while the same unit
  drops a table. The store classifies it transient and replays the whole unit.
* SQLITE_BUSY_SNAPSHOT (517): a deferred read transaction that writes after another
  connection committed. ``busy_timeout`` does not help and the transaction stays open;
  only a new transaction does. The store's units of work begin with ``BEGIN IMMEDIATE``
  and so never meet it: proved by the same interleaving through the store's own engine.
  (The repairing load meets it on purpose: see ``transcript/reconcile.py``.)
* SQLITE_READONLY (8) from a connection opened with ``mode=ro`` (``query_only`` is in
  ``test_flush_faults.py``): retried within the budget, then spooled.
* SQLITE_IOERR through the store: EIO injected into SQLite's writes, and a real
  ``RLIMIT_FSIZE`` (the kernel refuses the write with EFBIG: SQLITE_IOERR_WRITE).
* A damaged ``messages`` root page met by a store write: quarantine, not index damage.
* A real full disk (a small tmpfs, where the test may mount one): the database write
  and the spool both fail, and the flush says so instead of claiming the messages safe.

``pysqlite3`` reports primary result codes only; extended codes are read with
``sqlite3_extended_errcode`` on the connection's handle where a test needs them.
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import resource
import shutil
import signal
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import OperationalError

from hermes_repo import (
    DatabaseBusyError,
    StateDbCorruptError,
    StateStore,
)
from hermes_repo.retry import RetryPolicy
from hermes_repo.schema import fts
from hermes_repo.uow import UnitOfWork
from tests.support import damage
from tests.support.disks import small_tmpfs
from tests.support.faultinject import FaultInjector, under
from tests.support.processes import reaped
from tests.support.retries import (
    count_busy_handler_calls,
    extended_code,
    retries,
    watching_retries,
)
from tests.support.spooling import (
    MODULE,
    check_store,
    convo,
    pending_files,
    raw,
    stored,
    uids,
)

Msg = dict[str, Any]
SQLITE_BUSY_SNAPSHOT = 517
FORK = multiprocessing.get_context("fork")


def recover_and_check(home: Path, session_id: str, messages: list[Msg]) -> None:
    """Recovery leaves every message stored exactly once, in order, and no spool."""
    with StateStore.open(home) as store:
        report = store.last_replay
        assert report is not None and not report.errors, report
    assert [r["uid"] for r in stored(home, session_id)] == uids(messages)
    assert pending_files(home) == []
    check_store(home)


# -- LOCKED --------------------------------------------------------------------------


def _scratch_table(home: Path) -> None:
    con = raw(home)
    try:
        con.execute("CREATE TABLE scratch(x)")
        con.executemany("INSERT INTO scratch VALUES (?)", [(i,) for i in range(10)])
    finally:
        con.close()


def _drop_under_a_pending_read(uow: UnitOfWork) -> None:
    """SQLITE_LOCKED for real: DROP TABLE while a SELECT on it is still stepping."""
    pending = uow.connection.exec_driver_sql("SELECT x FROM scratch")
    try:
        pending.fetchone()
        uow.connection.exec_driver_sql("DROP TABLE scratch")
    finally:
        pending.close()


def test_locked_by_a_pending_statement_replays_the_whole_unit_once(store: StateStore) -> None:
    _scratch_table(store.home)
    attempts = 0
    seen: list[tuple[int | None, str]] = []

    @event.listens_for(store.engine, "handle_error")
    def _record(ctx: ExceptionContext) -> None:
        err = ctx.original_exception
        seen.append((getattr(err, "sqlite_errorcode", None), str(err)))

    def work(uow: UnitOfWork) -> int:
        nonlocal attempts
        attempts += 1
        uow.sessions.ensure("locked")
        row = uow.messages.append("locked", {"role": "user", "content": "x", "uid": "u-locked"})
        if attempts == 1:
            _drop_under_a_pending_read(uow)
        return row

    store.write(work)
    assert seen == [(6, "database table is locked")]  # SQLITE_LOCKED, both builds
    assert attempts == 2  # replayed from its start, not patched up
    assert [r["uid"] for r in stored(store.home, "locked")] == ["u-locked"]
    check_store(store.home)


def test_locked_until_the_budget_ends_names_a_table_in_use(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    _scratch_table(store.home)
    with watching_retries(caplog), pytest.raises(DatabaseBusyError) as info:
        store.write(_drop_under_a_pending_read, policy=RetryPolicy(budget_s=0.3))
    replays = retries(caplog)  # SQLITE_LOCKED does not wait: replayed until the budget ends
    assert len(replays) >= 1 and replays == list(range(1, len(replays) + 1))
    assert f"({len(replays) + 1} attempts within a 0.3 s budget" in str(info.value)
    assert info.value.elapsed_s is not None and info.value.elapsed_s >= 0.3
    assert "a table is in use" in str(info.value)
    assert info.value.elapsed_s is not None  # an outer loop must not retry it again
    con = raw(store.home)
    try:  # every attempt rolled back: the table is still there
        assert con.execute("SELECT count(*) FROM scratch").fetchone() == (10,)
    finally:
        con.close()


# -- BUSY_SNAPSHOT -------------------------------------------------------------------


def test_busy_snapshot_needs_a_new_transaction(mod: types.ModuleType, tmp_path: Path) -> None:
    db = tmp_path / "wal.db"
    reader = mod.connect(str(db), isolation_level=None, timeout=2.0)
    other = mod.connect(str(db), isolation_level=None, timeout=2.0)
    try:
        reader.execute("PRAGMA journal_mode=WAL")
        reader.execute("CREATE TABLE t(x)")
        reader.execute("BEGIN")  # deferred: a read transaction until it first writes
        reader.execute("SELECT count(*) FROM t").fetchone()
        other.execute("INSERT INTO t VALUES ('committed by another connection')")
        # busy_timeout is not used: SQLite never calls the busy handler for it.
        busy_calls = count_busy_handler_calls(mod, reader, db)
        for _ in range(2):  # the same statement again cannot help
            with pytest.raises(mod.OperationalError) as info:
                reader.execute("INSERT INTO t VALUES ('stale snapshot')")
            assert busy_calls == []
            assert extended_code(mod, reader, db) == SQLITE_BUSY_SNAPSHOT
            reported = 5 if mod.__name__.startswith("pysqlite3") else SQLITE_BUSY_SNAPSHOT
            assert info.value.sqlite_errorcode == reported
            assert reader.in_transaction  # the transaction is still open
        reader.execute("ROLLBACK")
        reader.execute("BEGIN IMMEDIATE")  # a new transaction sees the new snapshot
        reader.execute("INSERT INTO t VALUES ('after restart')")
        reader.execute("COMMIT")
        assert reader.execute("SELECT count(*) FROM t").fetchone() == (2,)
    finally:
        reader.close()
        other.close()


def test_a_unit_of_work_cannot_meet_busy_snapshot(store: StateStore) -> None:
    """The interleaving that gives BUSY_SNAPSHOT, on the store's own engine: a read
    connection (plain BEGIN) meets it; a unit of work, which reads under the write lock
    taken by BEGIN IMMEDIATE, cannot be overtaken by another commit at all."""
    if store.driver.journal_mode != "WAL":
        pytest.skip("BUSY_SNAPSHOT exists only in WAL mode")
    with store.unit_of_work() as uow:
        uow.sessions.ensure("snap")
        uow.commit()
    message: Msg = {"role": "user", "content": "late writer"}

    # The read path: a deferred transaction that tries to write after another commit.
    with store.engine.connect() as conn:
        conn.execute(text("SELECT count(*) FROM messages")).one()
        store.append_message("snap", {"role": "user", "content": "overtakes the reader"})
        with pytest.raises(OperationalError) as info:
            conn.execute(text("DELETE FROM state_meta WHERE key = 'none'"))
        dbapi = conn.connection.dbapi_connection
        assert extended_code(store.driver.module, dbapi, store.path) == SQLITE_BUSY_SNAPSHOT
        assert getattr(info.value.orig, "sqlite_errorcode", 0) & 0xFF == 5  # BUSY family
        conn.rollback()

    # The write path: the first read already holds the write lock.
    with store.unit_of_work() as uow:
        before = uow.sessions.require("snap").message_count
        other = raw(store.home, timeout=0)
        try:
            with pytest.raises(MODULE.OperationalError) as busy:
                other.execute("BEGIN IMMEDIATE")  # nobody can commit in between...
            assert busy.value.sqlite_errorcode & 0xFF == 5  # ...they get plain BUSY
        finally:
            other.close()
        uow.messages.append("snap", message)  # so the unit's write never fails
        uow.commit()
    with store.unit_of_work() as uow:
        assert uow.sessions.require("snap").message_count == before + 1


def test_contended_read_then_write_units_never_meet_busy_snapshot(store: StateStore) -> None:
    """Threads released together, each reading then writing. Through deferred read
    transactions all but one of each round meet BUSY_SNAPSHOT; through the store's
    units of work none does, and every unit commits exactly once."""
    if store.driver.journal_mode != "WAL":
        pytest.skip("BUSY_SNAPSHOT exists only in WAL mode")
    threads, rounds = 4, 5
    with store.unit_of_work() as uow:
        uow.sessions.ensure("race")
        uow.commit()
    errors: list[tuple[str, int]] = []
    lock = threading.Lock()

    @event.listens_for(store.engine, "handle_error")
    def _record(ctx: ExceptionContext) -> None:
        dbapi = ctx.connection.connection.dbapi_connection if ctx.connection else None
        code = extended_code(store.driver.module, dbapi, store.path) if dbapi else -1
        with lock:
            errors.append((ctx.statement or "", code))

    def deferred(tag: str) -> None:
        with store.engine.connect() as conn:
            conn.execute(text("SELECT count(*) FROM messages")).one()
            time.sleep(0.005)
            try:
                conn.execute(
                    text("INSERT INTO state_meta(key, value, updated_at) VALUES (:k, 'x', 0)"),
                    {"k": tag},
                )
                conn.commit()
            except OperationalError:
                conn.rollback()

    def unit(tag: str) -> None:
        def work(uow: UnitOfWork) -> None:
            uow.sessions.require("race")
            time.sleep(0.005)
            uow.messages.append("race", {"role": "user", "content": tag, "uid": tag})

        store.write(work)

    def run(target: Any) -> None:
        for r in range(rounds):
            gate = threading.Barrier(threads)

            def go(i: int, r: int = r, gate: threading.Barrier = gate) -> None:
                gate.wait()
                target(f"{target.__name__}-{r}-{i}")

            workers = [threading.Thread(target=go, args=(i,)) for i in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()

    run(deferred)
    snapshots = [s for s, code in errors if code == SQLITE_BUSY_SNAPSHOT]
    assert snapshots  # the hazard is real on this engine (typically 3 of 4 in every round)
    assert all(s.lstrip().upper().startswith("INSERT") for s in snapshots)

    errors.clear()
    run(unit)
    assert [code for _s, code in errors if code == SQLITE_BUSY_SNAPSHOT] == []
    # Whatever waited, waited at BEGIN IMMEDIATE, before reading anything.
    assert all(s.strip().upper() == "BEGIN IMMEDIATE" for s, _code in errors), errors
    rows = [r["uid"] for r in stored(store.home, "race")]
    assert sorted(rows) == sorted(f"unit-{r}-{i}" for r in range(rounds) for i in range(threads))
    check_store(store.home)


# -- READONLY (mode=ro) --------------------------------------------------------------


@contextlib.contextmanager
def opened_read_only(store: StateStore) -> Iterator[None]:
    """Every connection the store opens while the block runs is opened ``mode=ro``."""

    def read_only(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        cargs[0] = f"{Path(cargs[0]).absolute().as_uri()}?mode=ro"
        cparams["uri"] = True

    event.listen(store.engine, "do_connect", read_only)
    store.engine.dispose()
    try:
        yield
    finally:
        event.remove(store.engine, "do_connect", read_only)
        store.engine.dispose()


def test_a_store_opened_read_only_retries_then_spools_and_recovers(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    writer = store.transcript_writer("ro", write_budget_s=0.3)
    messages = convo(2)
    assert writer.flush(messages).written == 2
    messages += convo(3, start=2)
    with opened_read_only(store), watching_retries(caplog):
        result = writer.flush(messages)
    assert (result.written, result.spooled, result.unsaved) == (0, 3, 0)
    assert result.error is not None and "database is read-only for" in result.error
    # The last attempt's error, as SQLite gave it: SQLITE_READONLY (8).
    assert "attempt to write a readonly database (SQLITE_READONLY)" in result.error
    replays = retries(caplog)  # retried within the budget, then spooled
    assert len(replays) >= 1 and f"{len(replays) + 1} attempts" in result.error
    store.close()
    recover_and_check(store.home, "ro", messages)


# -- IOERR ---------------------------------------------------------------------------


def test_eio_on_sqlite_writes_spools_then_recovers(
    store: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    writer = store.transcript_writer("eio")
    messages = convo(2)
    writer.flush(messages)
    messages += convo(3, start=2)
    with FaultInjector(MODULE) as fi:
        rule = fi.fail("write", under(store.home), errno.EIO, count=None)
        with watching_retries(caplog):
            result = writer.flush(messages)
        assert retries(caplog) == []  # not transient: no retry loop
        assert rule.fired >= 1
        assert (result.written, result.spooled, result.unsaved) == (0, 3, 0)
        assert result.error is not None and result.error.startswith("disk:")
        assert "disk I/O error" in result.error
        fi.clear()  # the device recovers
        messages += convo(1, start=9)
        later = writer.flush(messages)
    assert (later.written, later.spooled, later.error) == (4, 0, None)
    assert [r["uid"] for r in stored(store.home, "eio")] == uids(messages)
    assert pending_files(store.home) == []
    check_store(store.home)


def _probe_write(db: Path) -> int:
    """The extended code SQLite gives a commit that the file-size limit refuses."""
    con = MODULE.connect(str(db), isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("CREATE TABLE IF NOT EXISTS t(x)")
        try:
            con.execute("BEGIN IMMEDIATE")
            con.execute("INSERT INTO t VALUES (?)", ("z" * 400_000,))
            con.execute("COMMIT")
        except MODULE.Error:
            return extended_code(MODULE, con, db)
        return 0
    finally:
        con.close()


def _fsize_child(home: Path, report: Path, n: int) -> None:
    """Flush ``n`` large messages under a file-size limit the WAL soon reaches."""
    try:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal death
        store = StateStore.open(home)
        limit = 256 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        writer = store.transcript_writer("fsize")
        messages: list[Msg] = []
        lines = []
        for i in range(n):
            messages.append({"role": "user", "content": f"big {i} " + "y" * 20_000})
            r = writer.flush(messages)
            lines += [f"OK {u}" for u in r.written_uids] + [f"FB {u}" for u in r.spooled_uids]
            if r.error:
                lines.append(f"ERROR {r.error}")
            if r.unsaved:
                lines.append("UNSAVED")
        with contextlib.suppress(Exception):
            store.close()  # its checkpoint may hit the limit too: the WAL then stays
        lines.append(f"CODE {_probe_write(home.parent / 'fsize-probe.db')}")
        report.write_text("\n".join(lines) + "\n")
    except BaseException as exc:
        report.write_text(f"CRASH {exc!r}\n")
        os._exit(1)
    os._exit(0)


def test_a_file_size_limit_gives_ioerr_write_and_the_flush_spools(home: Path) -> None:
    """RLIMIT_FSIZE: the kernel refuses the WAL write (EFBIG), SQLite reports
    SQLITE_IOERR_WRITE; no injection involved."""
    report = home.parent / "fsize-report.txt"
    n = 8
    proc = FORK.Process(target=_fsize_child, args=(home, report, n))
    proc.start()
    with reaped([proc]):
        proc.join(60)
    out = report.read_text()
    assert proc.exitcode == 0, out
    ok = [line[3:] for line in out.splitlines() if line.startswith("OK ")]
    fb = [line[3:] for line in out.splitlines() if line.startswith("FB ")]
    errors = [line for line in out.splitlines() if line.startswith("ERROR ")]
    assert "UNSAVED" not in out
    assert ok and fb, out  # some messages committed, then the limit was reached
    assert errors and all(e.startswith("ERROR disk:") and "disk I/O error" in e for e in errors)
    codes = {line for line in out.splitlines() if line.startswith("CODE ")}
    # What SQLite gives such a write, on a separate file: SQLITE_IOERR_WRITE (pysqlite3
    # reports the primary code, 10).
    assert codes == {"CODE 778"}, codes
    with StateStore.open(home) as store:  # recovery at open, the limit gone
        report_ = store.last_replay
        assert report_ is not None and not report_.errors
    rows = [r["uid"] for r in stored(home, "fsize")]
    assert len(rows) == n and set(rows) == set(ok) | set(fb)  # each exactly once
    assert rows[: len(ok)] == ok  # committed first, then the replayed spool, in order
    assert pending_files(home) == []
    check_store(home)


# -- b-tree damage: the messages root ------------------------------------------------


def test_damaged_messages_root_quarantines_and_is_not_taken_for_index_damage(
    home: Path,
) -> None:
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        uow.sessions.create(id="root")
        uow.messages.append_many(
            "root", [{"role": "user", "content": f"row {i} " + "pad " * 30} for i in range(600)]
        )
        uow.commit()
    db = home / "state.db"
    damage.checkpoint_and_close(db, module=MODULE)
    damage.damage_root(db, "messages", module=MODULE)
    before = damage.file_digest(db)

    store = StateStore.open(home)
    try:
        with pytest.raises(StateDbCorruptError, match="sessions salvage") as info:
            store.append_message("root", {"role": "user", "content": "after the damage"})
        cause = info.value.__cause__
        assert cause is not None and "malformed" in str(cause)
        assert store.quarantined
        with pytest.raises(StateDbCorruptError):  # refused before SQLite
            store.append_message("root", {"role": "user", "content": "again"})
    finally:
        store.close()
    assert damage.file_digest(db) == before  # no byte written, not even a detach
    con = MODULE.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        triggers = {
            r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
        }
        marker = con.execute("SELECT 1 FROM state_meta WHERE key = 'fts_stale'").fetchone()
    finally:
        con.close()
    assert set(fts.TRIGGER_NAMES) <= triggers and marker is None


# -- a real full disk ---------------------------------------------------------------


def _fill(folder: Path, leave: int) -> Path:
    """Fill the filesystem but ``leave`` bytes."""
    filler = folder / "filler"
    free = shutil.disk_usage(folder).free - leave
    with open(filler, "wb") as f, contextlib.suppress(OSError):
        f.write(b"\0" * max(free, 0))
    return filler


def test_a_real_full_disk_reports_unsaved_messages_and_loses_none(
    template_home: Path, tmp_path: Path
) -> None:
    """Disk full for SQLite *and* for the spool: the flush says the messages are only in
    memory (never that they are safe), and the next flush after space returns writes
    them."""
    with small_tmpfs(tmp_path / "small", kib=2048) as home:
        shutil.copyfile(template_home / "state.db", home / "state.db")
        store = StateStore.open(home)
        try:
            writer = store.transcript_writer("full")
            messages = convo(2)
            assert writer.flush(messages).written == 2
            filler = _fill(home, leave=8 * 1024)
            messages += convo(3, start=2, size=30_000)
            result = writer.flush(messages)
            assert result.written + result.spooled + result.unsaved == 3
            assert result.unsaved > 0, result  # the spool could not be written either
            assert result.error is not None and "full" in result.error
            filler.unlink()  # space returns
            again = writer.flush(messages)
            assert again.error is None, again
        finally:
            store.close()
        assert [r["uid"] for r in stored(home, "full")] == uids(messages)
        check_store(home)
