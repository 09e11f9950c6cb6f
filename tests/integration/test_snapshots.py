"""Snapshots on real store files: create, list, retention, restore and its refusals.

Damage is real (a ``messages`` leaf page overwritten in a closed file); a store "held by
another process" is a real subprocess with ``StateStore`` open; a crashed writer is a
subprocess killed with SIGKILL, which leaves committed rows only in the ``-wal``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import SchemaMismatchError, StateDbCorruptError, StateStore, UnsafePathError
from hermes_repo.engine import select_driver
from hermes_repo.holders import StoreHeldError
from hermes_repo.maintenance import snapshots as snaps
from hermes_repo.maintenance.snapshots import (
    Snapshot,
    SnapshotBusyError,
    SnapshotNotFoundError,
    SnapshotSchemaError,
    SnapshotSpaceError,
    SnapshotStoreHeldError,
    SnapshotVerifyError,
    create_snapshot,
    list_snapshots,
    restore_snapshot,
    snapshot_before,
)
from hermes_repo.maintenance.snapshots import folder as snapshot_folder
from hermes_repo.schema import migrate
from tests.support.damage import checkpoint_and_close, damage_first_leaf, write_notadb_header
from tests.support.stores import file_mode

MODULE = select_driver().module
UNKNOWN_REVISION = "ffffffffffff"


# -- helpers ---------------------------------------------------------------------------


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fill(home: Path, sessions: int = 3, per_session: int = 40) -> list[str]:
    """Sessions with enough text for ``messages`` to span several pages, and one archived
    (inactive) row, so "all" and "active" counts differ."""
    sids = []
    with StateStore.open(home) as store:
        for s in range(sessions):
            with store.unit_of_work() as uow:
                sid = uow.sessions.create(source="cli", title=f"session {s}")
                uow.messages.append_many(
                    sid,
                    [
                        {
                            "role": "user" if i % 2 == 0 else "assistant",
                            "content": f"s{s} m{i} " + "lorem ipsum dolor " * 12,
                        }
                        for i in range(per_session)
                    ],
                )
                uow.commit()
            sids.append(sid)
        # Two user turns in a row: a repairing load merges them and archives one row.
        store.append_message(sids[0], {"role": "user", "content": "one more"})
        store.append_message(sids[0], {"role": "user", "content": "and another"})
        assert store.load_conversation(sids[0], repair=True).repairs == 1
    return sids


def _conversations(home: Path, sids: list[str]) -> dict[str, list[dict[str, Any]]]:
    with StateStore.open(home) as store:
        return {
            sid: store.load_conversation(sid, include_inactive=True, with_ids=True).messages
            for sid in sids
        }


def _sql_counts(db: Path) -> dict[str, int]:
    con = MODULE.connect(db.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return {
            "sessions": con.execute("SELECT count(*) FROM sessions").fetchone()[0],
            "messages": con.execute("SELECT count(*) FROM messages").fetchone()[0],
            "active_messages": con.execute(
                "SELECT count(*) FROM messages WHERE active = 1"
            ).fetchone()[0],
        }
    finally:
        con.close()


def _manifest(snap: Snapshot) -> dict[str, Any]:
    data = json.loads(snap.manifest_path.read_text())
    assert isinstance(data, dict)
    return data


def _rewrite_manifest(snap: Snapshot, **changes: Any) -> None:
    data = _manifest(snap)
    data.update(changes)
    snap.manifest_path.write_text(json.dumps(data))


def _reseal(snap: Snapshot) -> None:
    """Make the manifest's sha256 and size match the file again (after a deliberate edit)."""
    _rewrite_manifest(snap, sha256=_digest(snap.path), size=snap.path.stat().st_size)


def _store_files(home: Path) -> dict[str, str]:
    return {
        p.name: _digest(p)
        for p in sorted(home.iterdir())
        if p.is_file() and p.name.startswith("state.db") and not p.name.endswith(".holders")
    }


