"""Deprecated home of the file upgrade: it is :mod:`hermes_repo.maintenance.upgrade`.

``StateStore.open(upgrade=True)`` runs the same upgrade as ``hermes-repo db upgrade``
(a snapshot first), so it sits below the store; this alias keeps the old import path
working for one release.
"""

from __future__ import annotations

from ..maintenance.upgrade import (
    FileRevision,
    RestorePoint,
    SchemaRevision,
    UpgradeResult,
    check_schema,
    describe_revision,
    read_revision,
    refuse_unless_ours,
    restore_point,
    schema_engine,
    upgrade,
)

__all__ = [
    "FileRevision",
    "RestorePoint",
    "SchemaRevision",
    "UpgradeResult",
    "check_schema",
    "describe_revision",
    "read_revision",
    "refuse_unless_ours",
    "restore_point",
    "schema_engine",
    "upgrade",
]
