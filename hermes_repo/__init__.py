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

from typing import TYPE_CHECKING

from .deprecation import moved_names
from .lazy import lazy_names

if TYPE_CHECKING:
    # What a message must be to become a row: for a caller (a framework's door) that
    # checks a whole call before writing any of it.
    from .backend import Backend
    from .codec import check_server_text, message_to_row
    from .errors import (
        BackupSpaceError,
        CommitUnknownError,
        ConfigurationError,
        CopyConflictError,
        CopyError,
        CopyVerificationError,
        DatabaseBusyError,
        DoctorReadError,
        HermesAgentFileError,
        HermesRepoError,
        ImportSourceError,
        IntegrityViolation,
        InvalidArgumentError,
        JournalFileError,
        JsonlImportError,
        NotFoundError,
        NotOnThisBackendError,
        PageError,
        QueryTimeoutError,
        ReconcileConflict,
        RepairError,
        RepairStoreHeldError,
        ReplaceError,
        SalvageError,
        SchemaMismatchError,
        SearchCursorError,
        SearchLimitError,
        SearchQueryError,
        ServerConfigError,
        SessionTakenError,
        SnapshotBusyError,
        SnapshotError,
        SnapshotNotFoundError,
        SnapshotSchemaError,
        SnapshotSpaceError,
        SnapshotStoreHeldError,
        SnapshotVerifyError,
        StateDbCorruptError,
        StorageFullError,
        StoreClosedError,
        StoreFileReplacedError,
        StoreHeldError,
        UidConflictError,
        UnsafePathError,
        WalSaveError,
        WriteFailedError,
    )
    from .hermes_import import HermesImportReport
    from .ids import validate_session_id
    from .repositories import EntryRepository, MessageRepository, SearchHit, SessionRepository
    from .repositories.search.paging import MAX_SEARCH_LIMIT, SearchPage
    from .store import Conversation, StateStore, StoreHealth
    from .transcript.replay import ReplayReport
    from .transcript.writer import FlushResult, Rejection, TranscriptWriter
    from .transfer import ImportReport, SessionInfo
    from .uow import UnitOfWork

    # Deprecated names, kept for one release (they warn on use; see .deprecation):
    # the spool replay's report and the salvage's error before "replay", "salvage"
    # and "recover" were told apart.
    RecoveryReport = ReplayReport
    RecoveryError = SalvageError

# Every public name is imported on first use (PEP 562): `import hermes_repo` loads no
# SQLAlchemy, no Alembic and no importer, so the `hermes-repo` command starts in a blink
# (`--help`, `--version`) and a program pays only for what it touches. The package tests
# check that every name here resolves and that the heavy modules stay out.
_LAZY: dict[str, str] = {
    "check_server_text": ".codec",
    "message_to_row": ".codec",
    "HermesImportReport": ".hermes_import",
    "validate_session_id": ".ids",
    "EntryRepository": ".repositories",
    "MessageRepository": ".repositories",
    "SearchHit": ".repositories",
    "SessionRepository": ".repositories",
    "MAX_SEARCH_LIMIT": ".repositories.search.paging",
    "SearchPage": ".repositories.search.paging",
    "Backend": ".backend",
    "Conversation": ".store",
    "StateStore": ".store",
    "StoreHealth": ".store",
    "ReplayReport": ".transcript.replay",
    "FlushResult": ".transcript.writer",
    "Rejection": ".transcript.writer",
    "TranscriptWriter": ".transcript.writer",
    "ImportReport": ".transfer",
    "SessionInfo": ".transfer",
    "UnitOfWork": ".uow",
}
_LAZY.update(
    dict.fromkeys(
        (
            "BackupSpaceError",
            "CommitUnknownError",
            "ConfigurationError",
            "CopyConflictError",
            "CopyError",
            "CopyVerificationError",
            "DatabaseBusyError",
            "DoctorReadError",
            "HermesAgentFileError",
            "HermesRepoError",
            "ImportSourceError",
            "IntegrityViolation",
            "InvalidArgumentError",
            "JournalFileError",
            "JsonlImportError",
            "NotFoundError",
            "NotOnThisBackendError",
            "PageError",
            "QueryTimeoutError",
            "ReconcileConflict",
            "RepairError",
            "RepairStoreHeldError",
            "ReplaceError",
            "SalvageError",
            "SchemaMismatchError",
            "SearchCursorError",
            "SearchLimitError",
            "SearchQueryError",
            "ServerConfigError",
            "SessionTakenError",
            "SnapshotBusyError",
            "SnapshotError",
            "SnapshotNotFoundError",
            "SnapshotSchemaError",
            "SnapshotSpaceError",
            "SnapshotStoreHeldError",
            "SnapshotVerifyError",
            "StateDbCorruptError",
            "StorageFullError",
            "StoreClosedError",
            "StoreFileReplacedError",
            "StoreHeldError",
            "UidConflictError",
            "UnsafePathError",
            "WalSaveError",
            "WriteFailedError",
        ),
        ".errors",
    )
)


# Names kept for one release under the word they used to share (see .deprecation).
_DEPRECATED = moved_names(
    "hermes_repo",
    {
        "RecoveryReport": "hermes_repo.transcript.replay:ReplayReport",
        "RecoveryError": "hermes_repo.errors:SalvageError",
    },
)

if not TYPE_CHECKING:
    # Hidden from type checkers, which see the imports above: a misspelt name stays an
    # error for a user's mypy instead of becoming Any. An old name warns on every use
    # (never cached), then gives the new object.
    __getattr__ = lazy_names(__name__, globals(), _LAZY, missing=_DEPRECATED)


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "MAX_SEARCH_LIMIT",
    "Backend",
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
