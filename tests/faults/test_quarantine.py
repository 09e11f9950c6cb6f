"""A structurally damaged file is quarantined: nothing this process does touches it again."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import event

from hermes_repo import StateDbCorruptError, StateStore, quarantine
from hermes_repo.engine import select_driver
from tests.support import damage
from tests.support.stores import fill_early_and_late

MODULE = select_driver().module


def _damage_index_root(db: Path) -> None:
    damage.damage_root(db, "ix_messages_session_id_id", module=MODULE)


@pytest.mark.parametrize(
    "inflict", [damage.damage_last_leaf, _damage_index_root], ids=["leaf", "index-root"]
)
def test_first_structural_error_quarantines_and_later_writes_never_reach_the_file(
    home: Path, inflict: object
) -> None:
    fill_early_and_late(home)
    db = home / "state.db"
    inflict(db)  # type: ignore[operator]
    store = StateStore.open(home)
    with pytest.raises(StateDbCorruptError, match="sessions salvage") as first:
        store.append_message("late", {"role": "user", "content": "after damage"})
    assert first.value.__cause__ is not None  # chained to SQLite's own error
    assert store.quarantined and store.health().quarantined
    before = damage.file_digests(db)
    for attempt in range(3):
        with pytest.raises(StateDbCorruptError):
            store.append_message("early", {"role": "user", "content": f"again {attempt}"})
        with pytest.raises(StateDbCorruptError):
            store.unit_of_work()
    assert damage.file_digests(db) == before
    wal = db.read_bytes()[18] == 2  # the header's file format version: 2 is WAL
    store.close()
    assert damage.file_digests(db) == before, "close must not checkpoint a quarantined store"
    # The -wal (forensics) exists only in WAL mode; a rollback journal has none to keep.
    assert Path(f"{db}-wal").exists() is wal
    with pytest.raises(StateDbCorruptError, match="quarantined"):
        StateStore.open(home)


def test_notadb_header_is_refused_at_open_and_quarantined(home: Path) -> None:
    fill_early_and_late(home)
    db = home / "state.db"
    damage.write_notadb_header(db, module=MODULE)
    before = damage.file_digest(db)
    with pytest.raises(StateDbCorruptError, match="not a database"):
        StateStore.open(home)
    assert quarantine.is_quarantined(db)
    with pytest.raises(StateDbCorruptError):
        StateStore.open(home)
    assert damage.file_digest(db) == before


def test_quarantined_pool_never_opens_a_new_connection(home: Path) -> None:
    fill_early_and_late(home)
    damage.damage_last_leaf(home / "state.db")
    store = StateStore.open(home)
    opened: list[object] = []
    event.listen(store.engine, "connect", lambda *a: opened.append(a))
    with pytest.raises(StateDbCorruptError):
        store.append_message("late", {"role": "user", "content": "x"})
    store.engine.dispose()  # drop every pooled connection
    with pytest.raises(StateDbCorruptError):
        store.engine.connect()
    assert opened == []
    store.close()


def test_reads_continue_where_the_file_allows(home: Path) -> None:
    fill_early_and_late(home)
    damage.damage_last_leaf(home / "state.db")
    with StateStore.open(home) as store:
        with pytest.raises(StateDbCorruptError):
            store.append_message("late", {"role": "user", "content": "x"})
        early = store.load_conversation("early").messages
        assert len(early) == 600 and early[0]["content"].startswith("early message 0 ")


def test_quarantine_is_per_file(home: Path, tmp_path: Path) -> None:
    fill_early_and_late(home)
    damage.damage_last_leaf(home / "state.db")
    with StateStore.open(home) as damaged:
        with pytest.raises(StateDbCorruptError):
            damaged.append_message("late", {"role": "user", "content": "x"})
        with StateStore.open(tmp_path / "other") as healthy:
            with healthy.unit_of_work() as uow:
                uow.sessions.create(id="fine")
                uow.commit()
            assert healthy.append_message("fine", {"role": "user", "content": "ok"}) > 0
            assert not healthy.health().quarantined


def test_sqlite_alone_lets_writes_through_after_a_corrupt_rollback(home: Path) -> None:
    """The field case: SQLite itself does not quarantine, so the layer must."""
    fill_early_and_late(home)
    db = home / "state.db"
    damage.damage_last_leaf(db)
    conn = MODULE.connect(str(db), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        with pytest.raises(MODULE.DatabaseError) as caught:
            conn.execute(
                "INSERT INTO messages (session_id, uid, role, content, timestamp) "
                "VALUES ('late', 'u-x', 'user', 'x', 1.0)"
            )
        assert caught.value.sqlite_errorcode & 0xFF == 11
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        before = damage.file_digests(db)
        conn.execute("UPDATE sessions SET title = 'still writable' WHERE id = 'early'")
        assert damage.file_digests(db) != before  # the damaged file was written again
    finally:
        conn.close()


def test_stdlib_driver_keeps_the_wal_at_close_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forget_quarantine: Callable[[Path], Path]
) -> None:
    # Python 3.11 has no Connection.setconfig: the ctypes path (or the sentinel) must hold.
    monkeypatch.setenv("HERMES_REPO_JOURNAL_MODE", "WAL")
    home = tmp_path / "std"
    forget_quarantine(home / "state.db")
    with StateStore.open(home, driver="stdlib") as store, store.unit_of_work() as uow:
        uow.sessions.create(id="late")
        uow.messages.append_many("late", [{"role": "user", "content": "pad " * 40}] * 600)
        uow.commit()
    import sqlite3

    damage.checkpoint_and_close(home / "state.db", module=sqlite3)
    damage.overwrite_page(home / "state.db", damage.btree_pages(home / "state.db", "messages")[-1])
    store = StateStore.open(home, driver="stdlib")
    with pytest.raises(StateDbCorruptError):
        store.append_message("late", {"role": "user", "content": "x"})
    before = damage.file_digests(home / "state.db")
    store.close()
    assert damage.file_digests(home / "state.db") == before
    assert os.path.exists(f"{home / 'state.db'}-wal")


def test_the_failing_structural_write_is_not_retried(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill_early_and_late(home)
    damage.damage_last_leaf(home / "state.db")
    store = StateStore.open(home)
    replays: list[object] = []
    original = store.database.write_once

    def counting(work: object) -> object:
        replays.append(work)
        return original(work)  # type: ignore[arg-type]

    monkeypatch.setattr(store.database, "write_once", counting)
    with pytest.raises(StateDbCorruptError):
        store.append_message("late", {"role": "user", "content": "x"})
    assert replays == []  # no second attempt through the instrumented path
    store.close()
