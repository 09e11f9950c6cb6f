"""A store that met a damaged file mid-write, and the commands its advice names.

The store quarantines itself as it would in the field; the test process then forgets the
quarantine, because what follows (salvage, replace, doctor) runs in fresh processes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hermes_repo import StateDbCorruptError, StateStore, quarantine
from hermes_repo.engine import select_driver
from tests.support import damage
from tests.support.stores import fill_early_and_late

__all__ = ["IN_THE_WAL", "PER_SESSION", "advised_commands", "quarantined_mid_write"]

PER_SESSION = 400  # rows of sessions "early" and "late", in the main file
IN_THE_WAL = 50  # rows of session "in-the-wal", committed only in the kept -wal


def quarantined_mid_write(home: Path) -> Path:
    """A store quarantined mid-write whose kept ``-wal`` holds a committed session;
    returns ``state.db``."""
    driver = select_driver()
    db = fill_early_and_late(home, per_session=PER_SESSION)
    damage.damage_first_leaf(db, "messages", module=driver.module)
    store = StateStore.open(home)
    try:
        with store.unit_of_work() as uow:
            # Committed, and only in the -wal: new rows go to the last leaves, far from
            # the damage, and touch the tables, their indexes and the search indexes.
            uow.sessions.create(id="in-the-wal")
            uow.messages.append_many(
                "in-the-wal",
                [{"role": "user", "content": f"kept in the wal {i}"} for i in range(IN_THE_WAL)],
            )
            uow.commit()
        with pytest.raises(StateDbCorruptError), store.unit_of_work() as uow:
            # A write that reads the damaged leaf: the store quarantines itself.
            uow.connection.exec_driver_sql("UPDATE messages SET token_count = 1 WHERE id = 1")
    finally:
        store.close()  # a quarantined close does no checkpoint: the -wal survives
    quarantine.clear(db)  # the CLI runs in fresh processes
    if driver.journal_mode == "WAL":
        wal = home / "state.db-wal"
        assert wal.exists() and wal.stat().st_size > 32
    return db


def advised_commands(text: str) -> list[str]:
    """Every ``hermes-repo ...`` command quoted in backticks in ``text``, in order."""
    return re.findall(r"`(hermes-repo [^`]+)`", text)
