"""Deprecated module: its functions live in :mod:`.integrity` (checking the indexes and
recreating them in a transaction). "Rebuild" names one thing, the guarded rebuild of
:mod:`hermes_repo.maintenance.fts_rebuild`; this name is kept for one release and
warns on use."""

from __future__ import annotations

from typing import Any

from ...deprecation import moved_names

_moved = moved_names(
    "hermes_repo.schema.fts.rebuild",
    {
        name: f"hermes_repo.schema.fts.integrity:{name}"
        for name in ("integrity_errors", "recreate", "reset_shadow_tables")
    },
)


def __getattr__(name: str) -> Any:
    return _moved(name)
