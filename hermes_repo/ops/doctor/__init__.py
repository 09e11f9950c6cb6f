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

import importlib
from typing import TYPE_CHECKING, Any

from ...deprecation import moved_names

if TYPE_CHECKING:
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
    from .durability import DurabilityFacts, check_durability
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
    "DurabilityFacts",
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
    "check_durability",
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

#: Where each public name lives: imported on first use, so that loading one check
#: (or ``diagnose`` on a file) does not load the others' dependencies (the server
#: checks, the ORM, Alembic).
_WHERE: dict[str, str] = {
    "CANONICAL_TABLES": "...schema.tables",
    "STOP_FIRST": ".context",
    "Check": ".context",
    "CheckResult": ".context",
    "DoctorContext": ".context",
    "DoctorReadError": ".context",
    "Finding": ".context",
    "JournalFileError": ".context",
    "Section": ".context",
    "Severity": ".context",
    "CopyFacts": ".copying",
    "DurabilityFacts": ".durability",
    "check_durability": ".durability",
    "check_copy": ".copying",
    "recovered_path": ".fixes",
    "replace_command": ".fixes",
    "salvage_commands": ".fixes",
    "HeaderFacts": ".header",
    "check_header": ".header",
    "HolderFacts": ".holders",
    "check_holders": ".holders",
    "WalHeaderFacts": ".journal",
    "check_journal": ".journal",
    "check_wal_header": ".journal",
    "QuarantineFacts": ".quarantine",
    "check_quarantine": ".quarantine",
    "QuickCheckFacts": ".quick_check",
    "check_quick_check": ".quick_check",
    "CHECKS": ".report",
    "DoctorReport": ".report",
    "diagnose": ".report",
    "SchemaFacts": ".schema",
    "check_schema": ".schema",
    "FtsIndexStatus": ".search_index",
    "FtsStatus": ".search_index",
    "check_fts": ".search_index",
    "check_fts_coverage": ".search_index",
    "SERVER_CHECKS": ".server",
    "diagnose_server": ".server",
    "ServerContext": ".server_context",
    "SnapshotFacts": ".snapshots",
    "check_snapshots": ".snapshots",
    "SpoolFacts": ".spool",
    "check_spool": ".spool",
    "StoreFacts": ".store",
    "check_store": ".store",
    "ValueFacts": ".values",
    "check_server_values": ".values",
    "check_values": ".values",
}

#: Names kept for one release from before "salvage" and "recover" were told apart.
_moved = moved_names(
    "hermes_repo.ops.doctor", {"recover_commands": "hermes_repo.ops.doctor.fixes:salvage_commands"}
)


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        return _moved(name)
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value
    return value
