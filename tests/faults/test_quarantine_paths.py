"""Quarantine through the engine events, on every path that touches the file.

``append_message`` quarantines on its own driver fast path; everything else (a unit of
work, the repositories, ``store.write``, raw Core on ``store.engine``, an ORM session)
relies on the quarantine's engine events. Each test here meets real page damage (a
leaf, the interior root and an index root of ``messages``) through one of those paths
and fails if the guard it proves is taken out:

* ``handle_error``: the first structural error quarantines the file, whatever the path;
* ``before_cursor_execute``: a later statement that writes is refused before SQLite
  sees it, even on a plain (deferred) connection that was already checked out;
* ``begin``: a write transaction on a quarantined store is refused before its
  ``BEGIN IMMEDIATE`` is even attempted;
* ``close``: closing does not checkpoint, both with the C switch and with the read-only
  sentinel used where that switch is not available; the ``-wal`` survives and the
  file's bytes do not change.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text, update
from sqlalchemy.orm import Session

from hermes_repo import StateDbCorruptError, StateStore, quarantine
from hermes_repo.engine import WRITE_OPTION, select_driver
from hermes_repo.models import AgentSession, Message
from hermes_repo.uow import UnitOfWork
from tests.support import damage
from tests.support.stores import fill_early_and_late

DRIVER = select_driver()
MODULE = DRIVER.module
WAL = DRIVER.journal_mode == "WAL"


def _interior(db: Path) -> None:
    interior = damage.btree_pages(db, "messages", "internal", module=MODULE)
    assert interior, "the messages b-tree must have an interior page"
    damage.overwrite_page(db, interior[0])


def _index(db: Path) -> None:
    damage.damage_root(db, "ix_messages_session_id_id", module=MODULE)


DAMAGE: dict[str, Callable[[Path], None]] = {
    "leaf": damage.damage_last_leaf,
    "interior": _interior,
    "index": _index,
}


def _new_message(i: int = 0) -> dict[str, Any]:
    return {"role": "user", "content": f"after damage {i}", "uid": f"u-after-{i}"}


# Each path meets the damage with a write of session "late" (its rows live in the
# damaged leaf, under the damaged root, and behind the damaged index).


def _via_unit_of_work(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        uow.connection.execute(
            text(
                "INSERT INTO messages (session_id, uid, role, content, timestamp) "
                "VALUES ('late', 'u-uow', 'user', 'x', 1.0)"
            )
        )
        uow.commit()


def _via_repository(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        uow.messages.append("late", _new_message())
        uow.commit()


def _via_store_write(store: StateStore) -> None:
    store.write(lambda uow: uow.messages.append("late", _new_message()))


def _via_core(store: StateStore) -> None:
    with store.engine.connect() as conn:
        # Assigning session_id rewrites the row's entries in the session index too.
        conn.execute(
            text(
                "UPDATE messages SET session_id = session_id, content = content || '!' "
                "WHERE id = (SELECT max(id) FROM messages)"
            )
        )
        conn.commit()


def _via_orm(store: StateStore) -> None:
    with Session(bind=store.engine) as session:
        session.add(
            Message(session_id="late", uid="u-orm", role="user", content="x", timestamp=1.0)
        )
        session.commit()


PATHS: dict[str, Callable[[StateStore], None]] = {
    "unit-of-work": _via_unit_of_work,
    "repository": _via_repository,
    "store-write": _via_store_write,
    "core": _via_core,
    "orm": _via_orm,
}


def _damaged_store(home: Path, kind: str) -> StateStore:
    """A store on a file with ``kind`` damage, with committed frames in its ``-wal``.

    The frames (a title on the undamaged ``sessions`` table) are what a close-time
    checkpoint would copy into the damaged file. (With a rollback journal the title is
    in the main file and there is no checkpoint to fear.)
    """
    fill_early_and_late(home)
    DAMAGE[kind](home / "state.db")
    store = StateStore.open(home)
    store.write(
        lambda uow: uow.connection.execute(
            text("UPDATE sessions SET title = 'before the damage was met' WHERE id = 'early'")
        )
    )
    if WAL:
        assert Path(f"{store.path}-wal").stat().st_size > 0
    return store


@pytest.mark.parametrize("kind", list(DAMAGE))
@pytest.mark.parametrize("path", list(PATHS))
def test_structural_damage_met_on_any_path_quarantines_and_nothing_reaches_the_file(
    home: Path, path: str, kind: str
) -> None:
    store = _damaged_store(home, kind)
    db = store.path
    try:
        # Checked out before the damage is met: a connection the pool never has to open
        # again, so only the statement guard stands between it and the file.
        held = store.engine.connect()
        with pytest.raises(StateDbCorruptError, match="sessions salvage") as first:
            PATHS[path](store)
        assert first.value.__cause__ is not None  # chained to SQLite's own error
        assert quarantine.is_quarantined(db) and store.quarantined
        before = damage.file_digests(db)

        with pytest.raises(StateDbCorruptError, match="quarantined"):
            held.execute(text("UPDATE sessions SET title = 'spread' WHERE id = 'early'"))
            held.commit()
        held.rollback()
        # An INSERT is a write too (a new session in an undamaged table would land).
        with pytest.raises(StateDbCorruptError, match="quarantined"):
            held.execute(text("INSERT INTO sessions (id, started_at) VALUES ('spread', 1.0)"))
            held.commit()
        held.rollback()
        held.close()

        assert store.engine.pool.checkedin() >= 1  # type: ignore[attr-defined]
        with Session(bind=store.engine) as orm, pytest.raises(StateDbCorruptError):
            orm.execute(
                update(AgentSession).where(AgentSession.id == "early").values(title="orm spread")
            )
            orm.commit()

        with pytest.raises(StateDbCorruptError):
            store.write(lambda uow: uow.messages.append("early", _new_message(1)))
        with pytest.raises(StateDbCorruptError):
            store.append_message("early", _new_message(2))
        assert damage.file_digests(db) == before
    finally:
        store.close()
    assert damage.file_digests(db) == before, "close must not checkpoint a quarantined store"
    if WAL:
        assert Path(f"{db}-wal").stat().st_size > 0  # the committed frames are still there
    with pytest.raises(StateDbCorruptError, match="quarantined"):
        StateStore.open(home)


def test_damage_in_the_sessions_table_is_structural_and_quarantines(home: Path) -> None:
    """The verdict's quick_check covers ``sessions`` too: a bare SQLITE_CORRUPT from a
    damaged sessions page is the file's damage, never taken for the search index's."""
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        for i in range(400):  # enough rows for the sessions b-tree to have many leaves
            uow.sessions.create(id=f"s{i:04d}", title="a title " + "pad " * 20)
        uow.commit()
    db = home / "state.db"
    damage.checkpoint_and_close(db, module=MODULE)
    leaves = damage.btree_pages(db, "sessions", module=MODULE)
    assert len(leaves) > 2
    damage.overwrite_page(db, leaves[-1])

    store = StateStore.open(home)
    try:
        with pytest.raises(StateDbCorruptError, match="sessions salvage"):
            store.write(
                lambda uow: uow.connection.execute(
                    text("UPDATE sessions SET title = 'x' WHERE id = 's0399'")
                )
            )
        assert store.quarantined and quarantine.is_quarantined(db)
    finally:
        store.close()


def _take_out_statement_guard(store: StateStore) -> None:
    """Remove the quarantine's ``before_cursor_execute`` listener from the store's engine.

    SQLAlchemy keeps the listener wrapped; the quarantine's own function is found in the
    wrapper's closure, so the begin hook can be proved on its own.
    """
    for wrapper in list(store.engine.dispatch.before_cursor_execute):
        for cell in wrapper.__closure__ or ():
            fn = cell.cell_contents
            if callable(fn) and getattr(fn, "__module__", "") == quarantine.__name__:
                event.remove(store.engine, "before_cursor_execute", fn)
                return
    raise AssertionError("the quarantine's statement guard is not installed")


def _trace(store: StateStore) -> list[str]:
    """Every statement SQLite itself runs on the store's pooled connection from now on."""
    seen: list[str] = []
    raw = store.engine.raw_connection()  # the pooled connection: no new one is opened
    try:
        raw.driver_connection.set_trace_callback(seen.append)  # type: ignore[union-attr]
    finally:
        raw.close()
    return seen


