"""``diagnose(home)``: what is wrong with a store, and the exact command that fixes it.

The doctor only reads. It never goes through :meth:`StateStore.open` (an open may run
the guarded FTS rebuild, which writes); it opens its own connection with the store's
driver in ``mode=ro`` and does every read in one read transaction that it rolls back,
so the database file is never written, whether another process holds the store or not
and whatever state the file is in. (To read a WAL database SQLite needs its ``-shm``
and ``-wal`` companions: if they are missing it creates them empty, as any reader does.)

The report is built by *checks*. Each check is a function that reads what it needs
through a :class:`DoctorContext` and returns a :class:`CheckResult`: a section of facts
(for people and for ``--json``) and the :class:`Finding` s it draws from them, each
with the command that fixes it. :data:`CHECKS` lists them in report order: the file
header (NOTADB), the store's facts, a read-only ``quick_check`` of the canonical tables
(which tells a damaged file, for ``sessions salvage``, from a damaged index, for
``sessions repair``), the full-text indexes, this process's quarantine, spool and
hold files, snapshots, an unfinished ``db copy`` into the store, and the other
processes holding the store. A new concern is one more function appended there, in a
module of its own concern (``journal``, ``header``, ``store``, ``schema``, ``sqlite``,
``quick_check``, ``search_index``, ``values``, ``quarantine``, ``spool``, ``snapshots``,
``copying``, ``holders``); :mod:`.report` runs them. A check that fails to read is
reported as a finding of its own, never as a crash of the doctor.

How the full-text indexes are checked read-only: :mod:`.search_index`.
"""

from __future__ import annotations

from typing import Any

from ...deprecation import moved_names
from ...schema.tables import CANONICAL_TABLES
from .context import (
    STOP_FIRST,
    Check,
    CheckResult,
    DoctorContext,
    DoctorReadError,
    Finding,
    JournalFileError,
    Section,
    Severity,
)
from .copying import CopyFacts, check_copy
from .fixes import recovered_path, replace_command, salvage_commands
from .header import HeaderFacts, check_header
from .holders import HolderFacts, check_holders
from .journal import WalHeaderFacts, check_journal, check_wal_header
from .quarantine import QuarantineFacts, check_quarantine
from .quick_check import QuickCheckFacts, check_quick_check
from .report import CHECKS, DoctorReport, diagnose
from .schema import SchemaFacts, check_schema
from .search_index import FtsIndexStatus, FtsStatus, check_fts, check_fts_coverage
from .server import SERVER_CHECKS, diagnose_server
from .server_context import ServerContext
from .snapshots import SnapshotFacts, check_snapshots
from .spool import SpoolFacts, check_spool
from .store import StoreFacts, check_store
from .values import ValueFacts, check_server_values, check_values

__all__ = [
    "CANONICAL_TABLES",
    "CHECKS",
    "SERVER_CHECKS",
    "STOP_FIRST",
    "Check",
    "CheckResult",
    "CopyFacts",
    "DoctorContext",
    "DoctorReadError",
    "DoctorReport",
    "Finding",
    "FtsIndexStatus",
    "FtsStatus",
    "HeaderFacts",
    "HolderFacts",
    "JournalFileError",
    "QuarantineFacts",
    "QuickCheckFacts",
    "SchemaFacts",
    "Section",
    "ServerContext",
    "Severity",
    "SnapshotFacts",
    "SpoolFacts",
    "StoreFacts",
    "ValueFacts",
    "WalHeaderFacts",
    "check_copy",
    "check_fts",
    "check_fts_coverage",
    "check_header",
    "check_holders",
    "check_journal",
    "check_quarantine",
    "check_quick_check",
    "check_schema",
    "check_server_values",
    "check_snapshots",
    "check_spool",
    "check_store",
    "check_values",
    "check_wal_header",
    "diagnose",
    "diagnose_server",
    "recovered_path",
    "replace_command",
    "salvage_commands",
]

#: Names kept for one release from before "salvage" and "recover" were told apart.
_moved = moved_names(
    "hermes_repo.ops.doctor", {"recover_commands": "hermes_repo.ops.doctor.fixes:salvage_commands"}
)


def __getattr__(name: str) -> Any:
    return _moved(name)
