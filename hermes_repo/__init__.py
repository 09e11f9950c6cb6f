"""hermes_repo: a durable SQLite store for an AI agent's sessions and messages.

The public contract::

    from hermes_repo import StateStore
    with StateStore.open() as store:            # $HERMES_HOME/hermes-repo/state.db
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli")
            uow.messages.append(sid, {"role": "user", "content": "hi"})
            uow.commit()
        store.load_conversation(sid).messages
        store.search("hi")
"""

import importlib
from typing import TYPE_CHECKING, Any

# What a message must be to become a row: for a caller (a framework's door) that checks a
# whole call before writing any of it.
from .codec import check_server_text, message_to_row
from .errors import (
    CommitUnknownError,
    ConfigurationError,
    DatabaseBusyError,
    HermesAgentFileError,
    HermesRepoError,
    ImportSourceError,
    IntegrityViolation,
    InvalidArgumentError,
    NotFoundError,
    NotOnThisBackendError,
    QueryTimeoutError,
    SchemaMismatchError,
    SearchQueryError,
    ServerConfigError,
    SessionTakenError,
    StateDbCorruptError,
    StorageFullError,
    StoreClosedError,
    StoreFileReplacedError,
    UidConflictError,
    UnsafePathError,
    WriteFailedError,
)
from .hermes_import import HermesImportReport
from .holders import StoreHeldError
from .ids import validate_session_id
from .repositories import EntryRepository, MessageRepository, SearchHit, SessionRepository
from .repositories.search_paging import (
    MAX_SEARCH_LIMIT,
    SearchCursorError,
    SearchLimitError,
    SearchPage,
)
from .store import Conversation, StateStore, StoreHealth
from .transcript.reconcile import ReconcileConflict
from .transcript.replay import ReplayReport
from .transcript.writer import FlushResult, Rejection, TranscriptWriter
from .transfer import ImportReport, JsonlImportError, SessionInfo
from .uow import UnitOfWork
from .walcheck import WalSaveError

if TYPE_CHECKING:
    from .ops.doctor import DoctorReadError, JournalFileError
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
    from .salvage import RecoveryError, SalvageError
    from .salvage.pagescan import PageError
    from .schema.backup import BackupSpaceError
    from .transfer.copy import CopyConflictError, CopyError, CopyVerificationError

# The operator tools' errors are exported by name but imported on first use: a program
# that only appends and searches does not pay for loading the doctor, the repair, the
# snapshots and the salvage at `import hermes_repo`.
_LAZY_ERRORS = {
    "BackupSpaceError": ".schema.backup",
    "CopyConflictError": ".transfer.copy",
    "CopyError": ".transfer.copy",
    "CopyVerificationError": ".transfer.copy",
    "DoctorReadError": ".ops.doctor",
    "JournalFileError": ".ops.doctor",
    "PageError": ".salvage.pagescan",
    "RecoveryError": ".salvage",
    "SalvageError": ".salvage",
    "RepairError": ".ops.repair",
    "RepairStoreHeldError": ".ops.repair",
    "ReplaceError": ".ops.replace",
    "SnapshotBusyError": ".ops.snapshots",
    "SnapshotError": ".ops.snapshots",
    "SnapshotNotFoundError": ".ops.snapshots",
    "SnapshotSchemaError": ".ops.snapshots",
    "SnapshotSpaceError": ".ops.snapshots",
    "SnapshotStoreHeldError": ".ops.snapshots",
    "SnapshotVerifyError": ".ops.snapshots",
}


def __getattr__(name: str) -> Any:
    module = _LAZY_ERRORS.get(name)
    if module is None:
        raise AttributeError(f"module 'hermes_repo' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


# The name the spool replay's report had before "replay" and "recover" were told apart.
RecoveryReport = ReplayReport

__all__ = [
    "MAX_SEARCH_LIMIT",
    "BackupSpaceError",
    "CommitUnknownError",
    "ConfigurationError",
    "Conversation",
    "CopyConflictError",
    "CopyError",
    "CopyVerificationError",
    "DatabaseBusyError",
    "DoctorReadError",
    "EntryRepository",
    "FlushResult",
    "HermesAgentFileError",
    "HermesImportReport",
    "HermesRepoError",
    "ImportReport",
    "ImportSourceError",
    "IntegrityViolation",
    "InvalidArgumentError",
    "JournalFileError",
    "JsonlImportError",
    "MessageRepository",
    "NotFoundError",
    "NotOnThisBackendError",
    "PageError",
    "QueryTimeoutError",
    "ReconcileConflict",
    "RecoveryError",
    "RecoveryReport",
    "Rejection",
    "RepairError",
    "RepairStoreHeldError",
    "ReplaceError",
    "ReplayReport",
    "SalvageError",
    "SchemaMismatchError",
    "SearchCursorError",
    "SearchHit",
    "SearchLimitError",
    "SearchPage",
    "SearchQueryError",
    "ServerConfigError",
    "SessionInfo",
    "SessionRepository",
    "SessionTakenError",
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
    "StoreFileReplacedError",
    "StoreHealth",
    "StoreHeldError",
    "TranscriptWriter",
    "UidConflictError",
    "UnitOfWork",
    "UnsafePathError",
    "WalSaveError",
    "WriteFailedError",
    "check_server_text",
    "message_to_row",
    "validate_session_id",
]

__version__ = "0.1.0"