_HOLDER = textwrap.dedent(
    """
    import sys
    from hermes_repo import SchemaMismatchError, StateDbCorruptError, StateStore, UnsafePathError
    store = StateStore.open(sys.argv[1])
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(source="crash")
        uow.messages.append_many(
            sid, [{"role": "user", "content": f"held {i}"} for i in range(int(sys.argv[2]))]
        )
        uow.commit()
    print("ready", flush=True)
    sys.stdin.read()
    store.close()
    """
)


@contextlib.contextmanager
def holder(home: Path, writes: int = 0) -> Iterator[subprocess.Popen[str]]:
    """Another process with the store open (and ``writes`` committed rows in a new session)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(home), str(writes)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


# -- create and list -----------------------------------------------------------------


def test_create_lists_revision_counts_sha256_and_private_modes(home: Path) -> None:
    _fill(home)
    snap = create_snapshot(home, label="  before   cleanup ")

    assert list_snapshots(home) == [snap]
    assert snap.ok
    assert snap.revision == migrate.head_revision()
    assert snap.counts == _sql_counts(home / "state.db")
    assert snap.counts["messages"] > snap.counts["active_messages"] > 0
    assert snap.label == "before cleanup"  # whitespace folded: one line in listings

    manifest = _manifest(snap)
    assert manifest["sha256"] == _digest(snap.path) == snap.sha256
    assert manifest["size"] == snap.path.stat().st_size
    assert manifest["source"] == str(home / "state.db")
    assert manifest["sqlite_version"] == select_driver().sqlite_version
    assert manifest["created_at"].endswith("Z")
    assert snap.id.startswith(manifest["created_at"][:4])

    folder = home / snaps.SNAPSHOT_DIR
    assert file_mode(folder) == 0o700
    assert file_mode(snap.path) == 0o600
    assert file_mode(snap.manifest_path) == 0o600
    # One self-contained file: no -wal/-shm/-journal, no temporary left.
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [".lock", snap.path.name, snap.manifest_path.name]
    )
    assert snap.path.read_bytes()[18:20] == b"\x01\x01"  # rollback journal, not WAL


def test_snapshot_of_a_live_store_includes_rows_still_in_the_wal(home: Path) -> None:
    with StateStore.open(home) as store:
        with store.unit_of_work() as uow:
            sid = uow.sessions.create()
            uow.commit()
        for i in range(20):
            store.append_message(sid, {"role": "user", "content": f"live {i}"})
        if store.driver.journal_mode == "WAL":
            assert (home / "state.db-wal").stat().st_size > 0
        snap = create_snapshot(home)
        store.append_message(sid, {"role": "user", "content": "after the snapshot"})
    assert snap.counts["messages"] == 20


def test_folder_is_tightened_and_a_symlinked_folder_refused(home: Path, tmp_path: Path) -> None:
    folder = home / snaps.SNAPSHOT_DIR
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    create_snapshot(home)
    assert file_mode(folder) == 0o700

    other = tmp_path / "other-home"
    other.mkdir()
    (other / "state.db").write_bytes((home / "state.db").read_bytes())
    (tmp_path / "elsewhere").mkdir()
    (other / snaps.SNAPSHOT_DIR).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UnsafePathError, match="symlink"):
        create_snapshot(other)
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_create_refuses_without_free_space_and_writes_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.disk_usage

    def tiny(path: Any) -> Any:
        usage = real(path)
        return type(usage)(usage.total, usage.total - 1000, 1000)

    monkeypatch.setattr(shutil, "disk_usage", tiny)
    with pytest.raises(SnapshotSpaceError, match=r"not enough free space .* free space"):
        create_snapshot(home)
    folder = home / snaps.SNAPSHOT_DIR
    assert [p.name for p in folder.iterdir()] == [".lock"]


@contextlib.contextmanager
def tiny_disk(folder: Path, size: int) -> Iterator[None]:
    """A real, small filesystem (tmpfs) mounted at ``folder``; skips where mount is denied."""
    folder.mkdir(mode=0o700, exist_ok=True)
    kib = max(size // 1024, 16)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=0700", "tmpfs", str(folder)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_real_full_disk_refuses_first_or_fails_cleanly(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(home)
    checkpoint_and_close(home / "state.db", module=MODULE)
    size = (home / "state.db").stat().st_size
    folder = home / snaps.SNAPSHOT_DIR
    with tiny_disk(folder, size // 2):
        with pytest.raises(SnapshotSpaceError, match="not enough free space"):
            create_snapshot(home)
        assert [p.name for p in folder.iterdir()] == [".lock"]
    # No margin, and just the store's size free: the check passes and the disk fills up
    # during the copy or its journal switch; nothing half-made may stay behind.
    monkeypatch.setattr(snapshot_folder, "SPACE_MARGIN_BYTES", 0)
    monkeypatch.setattr(snapshot_folder, "SPACE_MARGIN_SHARE", 0.0)
    # In WAL mode the copy's journal switch needs a page more than the copy; with a
    # rollback journal the copy's own journal is what no longer fits.
    wal = select_driver().journal_mode == "WAL"
    with tiny_disk(folder, size + 4096 if wal else size):
        with pytest.raises(SnapshotSpaceError, match="free space"):
            create_snapshot(home)
        assert [p.name for p in folder.iterdir()] == [".lock"]
        assert list_snapshots(home) == []


def test_a_damaged_store_gets_no_snapshot_and_is_not_written(home: Path) -> None:
    _fill(home)
    db = home / "state.db"
    checkpoint_and_close(db, module=MODULE)
    damage_first_leaf(db, "messages", module=MODULE)
    before = _digest(db)
    with pytest.raises(SnapshotVerifyError, match="integrity_check"):
        create_snapshot(home)
    assert _digest(db) == before
    assert list_snapshots(home) == []
    assert [p.name for p in (home / snaps.SNAPSHOT_DIR).iterdir()] == [".lock"]


def test_no_store_no_snapshot(tmp_path: Path) -> None:
    home = tmp_path / "nothing-here"
    home.mkdir()
    with pytest.raises(snaps.SnapshotError, match="no store"):
        create_snapshot(home)
    assert snapshot_before(home, "pre-upgrade") is None
    assert not (home / "state.db").exists()  # asking never creates a store


def test_snapshot_before_labels_the_snapshot_with_the_reason(home: Path) -> None:
    _fill(home, sessions=1)
    snap = snapshot_before(home, "pre-upgrade")
    assert snap is not None
    assert snap.label == "pre-upgrade"
    assert list_snapshots(home) == [snap]


class _CountingFlock:
    """``fcntl`` as the snapshot module sees it, counting its lock attempts."""

    LOCK_EX, LOCK_NB, LOCK_UN = fcntl.LOCK_EX, fcntl.LOCK_NB, fcntl.LOCK_UN

    def __init__(self) -> None:
        self.attempts = 0

    def flock(self, fd: int, op: int) -> None:
        if op & fcntl.LOCK_EX:
            self.attempts += 1
        fcntl.flock(fd, op)


@pytest.mark.parametrize("wait_s", [0.0, 0.35])
def test_concurrent_snapshot_operation_is_refused_after_a_short_wait(
    home: Path, monkeypatch: pytest.MonkeyPatch, wait_s: float
) -> None:
    _fill(home, sessions=1)
    snap = create_snapshot(home)
    monkeypatch.setattr(snapshot_folder, "FOLDER_LOCK_WAIT_S", wait_s)
    counting = _CountingFlock()
    monkeypatch.setattr(snapshot_folder, "fcntl", counting)
    folder = home / snaps.SNAPSHOT_DIR
    before = _store_files(home)
    # The other operation holds the folder lock on its own open file (flock locks
    # belong to the open file, so this conflicts as another process would).
    with snapshot_folder.folder_lock(folder, wait_s=0):
        held = counting.attempts
        for operation in (lambda: create_snapshot(home), lambda: restore_snapshot(home, snap.id)):
            counting.attempts = 0
            with pytest.raises(SnapshotBusyError, match="another snapshot"):
                operation()
            # Polls every 0.1 s until the wait is over: one try when no wait is set, a
            # few for a short wait; sleeping longer on a loaded machine only means fewer.
            if wait_s == 0:
                assert counting.attempts == 1
            else:
                assert 2 <= counting.attempts <= math.ceil(wait_s / 0.1) + 1
    assert held == 1
    assert list_snapshots(home) == [snap]
    assert _store_files(home) == before


# -- retention and half-made snapshots --------------------------------------------------


def test_retention_keeps_the_newest_n(home: Path) -> None:
    made = [create_snapshot(home, keep=3, label=str(i)) for i in range(7)]
    listed = list_snapshots(home)
    assert [s.id for s in listed] == [s.id for s in reversed(made[-3:])]
    folder = home / snaps.SNAPSHOT_DIR
    for gone in made[:-3]:
        assert not gone.path.exists() and not gone.manifest_path.exists()
    assert len(list(folder.glob("*.db"))) == 3
    create_snapshot(home)  # default keep
    assert len(list_snapshots(home)) == 4


def test_half_made_snapshot_is_never_listed_restored_or_pruned(home: Path) -> None:
    real = create_snapshot(home)
    folder = home / snaps.SNAPSHOT_DIR
    # A crash between the copy and the manifest leaves a .db alone (older than anything).
    orphan_id = "20000101T000000Z-abcdef"
    orphan = folder / f"{orphan_id}.db"
    orphan.write_bytes(real.path.read_bytes())
    # A crash mid-copy leaves a .partial; the next create removes it.
    leftover = folder / "20000101T000001Z-fedcba.db.partial"
    leftover.write_bytes(b"half")

    assert [s.id for s in list_snapshots(home)] == [real.id]
    with pytest.raises(SnapshotNotFoundError, match="snapshot list"):
        restore_snapshot(home, orphan_id)
    for _ in range(3):
        create_snapshot(home, keep=1)
    assert orphan.exists()
    assert not leftover.exists()
    assert len(list_snapshots(home)) == 1


def test_damaged_manifest_is_listed_as_damaged_and_refused(home: Path) -> None:
    good = create_snapshot(home)
    bad = create_snapshot(home)
    bad.manifest_path.write_text('{"id": "truncated"')
    gone = create_snapshot(home)
    gone.path.unlink()

    listed = {s.id: s for s in list_snapshots(home)}
    assert listed[good.id].ok
    assert not listed[bad.id].ok and "manifest unreadable" in str(listed[bad.id].error)
    assert not listed[gone.id].ok and "missing" in str(listed[gone.id].error)
    with pytest.raises(SnapshotVerifyError, match="cannot be restored"):
        restore_snapshot(home, bad.id)
    # Retention neither counts nor deletes them: an operator should look at them.
    create_snapshot(home, keep=1)
    assert bad.manifest_path.exists()


@pytest.mark.parametrize("bad_id", ["../state", "20240101T000000Z-abcdef/../../x", "", "x.json"])
def test_an_id_never_names_a_path_outside_the_folder(home: Path, bad_id: str) -> None:
    create_snapshot(home)
    with pytest.raises(SnapshotNotFoundError, match="not a snapshot id"):
        restore_snapshot(home, bad_id)


# -- restore ---------------------------------------------------------------------------


def test_restore_over_a_damaged_store_moves_it_aside_and_gives_back_the_snapshot(
    home: Path,
) -> None:
    sids = _fill(home)
    expected = _conversations(home, sids)
    snap = create_snapshot(home)
    with StateStore.open(home) as store:
        store.append_message(sids[1], {"role": "user", "content": "written after the snapshot"})

    db = home / "state.db"
    checkpoint_and_close(db, module=MODULE)
    damage_first_leaf(db, "messages", module=MODULE)
    damaged = _digest(db)
    with pytest.raises(StateDbCorruptError):
        _conversations(home, sids)

    result = restore_snapshot(home, snap.id)

    assert result.safety_snapshot is None
    assert result.counts == snap.counts
    assert _conversations(home, sids) == expected
    # Moved aside as a set, byte for byte: the probe that found it unreadable never wrote.
    names = sorted(p.name for p in result.moved_aside)
    assert names[0].startswith("state.db.damaged-")
    assert all(n.startswith(names[0]) for n in names)
    assert {n[len(names[0]) :] for n in names} <= {"", "-wal", "-shm", "-journal"}
    assert _digest(home / names[0]) == damaged
    assert "moved aside" in result.previous
    assert file_mode(db) == 0o600
    assert not list(home.glob("*.partial*"))


def test_restore_over_a_readable_store_keeps_it_as_a_pre_restore_snapshot(home: Path) -> None:
    sids = _fill(home)
    expected = _conversations(home, sids)
    snap = create_snapshot(home)
    # A writer that crashes leaves committed rows only in the -wal: the pre-restore
    # snapshot must hold them, and that -wal must not be replayed into the restored file.
    with holder(home, writes=30) as proc:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    if select_driver().journal_mode == "WAL":
        assert (home / "state.db-wal").stat().st_size > 0
    counts_before = _sql_counts(home / "state.db")

    result = restore_snapshot(home, snap.id)

    safety = result.safety_snapshot
    assert safety is not None and safety.label == "pre-restore"
    assert safety.counts == counts_before
    assert safety.counts["messages"] == snap.counts["messages"] + 30
    assert result.moved_aside == ()
    assert _conversations(home, sids) == expected
    assert _sql_counts(home / "state.db") == snap.counts
    with StateStore.open(home) as store:
        assert store.health().at_head
    assert [s.id for s in list_snapshots(home)] == [safety.id, snap.id]

    # ...and the restore can itself be undone from the safety snapshot.
    restore_snapshot(home, safety.id)
    assert _sql_counts(home / "state.db") == counts_before


def test_restore_over_a_file_that_is_not_a_database_moves_it_aside(home: Path) -> None:
    sids = _fill(home, sessions=1)
    expected = _conversations(home, sids)
    snap = create_snapshot(home)
    db = home / "state.db"
    write_notadb_header(db, module=MODULE)
    broken = _digest(db)

    result = restore_snapshot(home, snap.id)

    assert result.safety_snapshot is None
    assert _digest(result.moved_aside[0]) == broken
    assert _conversations(home, sids) == expected


def test_restore_deletes_no_snapshot(home: Path) -> None:
    first, second = create_snapshot(home, keep=2), create_snapshot(home, keep=2)
    result = restore_snapshot(home, first.id)
    assert result.safety_snapshot is not None
    assert {s.id for s in list_snapshots(home)} == {first.id, second.id, result.safety_snapshot.id}
    newest = create_snapshot(home, keep=2)  # retention applies at the next create
    # ...to the operator's snapshots only: the automatic pre-restore one is kept apart.
    assert [s.id for s in list_snapshots(home)] == [
        newest.id,
        result.safety_snapshot.id,
        second.id,
    ]


def test_restore_into_a_home_without_a_store(home: Path) -> None:
    _fill(home, sessions=1)
    snap = create_snapshot(home)
    for name in ("state.db", "state.db-wal", "state.db-shm"):
        (home / name).unlink(missing_ok=True)
    result = restore_snapshot(home, snap.id)
    assert result.safety_snapshot is None and result.moved_aside == ()
    assert result.previous == "there was no store"
    assert _sql_counts(home / "state.db") == snap.counts

    # Only the main file gone, its -wal left behind: the orphan is kept aside, and never
    # replayed into the restored file.
    (home / "state.db").unlink()
    (home / "state.db-wal").write_bytes(b"orphaned wal frames")
    result = restore_snapshot(home, snap.id)
    [aside] = [p for p in result.moved_aside if p.name.endswith("-wal")]
    assert aside.read_bytes() == b"orphaned wal frames"
    assert not (home / "state.db-wal").exists() or _digest(home / "state.db-wal") != _digest(aside)
    assert _sql_counts(home / "state.db") == snap.counts


def test_restore_refuses_a_snapshot_of_another_schema_revision(home: Path) -> None:
    _fill(home, sessions=1)
    snap = create_snapshot(home)
    con = MODULE.connect(str(snap.path), isolation_level=None)
    con.execute("UPDATE alembic_version SET version_num = ?", (UNKNOWN_REVISION,))
    con.close()
    _rewrite_manifest(snap, revision=UNKNOWN_REVISION)
    before = _store_files(home)

    with pytest.raises(SnapshotSchemaError, match=rf"{UNKNOWN_REVISION}.*head is"):
        restore_snapshot(home, snap.id)
    assert _store_files(home) == before
    assert [s.id for s in list_snapshots(home)] == [snap.id]  # no pre-restore snapshot

    # A manifest that claims head cannot smuggle it in: the file itself is checked too.
    _rewrite_manifest(snap, revision=migrate.head_revision())
    _reseal(snap)
    with pytest.raises(SnapshotSchemaError, match="inside its file"):
        restore_snapshot(home, snap.id)
    assert _store_files(home) == before
    assert isinstance(SnapshotSchemaError("x"), SchemaMismatchError)


def test_restore_refuses_while_another_process_holds_the_store(home: Path) -> None:
    _fill(home, sessions=1)
    snap = create_snapshot(home)
    with holder(home):
        before = _store_files(home)
        with pytest.raises(SnapshotStoreHeldError, match="another process") as info:
            restore_snapshot(home, snap.id)
        assert isinstance(info.value, StoreHeldError)
        assert f"snapshot restore {snap.id}" in str(info.value)
        assert _store_files(home) == before
    assert [s.id for s in list_snapshots(home)] == [snap.id]


def test_restore_refuses_a_snapshot_whose_bytes_changed(home: Path) -> None:
    _fill(home, sessions=1)
    snap = create_snapshot(home)
    data = bytearray(snap.path.read_bytes())
    data[-1] ^= 0xFF  # one bit of free space in the last page: SQLite would not notice
    snap.path.write_bytes(bytes(data))
    before = _store_files(home)
    with pytest.raises(SnapshotVerifyError, match="sha256"):
        restore_snapshot(home, snap.id)
    assert _store_files(home) == before


def test_restore_refuses_a_snapshot_that_fails_integrity_check(home: Path) -> None:
    _fill(home)
    snap = create_snapshot(home)
    damage_first_leaf(snap.path, "messages", module=MODULE)
    _reseal(snap)  # the damage is "recorded": only integrity_check can catch it now
    before = _store_files(home)
    with pytest.raises(SnapshotVerifyError, match="integrity_check"):
        restore_snapshot(home, snap.id)
    assert _store_files(home) == before


def test_restore_refuses_without_room_for_the_copy(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fill(home, sessions=1)
    snap = create_snapshot(home)
    real = shutil.disk_usage
    monkeypatch.setattr(
        shutil,
        "disk_usage",
        lambda p: type(real(p))(real(p).total, real(p).total, 4096),
    )
    before = _store_files(home)
    with pytest.raises(SnapshotSpaceError, match="restored copy"):
        restore_snapshot(home, snap.id)
    assert _store_files(home) == before


def test_restore_refuses_on_a_real_disk_without_room_for_the_copy(
    tmp_path: Path, template_home: Path
) -> None:
    """The store, its snapshots and the restored copy on one small tmpfs, filled up."""
    home = tmp_path / "small-disk-home"
    with tiny_disk(home, 48 * 2**20):
        shutil.copyfile(template_home / "state.db", home / "state.db")
        os.chmod(home / "state.db", 0o600)
        _fill(home, sessions=1)
        snap = create_snapshot(home)
        # Leave less free than one copy plus its margin: a real full disk, not a fake
        # disk_usage. (The restored copy and the pre-restore snapshot share this disk.)
        ballast = home / "ballast"
        left = 8 * 2**20
        with open(ballast, "wb") as f:
            chunk = b"\0" * 2**20
            while shutil.disk_usage(home).free - len(chunk) > left:
                f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
        assert shutil.disk_usage(home).free < snapshot_folder.with_margin(snap.size or 0)
        before = _store_files(home)
        with pytest.raises(SnapshotSpaceError, match="restored copy"):
            restore_snapshot(home, snap.id)
        assert _store_files(home) == before
        assert list_snapshots(home) == [snap]  # no pre-restore snapshot was started
        assert not [p for p in home.iterdir() if ".restore-" in p.name]
        # The refusal was the disk's: with the room back, the same restore goes through.
        ballast.unlink()
        assert restore_snapshot(home, snap.id).snapshot == snap


def test_keep_must_be_positive(home: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        create_snapshot(home, keep=0)
