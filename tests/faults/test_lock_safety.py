"""Nothing the library does while a store is open in this process may close a descriptor
of its file: the kernel then drops every POSIX lock the process holds on it, the locks
of SQLite's own connections included (SQLite's "how to corrupt", 2.2), and another
process may write under a reader or beside a writer. The check that tells Hermes
Agent's own state.db from ours read the file's header on every open."""

from __future__ import annotations

import os
from pathlib import Path

from hermes_repo import StateStore
from hermes_repo.engine import db_path_for_home
from hermes_repo.homes import store_kind
from hermes_repo.maintenance.snapshots import list_snapshots
from hermes_repo.ops.doctor import diagnose


def _posix_locks_of_this_process(db: Path) -> list[str]:
    st = os.stat(db)
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    me = str(os.getpid())
    with open("/proc/locks") as locks:
        # Each line without its leading ordinal: the kernel numbers the lines of the
        # whole table, and other processes' locks coming and going renumber ours.
        return [
            " ".join(line.split()[1:])
            for line in locks
            if key in line and "POSIX" in line and line.split()[4] == me
        ]


def test_an_open_reader_keeps_its_lock_while_stores_paths_and_checks_are_resolved(
    home: Path,
) -> None:
    with StateStore.open(home) as store, store.engine.connect() as conn:
        conn.exec_driver_sql("SELECT count(*) FROM messages").all()
        held = _posix_locks_of_this_process(store.path)
        assert held, "the reader holds a lock on the file"

        assert store_kind(store.path) == "ours"
        db_path_for_home(home)
        with StateStore.open(home):  # a second store object of the same file
            pass
        list_snapshots(home)
        diagnose(home)

        assert _posix_locks_of_this_process(store.path) == held
