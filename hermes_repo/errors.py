"""One exception hierarchy for the store: every error class, and :class:`ErrorKind`.

Every error that leaves the public API is a :class:`HermesRepoError`. Driver errors are
classified into an :class:`ErrorKind` and translated into this hierarchy once, at the
boundary (the unit of work and the store), by :mod:`hermes_repo.driver_errors`, with
``raise ... from`` so the SQLite code and message stay reachable through ``__cause__``.
"""

from __future__ import annotations

import enum
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .transfer.jsonl_import import ImportReport

__all__ = [
    "BackupSpaceError",
    "CommitUnknownError",
    "ConfigurationError",
    "CopyConflictError",
    "CopyError",
    "CopyVerificationError",
    "DatabaseBusyError",
    "DoctorReadError",
    "ErrorKind",
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
]


class HermesRepoError(Exception):
    """Base class of every error raised by hermes_repo."""


class ConfigurationError(HermesRepoError):
    """The store cannot be opened as configured (bad path, unusable SQLite build...)."""


class InvalidArgumentError(HermesRepoError, ValueError):
    """An argument of a public call has a type or value the call cannot take; the message
    names the argument, what was passed and what is accepted. Nothing was done."""


class UnsafePathError(ConfigurationError):
    """A path the store would write through is unsafe (a symlink, or escapes the store folder)."""


class NotOnThisBackendError(ConfigurationError):
    """An operation on a store file (snapshot, salvage, file replace, FTS5 rebuild) was
    asked of a PostgreSQL store; nothing was done. The message names the server's tool
    for the job (``pg_dump``, ``pg_restore``, ``REINDEX``)."""


class SchemaMismatchError(HermesRepoError):
    """The database schema revision does not match the code; the message names the command."""


class HermesAgentFileError(SchemaMismatchError):
    """The store path holds Hermes Agent's own ``state.db``: it is never opened as a
    hermes_repo store (nor written beside); the message names ``hermes-repo import``."""


class StoreClosedError(HermesRepoError):
    """The store was closed; open a new one."""


class NotFoundError(HermesRepoError):
    """A session or message that the call refers to does not exist."""


class IntegrityViolation(HermesRepoError):
    """A constraint refused the write (duplicate uid, bad role...): the input is at fault."""


class UidConflictError(IntegrityViolation):
    """A message's uid is already stored in its session for a *different* message:
    nothing was written. A uid names one message; the same message with the same uid is
    stored once and its row id returned, never refused."""


class SessionTakenError(IntegrityViolation):
    """The session an id maps to belongs to someone else (a session of another source,
    or another conversation of a framework's door): nothing is read from it or written
    to it."""


class ImportSourceError(HermesRepoError):
    """A file handed to an import is not what it must be (not SQLite, truncated, not a
    Hermes Agent store): refused before anything is written."""


class SearchQueryError(HermesRepoError):
    """A search could not be run (never raised for hostile query text, which is always escaped)."""


class WriteFailedError(HermesRepoError):
    """A write could not be completed; ``kind`` says why (see :class:`ErrorKind`)."""

    def __init__(self, message: str, kind: ErrorKind) -> None:
        super().__init__(message)
        self.kind = kind


class DatabaseBusyError(WriteFailedError):
    """The database was locked (or read-only) when the write was tried; or, for its
    subclasses, the store or its snapshot folder was busy with another process's work
    (:class:`StoreHeldError`, :class:`SnapshotBusyError`). Waiting, then trying again,
    is the fix for every one of them.

    ``elapsed_s`` is set when the error ends a retry loop: the write was replayed for
    that many seconds (the whole budget) without success, so callers must not retry it
    again in an outer loop.
    """

    def __init__(self, message: str, *, elapsed_s: float | None = None) -> None:
        super().__init__(message, ErrorKind.TRANSIENT)
        self.elapsed_s = elapsed_s


class CommitUnknownError(DatabaseBusyError):
    """The connection was lost while the server committed (the COMMIT was sent, its
    reply never came), and whether it landed could not be established within the
    budget. Nothing was run twice; every row the unit wrote carries its identity (uid,
    session id), so writing it again with the same identities stores it at most once."""


