"""Backups and snapshots that keep what matters.

Before: every ``sessions repair`` / ``doctor --fix`` took a full ``.pre-repair-*.bak``
and a ``pre-repair`` snapshot even on a healthy store (twelve runs, twelve backups), and
automatic snapshots counted toward the retention of 5, so five repairs deleted an
operator's own labelled snapshot.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hermes_repo.engine import select_driver
from hermes_repo.maintenance.snapshots import (
    AUTO_KEEP,
    create_snapshot,
    list_snapshots,
    snapshot_before,
)
from hermes_repo.ops.repair import repair_store
from hermes_repo.schema.backup import (
    BACKUP_KEEP,
    BackupSpaceError,
    read_only_engine,
    timestamped_backup,
)
from tests.cli.conftest import run_cli_from_root
from tests.support import damage
from tests.support.stores import fill_session

MODULE = select_driver().module


def test_repairs_of_a_healthy_store_take_no_backup_and_no_snapshot(home: Path) -> None:
    fill_session(home, "s", 20, "m")
    for _ in range(12):
        report = repair_store(home)
        assert report.ok and report.backup is None and report.snapshot is None
        assert report.verified
    fixed = run_cli_from_root("--home", home, "doctor", "--fix")
    assert fixed.code == 0, fixed.stdout + fixed.stderr
    assert list(home.glob("*.bak")) == []
    assert list_snapshots(home) == []


def test_a_repair_that_changes_something_still_backs_up_first(home: Path) -> None:
    fill_session(home, "s", 20, "m")
    damage.checkpoint_and_close(home / "state.db", module=MODULE)
    con = MODULE.connect(str(home / "state.db"), isolation_level=None)
    try:
        con.execute("DROP TRIGGER messages_fts_insert")  # search would miss new rows
    finally:
        con.close()
    report = repair_store(home)
    assert report.ok and report.backup is not None and Path(report.backup).exists()
    assert [s.origin for s in list_snapshots(home)] == ["automatic"]


def test_automatic_snapshots_never_push_out_an_operators_snapshot(home: Path) -> None:
    fill_session(home, "s", 20, "m")
    mine = create_snapshot(home, label="before the migration of the gateway")
    for _ in range(AUTO_KEEP + 3):
        snapshot_before(home, "pre-repair")
    snaps = list_snapshots(home)
    assert mine.id in [s.id for s in snaps]
    assert [s.origin for s in snaps].count("automatic") == AUTO_KEEP
    assert next(s for s in snaps if s.id == mine.id).origin == "operator"

    # And the operator's own retention counts only the operator's snapshots.
    automatic = {s.id for s in snaps if s.origin == "automatic"}
    for i in range(3):
        create_snapshot(home, label=f"nightly {i}", keep=2)
    snaps = list_snapshots(home)
    assert {s.id for s in snaps if s.origin == "automatic"} == automatic
    assert [s.label for s in snaps if s.origin == "operator"] == ["nightly 2", "nightly 1"]

    listing = run_cli_from_root("--home", home, "snapshot", "list")
    assert listing.code == 0
    assert "operator  nightly 2" in listing.stdout and "automatic  pre-repair" in listing.stdout


def test_backups_have_their_own_retention(home: Path) -> None:
    fill_session(home, "s", 20, "m")
    db = home / "state.db"
    engine = read_only_engine(db, select_driver())
    try:
        made = []
        for i in range(BACKUP_KEEP + 2):
            path = timestamped_backup(engine, db, "pre-repair")
            os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))  # distinct, in order
            made.append(path)
    finally:
        engine.dispose()
    kept = sorted(home.glob("state.db.pre-repair-*.bak"))
    assert sorted(made[-BACKUP_KEEP:]) == kept


def test_free_space_is_checked_before_a_backup(home: Path) -> None:
    fill_session(home, "s", 20, "m")
    db = home / "state.db"
    damage.checkpoint_and_close(db, module=MODULE)
    # The file grows (sparse) past the disk's free space; SQLite ignores the tail, so
    # the store is sound, but a backup of that size cannot fit.
    free = os.statvfs(home).f_bavail * os.statvfs(home).f_frsize
    try:
        os.truncate(db, db.stat().st_size + 2 * free)
    except OSError as exc:  # a file system whose files cannot be that large
        pytest.skip(f"cannot make a sparse file of {2 * free} bytes here: {exc}")
    engine = read_only_engine(db, select_driver())
    try:
        with pytest.raises(BackupSpaceError, match="free space"):
            timestamped_backup(engine, db, "pre-repair")
    finally:
        engine.dispose()
    assert list(home.glob("*.bak")) == []
