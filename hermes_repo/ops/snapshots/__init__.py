"""Deprecated home of the snapshots: they are :mod:`hermes_repo.maintenance.snapshots`.

The store takes a snapshot before it migrates a file at open, so snapshots sit below
the store with the other operations it may run; this alias keeps the old import path
(and its submodules, as attributes) working for one release.
"""

from __future__ import annotations

from ...maintenance.snapshots import (
    AUTO_KEEP,
    AUTO_MAX_BYTES,
    DEFAULT_KEEP,
    SNAPSHOT_DIR,
    Origin,
    RestoreResult,
    Snapshot,
    SnapshotBusyError,
    SnapshotError,
    SnapshotNotFoundError,
    SnapshotSchemaError,
    SnapshotSpaceError,
    SnapshotStoreHeldError,
    SnapshotVerifyError,
    copies,
    create,
    create_snapshot,
    folder,
    list_snapshots,
    manifest,
    restore,
    restore_snapshot,
    snapshot_before,
    snapshots_dir,
)

__all__ = [
    "AUTO_KEEP",
    "AUTO_MAX_BYTES",
    "DEFAULT_KEEP",
    "SNAPSHOT_DIR",
    "Origin",
    "RestoreResult",
    "Snapshot",
    "SnapshotBusyError",
    "SnapshotError",
    "SnapshotNotFoundError",
    "SnapshotSchemaError",
    "SnapshotSpaceError",
    "SnapshotStoreHeldError",
    "SnapshotVerifyError",
    "copies",
    "create",
    "create_snapshot",
    "folder",
    "list_snapshots",
    "manifest",
    "restore",
    "restore_snapshot",
    "snapshot_before",
    "snapshots_dir",
]