def test_the_begin_hook_alone_refuses_a_write_transaction(home: Path) -> None:
    store = _damaged_store(home, "leaf")
    db = store.path
    try:
        with pytest.raises(StateDbCorruptError):
            _via_core(store)
        before = damage.file_digests(db)
        _take_out_statement_guard(store)
        ran = _trace(store)
        writer = store.engine.execution_options(**{WRITE_OPTION: True})
        with writer.connect() as conn, pytest.raises(StateDbCorruptError, match="quarantined"):
            conn.execute(text("UPDATE sessions SET title = 'spread' WHERE id = 'early'"))
            conn.commit()
        # A unit of work made before the quarantine and entered after it: same refusal.
        with pytest.raises(StateDbCorruptError), UnitOfWork(writer) as uow:
            uow.connection.execute(text("UPDATE sessions SET title = 'x' WHERE id = 'early'"))
            uow.commit()
        assert not [s for s in ran if "UPDATE" in s], ran
        assert damage.file_digests(db) == before
    finally:
        store.close()


@pytest.mark.parametrize("switch", ["c-switch", "sentinel"])
def test_close_of_a_quarantined_store_does_no_checkpoint(
    home: Path, monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    if not WAL:
        pytest.skip("rollback-journal mode: no -wal, so no close-time checkpoint to stop")
    if switch == "sentinel":
        # A build where SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE cannot be reached (no
        # setconfig, no provable C handle): the read-only sentinel must hold the file.
        monkeypatch.setattr(quarantine, "disable_checkpoint_on_close", lambda *_a: False)
    sentinels = quarantine.sentinel_count()
    store = _damaged_store(home, "leaf")
    db = store.path
    with pytest.raises(StateDbCorruptError):
        _via_store_write(store)
    before = damage.file_digests(db)
    assert before[1] is not None
    store.close()
    assert damage.file_digests(db) == before
    opened = quarantine.sentinel_count() - sentinels
    assert opened == (1 if switch == "sentinel" else 0)
    # A plain read-only look (no checkpoint: mode=ro never writes) finds the frames.
    con = MODULE.connect(f"file:{db}?mode=ro", uri=True)
    try:
        title = con.execute("SELECT title FROM sessions WHERE id = 'early'").fetchone()
    finally:
        con.close()
    assert title == ("before the damage was met",)
