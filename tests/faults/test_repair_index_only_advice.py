"""A repair that fails on a problem confined to the search index sends the operator to
free space and repair again, never to ``sessions salvage`` (the salvage of a damaged
file, the wrong tool when the canonical tables are sound)."""

from __future__ import annotations

import errno
from pathlib import Path

from hermes_repo.ops.repair import repair_store
from tests.support import damage
from tests.support.faultinject import FaultInjector, endswith
from tests.support.fts_checks import (
    MODULE,
    give_up_rebuild,
    read_state,
)


def test_a_full_disk_during_the_index_rebuild_points_at_space_and_repair(
    seeded_home: Path,
) -> None:
    give_up_rebuild(seeded_home, lambda db: damage.fts_delete_averages(db, module=MODULE))
    db = seeded_home / "state.db"
    with FaultInjector(MODULE) as fi:
        # The backup (.bak) and the snapshot are written; the rebuild's own writes to
        # the store (its WAL or rollback journal) meet a full disk.
        rule = fi.fail(
            "write", endswith("state.db-wal", "state.db-journal"), errno.ENOSPC, count=None
        )
        report = repair_store(seeded_home)
        assert rule.fired >= 1

    assert not report.ok and report.damage == "index"
    assert report.backup is not None  # the backup was taken before the rebuild failed
    steps = " ".join(report.next_steps)
    assert "sessions salvage" not in steps
    assert f"free space beside {db}" in steps
    assert f"hermes-repo --home {seeded_home} sessions repair" in steps
    assert read_state(db).detached  # the index stays detached; the rows are untouched
