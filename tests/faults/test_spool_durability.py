"""What the spool promises beyond its format: an append is on disk before it returns
(file and folder fsynced), and a recovery never reads a file a writer is appending to
(it waits for the file's lock).

Each test fails when its guarantee is taken out: the first watches ``os.fsync`` (a spy
that still syncs), the second holds a real ``flock`` the way a writer mid-append does
and watches the kernel's lock table for the recovery queueing behind it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.transcript import spool
from hermes_repo.transcript.replay import ReplayReport
from tests.support.spooling import convo, stored

WAIT_S = 60.0


def _owner(store: StateStore) -> spool.SpoolOwner:
    here = store.store_identity
    return spool.SpoolOwner(here.store_id, here.target)


def test_a_spool_append_fsyncs_the_file_and_its_folder_before_it_returns(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    path = spool.append_messages(store.home, "s", convo(3), owner=_owner(store))

    folder = spool.sessions_dir(store.home)
    assert str(path) in synced, synced  # the records
    assert str(folder.resolve()) in synced, synced  # the new file's directory entry
    # And the second append to the same file syncs it again.
    synced.clear()
    spool.append_messages(store.home, "s", convo(2, start=3), owner=_owner(store))
    assert str(path) in synced and str(folder.resolve()) in synced


def _waiters_on(path: Path) -> int:
    """How many lock requests the kernel has queued (``->`` lines) on ``path``'s inode."""
    st = path.stat()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with open("/proc/locks") as locks:
        return sum(1 for line in locks if "->" in line and dev in line)


def test_recovery_waits_for_a_writer_mid_append_and_replays_its_whole_records(
    store: StateStore,
) -> None:
    home = store.home
    messages = convo(4)
    spool.append_messages(home, "s", messages[:2], owner=_owner(store))
    name = spool.pending_name("s")
    path = spool.sessions_dir(home) / name
    lock_file = spool.sessions_dir(home) / (name + spool.LOCK_SUFFIX)

    done: list[Any] = []
    with spool.spool_lock(home, name):
        # A writer mid-append: half of a record is on disk, the rest not yet written.
        line = spool.encode_record(spool.wrap(messages[2], 1.0, "s", None, _owner(store)))
        with open(path, "ab") as f:
            f.write(line[: len(line) // 2])
        recovery = threading.Thread(target=lambda: done.append(store.replay_pending()))
        recovery.start()
        # Event-driven: the recovery shows up in the kernel's queue for the lock (or,
        # if it did not take the lock, finishes on the torn file).
        for _ in range(int(WAIT_S / 0.01)):
            if _waiters_on(lock_file) or done:
                break
            threading.Event().wait(0.01)
        assert not done, "recovery ran without waiting for the spool file's lock"
        assert _waiters_on(lock_file) == 1
        with open(path, "ab") as f:
            f.write(line[len(line) // 2 :])
        spool.append_lines(
            home,
            name,
            [spool.encode_record(spool.wrap(messages[3], 1.0, "s", None, _owner(store)))],
        )
    recovery.join(WAIT_S)
    assert not recovery.is_alive()
    report = done[0]
    assert isinstance(report, ReplayReport) and not report.errors, report
    assert [r["content"] for r in stored(home, "s")] == [m["content"] for m in messages]
    assert not path.exists()
    assert not (spool.sessions_dir(home) / spool.pending_name("s", spool.REJECTED_SUFFIX)).exists()
