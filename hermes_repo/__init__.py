"""hermes_repo: a durable SQLite store for an AI agent's sessions and messages.

The public contract::

    from hermes_repo import StateStore
    with StateStore.open() as store:            # $HERMES_HOME/state.db, else ~/.hermes
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli")
            uow.messages.append(sid, {"role": "user", "content": "hi"})
            uow.commit()
        store.load_conversation(sid).messages
        store.search("hi")
"""

from .errors import (
    ConfigurationError,
    DatabaseBusyError,
    HermesRepoError,
    ImportSourceError,
    IntegrityViolation,
    NotFoundError,
    SchemaMismatchError,
    SearchQueryError,
    StateDbCorruptError,
    StorageFullError,
    StoreClosedError,
    UnsafePathError,
    WriteFailedError,
)
from .hermes_import import HermesImportReport
from .holders import StoreHeldError
from .ops.doctor import DoctorReadError, JournalFileError
from .ops.recover import RecoveryError
from .ops.repair import RepairError, RepairStoreHeldError
from .ops.replace import ReplaceError
from .ops.snapshots import (
    SnapshotBusyError,
    SnapshotError,
    SnapshotNotFoundError,
    SnapshotSchemaError,
    SnapshotSpaceError,
    SnapshotStoreHeldError,
    SnapshotVerifyError,
)
from .repositories import SearchHit
from .schema.backup import BackupSpaceError
from .store import Conversation, StateStore, StoreHealth
from .transcript.reconcile import ReconcileConflict
from .transcript.replay import ReplayReport
from .transcript.writer import FlushResult, Rejection, TranscriptWriter
from .transfer import ImportReport, JsonlImportError, SessionInfo
from .uow import UnitOfWork
from .walcheck import WalSaveError

# The name the spool replay's report had before "replay" and "recover" were told apart.
RecoveryReport = ReplayReport

__all__ = [
    "BackupSpaceError",
    "ConfigurationError",
    "Conversation",
    "DatabaseBusyError",
    "DoctorReadError",
    "FlushResult",
    "HermesImportReport",
    "HermesRepoError",
    "ImportReport",
    "ImportSourceError",
    "IntegrityViolation",
    "JournalFileError",
    "JsonlImportError",
    "NotFoundError",
    "ReconcileConflict",
    "RecoveryError",
    "RecoveryReport",
    "Rejection",
    "RepairError",
    "RepairStoreHeldError",
    "ReplaceError",
    "ReplayReport",
    "SchemaMismatchError",
    "SearchHit",
    "SearchQueryError",
    "SessionInfo",
    "SnapshotBusyError",
    "SnapshotError",
    "SnapshotNotFoundError",
    "SnapshotSchemaError",
    "SnapshotSpaceError",
    "SnapshotStoreHeldError",
    "SnapshotVerifyError",
    "StateDbCorruptError",
    "StateStore",
    "StorageFullError",
    "StoreClosedError",
    "StoreHealth",
    "StoreHeldError",
    "TranscriptWriter",
    "UnitOfWork",
    "UnsafePathError",
    "WalSaveError",
    "WriteFailedError",
]

__version__ = "0.1.0"