class StorageFullError(WriteFailedError):
    """The disk (or the database's page limit) is full, or the OS reported an I/O error.

    Also the parent of the operations' own "no room" errors (:class:`BackupSpaceError`,
    :class:`SnapshotSpaceError`): one ``except StorageFullError`` catches every one.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorKind.DISK)


class QueryTimeoutError(WriteFailedError):
    """A statement ran past its ``statement_timeout`` and the server cancelled it: not
    retried (the same unit would take as long again)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorKind.TIMEOUT)


class ServerConfigError(WriteFailedError, ConfigurationError):
    """The PostgreSQL server refused the store for a reason waiting cannot fix: the
    database, role, schema or host does not exist, the password is wrong, the port is
    not a port. Never retried: raised at once by an open, and a transcript flush that
    meets it spools at once (the message names the cause and the fix)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorKind.CONFIG)


class StateDbCorruptError(WriteFailedError):
    """The database file itself is damaged; the store is quarantined for this process."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorKind.CORRUPT)


class StoreFileReplacedError(WriteFailedError):
    """The store's database file or its ``-wal`` was removed, renamed or replaced while
    the store was open: the write that met it is not acknowledged, and the store takes
    no further writes (reads go on). The message names what happened and the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message, ErrorKind.REPLACED)


# -- the errors of the store's operations -------------------------------------------
# Defined here with the rest, so one module holds the whole hierarchy; the modules that
# raise them re-export them under their old names.


def _holders_text(pids: tuple[int, ...]) -> str:
    if not pids:
        return "another process has"
    listed = ", ".join(str(p) for p in pids)
    if len(pids) == 1:
        return f"another process (pid {listed}) has"
    return f"other processes (pids {listed}) have"


class StoreHeldError(DatabaseBusyError, RuntimeError):
    """Another process has the store open; ``pids`` names it where the OS tells.

    A :class:`DatabaseBusyError` (the store is busy with another process; its ``kind``
    is transient), and still a ``RuntimeError`` too, so callers written against its
    first version keep catching it. ``elapsed_s`` stays None: an open that waited for
    an exclusive holder raises its own :class:`DatabaseBusyError` naming the wait.
    """

    def __init__(self, message: str, pids: tuple[int, ...] = ()) -> None:
        super().__init__(message)
        self.pids = pids

    @classmethod
    def naming(cls, pids: tuple[int, ...]) -> StoreHeldError:
        """The error for a store held by ``pids`` (empty: not known)."""
        return cls(
            f"{_holders_text(pids)} the store open; stop it (e.g. the gateway) and retry", pids
        )

    @property
    def holders_text(self) -> str:
        """Who holds the store, as words that complete "... the store open"."""
        return _holders_text(self.pids)


class BackupSpaceError(StorageFullError):
    """Not enough free space beside the store for a backup; nothing was written."""


class WalSaveError(HermesRepoError):
    """A ``-wal`` with a damaged header could not be saved; the store was not opened."""


class SalvageError(HermesRepoError):
    """The salvage could not run as asked (bad paths, no room, output exists...)."""


class PageError(HermesRepoError):
    """A page, cell or record could not be decoded (damaged bytes).

    Raised and caught inside the salvage; a caller of the scanner sees it only when it
    decodes pages itself.
    """


class DoctorReadError(HermesRepoError):
    """The store could not be read for a check (the message carries SQLite's error).

    :func:`~hermes_repo.ops.doctor.diagnose` never lets it out: it becomes the
    ``<check>-unreadable`` finding, whose fix is the salvage's first step. Only a check
    called on its own raises it.
    """


class JournalFileError(DoctorReadError):
    """A symlink or non-regular file sits at ``-wal``/``-shm``/``-journal``.

    :func:`check_journal` reports it; the checks that would read through SQLite skip.
    """


class SnapshotError(HermesRepoError):
    """A snapshot could not be made, listed or restored; the message names the fix."""


class SnapshotNotFoundError(SnapshotError):
    """No snapshot (with a manifest) has the requested id."""


class SnapshotSpaceError(SnapshotError, StorageFullError):
    """Not enough free space for the copy; nothing was written."""


class SnapshotVerifyError(SnapshotError):
    """A copy or a stored snapshot failed its sha256, ``integrity_check`` or revision read."""


class SnapshotSchemaError(SnapshotError, SchemaMismatchError):
    """The snapshot's schema revision is not this code's head."""


class SnapshotStoreHeldError(SnapshotError, StoreHeldError):
    """Another process has the store open, so it cannot be replaced."""


class SnapshotBusyError(SnapshotError, DatabaseBusyError):
    """Another snapshot operation on the same folder is running."""


class ReplaceError(HermesRepoError):
    """The new file was not installed; the message says why and what to do."""


class RepairError(HermesRepoError):
    """The repair could not start; nothing was written. The message names the fix."""


class RepairStoreHeldError(RepairError, StoreHeldError):
    """Another process has the store open: the repair is refused, nothing was written."""


class ReconcileConflict(HermesRepoError):
    """The rows changed under a write that held the write lock: nothing was written."""


class SearchLimitError(SearchQueryError, ValueError):
    """A search asked for more hits than :data:`MAX_SEARCH_LIMIT` in one call."""


class SearchCursorError(SearchQueryError, ValueError):
    """A page cursor that is not one returned by this search (other query or filters,
    edited, or truncated)."""


class CopyError(HermesRepoError):
    """A store copy could not be completed; the message names the cause and the fix."""


class CopyConflictError(CopyError):
    """The target holds rows of another store under the ids being copied."""


class CopyVerificationError(CopyError):
    """After a copy the two stores' counts or checksums differ."""


class JsonlImportError(HermesRepoError):
    """A line of a JSON Lines import could not be imported; the import stopped there.

    The message is ``FILE:LINE: <cause>; <fix>``. The sessions before the line stay
    imported (``report`` counts them) and the session the line belongs to was not
    imported at all, so running the same import again after fixing the line finishes it.
    """

    def __init__(self, path: str, line: int, cause: str, fix: str, report: ImportReport) -> None:
        self.path = path
        self.line = line
        self.cause = cause
        self.report = report
        super().__init__(f"{path}:{line}: {cause}; {fix}")


class ErrorKind(enum.Enum):
    """What a SQLite error means for the caller, decided by extended result code."""

    TRANSIENT = "transient"  # BUSY, LOCKED, READONLY (not DBMOVED): retrying the unit may succeed
    FTS = "fts"  # the derived full-text index is damaged; canonical rows are fine
    CORRUPT = "corrupt"  # the canonical b-trees, schema or header are damaged
    DISK = "disk"  # FULL or IOERR: SQLite rolled the transaction back
    CONSTRAINT = "constraint"  # the input violates a constraint
    TIMEOUT = "timeout"  # PostgreSQL's statement_timeout cancelled the statement
    # The database file or its -wal was removed, renamed or replaced under the open store:
    # not retried (the path no longer names the store's file), spooled, never salvage.
    REPLACED = "replaced"
    CONFIG = "config"  # the server refused the store as configured (unknown database...)
    OTHER = "other"


# The classification and translation of driver errors lived here until they moved to
# hermes_repo.driver_errors; their old names still resolve here (on use, so this module
# loads nothing more) for one release. Type checkers do not see them: import them from
# their new home.
_MOVED = frozenset(
    {
        "classify",
        "commit_outcome_unknown",
        "describe",
        "is_server_error",
        "pg_refusal",
        "pg_sqlstate",
        "sqlite_code",
        "transient_cause",
        "transient_fix",
        "translate",
        "SQLITE_BUSY",
        "SQLITE_BUSY_SNAPSHOT",
        "SQLITE_LOCKED",
        "SQLITE_READONLY",
        "SQLITE_READONLY_DBMOVED",
        "SQLITE_IOERR",
        "SQLITE_CORRUPT",
        "SQLITE_FULL",
        "SQLITE_CONSTRAINT",
        "SQLITE_NOTADB",
        "SQLITE_CORRUPT_VTAB",
    }
)

if not TYPE_CHECKING:

    def __getattr__(name: str) -> Any:
        if name in _MOVED:
            return getattr(importlib.import_module(".driver_errors", __package__), name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
