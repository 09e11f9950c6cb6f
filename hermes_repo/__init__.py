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
    DatabaseBusyError,
    HermesRepoError,
    ImportSourceError,
    IntegrityViolation,
    NotFoundError,
    SchemaMismatchError,
    StateDbCorruptError,
    StorageFullError,
    StoreClosedError,
    UnsafePathError,
    WriteFailedError,
)
from .hermes_import import HermesImportReport
from .repositories import SearchHit
from .store import Conversation, StateStore, StoreHealth
from .transcript.replay import ReplayReport
from .transcript.writer import FlushResult, Rejection, TranscriptWriter
from .transfer import ImportReport, JsonlImportError, SessionInfo
from .uow import UnitOfWork

# The name the spool replay's report had before "replay" and "recover" were told apart.
RecoveryReport = ReplayReport

__all__ = [
    "Conversation",
    "DatabaseBusyError",
    "FlushResult",
    "HermesImportReport",
    "HermesRepoError",
    "ImportReport",
    "ImportSourceError",
    "IntegrityViolation",
    "JsonlImportError",
    "NotFoundError",
    "RecoveryReport",
    "Rejection",
    "ReplayReport",
    "SchemaMismatchError",
    "SearchHit",
    "SessionInfo",
    "StateDbCorruptError",
    "StateStore",
    "StorageFullError",
    "StoreClosedError",
    "StoreHealth",
    "TranscriptWriter",
    "UnitOfWork",
    "UnsafePathError",
    "WriteFailedError",
]

__version__ = "0.1.0"
