"""Salvage of a damaged store: what is readable (``inspect``), and a fresh copy (``salvage``).

What ``hermes-repo sessions salvage`` runs. The source is never opened for writing, not
even by SQLite: both functions first make byte copies of ``state.db`` and its ``-wal``
(and a hot ``-journal``) in a private folder (0700) and read only the copy
(:mod:`.copy`). No ``-shm`` or ``-journal`` is ever created beside the source.

Two ways of reading the copy, combined per canonical table (``sessions``, ``messages``,
``state_meta``) and per LangGraph checkpoint table (``langgraph_checkpoints``,
``langgraph_blobs``, ``langgraph_writes``, when the source has them) by :mod:`.reader`:

1. **SQL path** (:mod:`.sqlreader`): a read-only connection scans the table by rowid,
   resumes past damaged pages and reads the skipped rowids one by one where it can.
2. **Page scanner** (:mod:`.pagescan`), when SQL cannot open the file, could not read
   part of a table, or read fewer rows than the source's own count claims. Rows from
   leaves that no readable b-tree reaches go to their table by shape (:mod:`.shapes`).

Rows found by both paths are de-duplicated on the primary key (SQL wins, then the
b-tree, then orphan pages). Rows that fit no salvaged table are counted and reported,
never dropped in silence. Checkpoint rows are de-duplicated on their natural keys and
written as read: one on a damaged page is counted missing (the table's ``claimed``
against ``recoverable``), never rebuilt. ``salvage`` writes the result into a store
built by the migrations (:mod:`.writer`): messages keep their ids (the FTS rowid) and
uids; messages (or checkpoint rows) whose session row was lost get a placeholder
session (``source='recovered'``); session counters are recomputed from the salvaged
active messages; both FTS indexes are rebuilt. The store gets its name only once it is
verified (:mod:`.output`).

SQLite's own ``.recover`` is not used: it needs ``sqlite_dbpage``, which the Debian
build lacks.
"""

from __future__ import annotations

from typing import Any

from ..deprecation import moved_names
from .copy import SCRATCH_PREFIX, remove_stale
from .output import PARTIAL_SUFFIX
from .report import (
    ProgressCallback,
    ProgressEvent,
    SalvageError,
    SalvageInspection,
    SalvageResult,
    TableReport,
)
from .run import ScanMode, inspect, salvage
from .writer import RECOVERED_SOURCE

__all__ = [
    "PARTIAL_SUFFIX",
    "RECOVERED_SOURCE",
    "SCRATCH_PREFIX",
    "ProgressCallback",
    "ProgressEvent",
    "SalvageError",
    "SalvageInspection",
    "SalvageResult",
    "ScanMode",
    "TableReport",
    "inspect",
    "remove_stale",
    "salvage",
]

#: Names this package had before "salvage" and "replay" were told apart (warn on use).
_moved = moved_names("hermes_repo.salvage", {"RecoveryError": "hermes_repo.errors:SalvageError"})


def __getattr__(name: str) -> Any:
    return _moved(name)
