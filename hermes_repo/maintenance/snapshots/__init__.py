"""Snapshots: verified, restorable copies of the store in ``<home>/state-snapshots/``.

A snapshot is two files, ``<id>.db`` (0600) and ``<id>.json`` (its manifest, 0600), in a
0700 folder. The package is split by job:

- :mod:`.manifest`: ids, manifests, the values and errors callers see, listing and
  retention;
- :mod:`.folder`: the private folder, its lock (one create or restore at a time) and the
  free-space check;
- :mod:`.copies`: sealing and verifying a copy (sha256, ``integrity_check``, revision,
  counts), and copying a snapshot back;
- :mod:`.create`: taking a snapshot (:func:`create_snapshot`, :func:`snapshot_before`);
- :mod:`.restore`: putting one in place of the store (:func:`restore_snapshot`).

These functions open the store with :func:`~hermes_repo.engine.create_store_engine`,
not :meth:`StateStore.open`: an open store registers as a holder (a restore must not
count itself) and may start a guarded FTS rebuild, which a copy must never trigger.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .manifest import (
    AUTO_KEEP,
    AUTO_MAX_BYTES,
    DEFAULT_KEEP,
    SNAPSHOT_DIR,
    Origin,
    Snapshot,
    SnapshotBusyError,
    SnapshotError,
    SnapshotNotFoundError,
    SnapshotSchemaError,
    SnapshotSpaceError,
    SnapshotStoreHeldError,
    SnapshotVerifyError,
    list_snapshots,
    snapshots_dir,
)

if TYPE_CHECKING:
    from .create import create_snapshot, snapshot_before
    from .restore import RestoreResult, restore_snapshot

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
    "create_snapshot",
    "list_snapshots",
    "restore_snapshot",
    "snapshot_before",
    "snapshots_dir",
]

#: Taking and restoring a snapshot load the migrations and the ORM models: imported on
#: first use, so that listing snapshots (the doctor) loads neither.
_LAZY = {
    "create_snapshot": ".create",
    "snapshot_before": ".create",
    "RestoreResult": ".restore",
    "restore_snapshot": ".restore",
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value
