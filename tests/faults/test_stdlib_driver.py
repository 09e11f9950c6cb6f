"""The standard-library SQLite (rollback journal) as a first-class path.

With a rollback journal a committing writer blocks readers, for longer than
``busy_timeout`` when its transaction is long: reads must wait it out within a budget as
writes do, and nothing but a :class:`HermesRepoError` may leave the public API. The
writer is another PROCESS with its own SQLite (tests/support/holding.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.errors import DatabaseBusyError, HermesRepoError
from tests.support.holding import held_alone_by_another_process, locked_by_another_process

# Longer than busy_timeout (1 s): a read that starts inside a hold fails once in SQLite.
HOLD_S = 2.0


def _seed(home: Path) -> None:
    # Opened alone with the standard module, the file switches to a rollback journal.
    with StateStore.open(home, driver="stdlib") as store:
        with store.unit_of_work() as uow:
            uow.sessions.create(id="chat")
            uow.messages.append_many(
                "chat",
                [
                    {"role": "user", "content": "hello locked world"},
                    {"role": "assistant", "content": "hello again"},
                ],
            )
            uow.commit()
        assert store.health().journal_mode == "delete"


def test_reads_wait_out_another_process_holding_the_write_lock(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_REPO_DRIVER", "stdlib")
    _seed(home)
    with locked_by_another_process(
        home / "state.db", tmp_path / "signals", hold_s=HOLD_S, driver="stdlib"
    ) as locker:
        locker.wait_for_next_hold()
        store = StateStore.open(home)
        try:
            locker.wait_for_next_hold()
            assert [h.role for h in store.search("hello")] == ["assistant", "user"]
            locker.wait_for_next_hold()
            assert len(store.load_conversation("chat").messages) == 2
            locker.wait_for_next_hold()
            assert store.load_conversation("chat", repair=True).repairs == 0
            locker.wait_for_next_hold()
            health = store.health()
            assert health.counts["messages"] == 2
            assert not [n for n in health.notes if "could not read" in n], health.notes
        finally:
            store.close()


def test_a_spent_read_budget_is_a_library_error_naming_the_lock(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_REPO_DRIVER", "stdlib")
    _seed(home)
    store = StateStore.open(home, write_budget_s=0.2)
    try:
        with locked_by_another_process(
            home / "state.db", tmp_path / "signals", hold_s=30, driver="stdlib"
        ) as locker:
            locker.wait_for_next_hold()
            calls = {
                "search": lambda: store.search("hello"),
                "load": lambda: store.load_conversation("chat"),
                "load-repair": lambda: store.load_conversation("chat", repair=True),
                "append": lambda: store.append_message("chat", {"role": "user", "content": "x"}),
                "open": lambda: StateStore.open(home, write_budget_s=0.2).close(),
            }
            for name, call in calls.items():
                with pytest.raises(HermesRepoError) as info:
                    call()
                assert isinstance(info.value, DatabaseBusyError), (name, info.value)
                assert "locked" in str(info.value), name
            # health() still answers, and says why it could not read.
            health = store.health()
            assert any("could not read the store" in n and "locked" in n for n in health.notes)
    finally:
        store.close()


def test_open_honours_its_budget_while_another_process_holds_the_store_alone(
    home: Path, tmp_path: Path
) -> None:
    with held_alone_by_another_process(home / "state.db", tmp_path / "signals") as proc:
        with pytest.raises(DatabaseBusyError) as info:
            StateStore.open(home, write_budget_s=0.5)
        message = str(info.value)
        assert f"pid {proc.pid}" in message
        assert "to itself" in message and "open again" in message
        assert info.value.elapsed_s is not None and info.value.elapsed_s >= 0.5
        # Still held: the open gave up on its own, not because the holder left.
        assert proc.poll() is None
