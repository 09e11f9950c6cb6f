"""Files the store keeps beside state.db: created 0600, never through a symlink, and a
symlink or an unusable file in their place is an UnsafePathError naming it.

Tests run as root, for whom ``chmod 000`` changes nothing: "unreadable" is a folder
in the file's place. Every planted symlink points at a file whose bytes must survive.
"""

from __future__ import annotations

import logging
import re
import stat
from pathlib import Path

import pytest

from hermes_repo import StateStore, UnsafePathError
from hermes_repo.engine import WRITE_OPTION
from hermes_repo.schema import fts
from hermes_repo.schema.sidefiles import exclusive_lock
from hermes_repo.transcript import spool

PRECIOUS = b"the link's target: must never be written by the store\n"


def _target(tmp_path: Path) -> Path:
    target = tmp_path / "precious.txt"
    target.write_bytes(PRECIOUS)
    return target


def _plant(path: Path, kind: str, target: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        path.symlink_to(target)
    else:
        path.mkdir()


def _mark_stale(home: Path) -> None:
    with (
        StateStore.open(home) as store,
        store.engine.execution_options(**{WRITE_OPTION: True}).begin() as conn,
    ):
        fts.detach(conn, index=None, error="planted by the test")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_side_files_are_created_private(home: Path) -> None:
    _mark_stale(home)
    with StateStore.open(home) as store:
        assert store.health().fts_stale is False  # the guarded rebuild ran
        spool.append_messages(home, "s1", [{"role": "user", "content": "x"}])
    for name in ("state.db.holders", "state.db.fts-rebuild.lock"):
        assert _mode(home / name) == 0o600, name
    assert _mode(home / "sessions" / "s1.pending.jsonl.lock") == 0o600


@pytest.mark.parametrize("kind", ["symlink", "folder"])
@pytest.mark.parametrize(
    "name", ["state.db.holders", "state.db-wal", "state.db-shm", "state.db-journal"]
)
def test_open_refuses_an_unsafe_side_file_and_names_it(
    home: Path, tmp_path: Path, name: str, kind: str
) -> None:
    target = _target(tmp_path)
    _plant(home / name, kind, target)
    with pytest.raises(UnsafePathError) as caught:
        StateStore.open(home)
    assert str(home / name) in str(caught.value)
    assert "symlink" in str(caught.value) if kind == "symlink" else "regular" in str(caught.value)
    assert target.read_bytes() == PRECIOUS


@pytest.mark.parametrize("kind", ["symlink", "folder"])
def test_spool_lock_file_in_the_way_is_refused_by_name(
    home: Path, tmp_path: Path, kind: str
) -> None:
    target = _target(tmp_path)
    lock = spool.sessions_dir(home) / "s1.pending.jsonl.lock"
    _plant(lock, kind, target)
    with pytest.raises(UnsafePathError, match=re.escape(str(lock))):
        spool.append_messages(home, "s1", [{"role": "user", "content": "x"}])
    assert target.read_bytes() == PRECIOUS
    assert not (spool.sessions_dir(home) / "s1.pending.jsonl").exists()


@pytest.mark.parametrize("kind", ["symlink", "folder"])
@pytest.mark.parametrize(
    "name", ["state.db.fts-rebuild.tmp", "state.db.fts-rebuild.lock", "state.db.fts-rebuild.json"]
)
def test_fts_rebuild_never_writes_through_a_planted_side_file(
    home: Path, tmp_path: Path, name: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    _mark_stale(home)
    target = _target(tmp_path)
    _plant(home / name, kind, target)
    with caplog.at_level(logging.WARNING, logger="hermes_repo"), StateStore.open(home) as store:
        # The rebuild is refused, the store opens and keeps working with the index
        # detached; the log names the file.
        assert store.health().fts_stale
    assert target.read_bytes() == PRECIOUS
    assert any(
        str(home / name) in r.getMessage() and "refuses" in r.getMessage() for r in caplog.records
    ), [r.getMessage() for r in caplog.records]


def test_a_held_spool_lock_makes_a_bounded_wait_give_up_and_a_free_one_is_taken(
    home: Path,
) -> None:
    # flock locks belong to the open file: a second open in this process conflicts as
    # another process's would.
    with (
        spool.spool_lock(home, "s1.pending.jsonl"),
        pytest.raises(TimeoutError, match="held by another process"),
        spool.spool_lock(home, "s1.pending.jsonl", timeout=0.05),
    ):
        pass
    with spool.spool_lock(home, "s1.pending.jsonl", timeout=0):
        pass


def test_a_held_side_file_lock_yields_false_to_a_bounded_wait(home: Path) -> None:
    path = home / "state.db.fts-rebuild.lock"
    with exclusive_lock(path) as first:
        assert first is True
        with exclusive_lock(path, timeout=0.05) as second:
            assert second is False
    with exclusive_lock(path, timeout=0) as third:
        assert third is True
