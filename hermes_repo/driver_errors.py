"""Driver errors: what one means (:func:`classify`) and what leaves the API for it
(:func:`translate`).

SQLite errors are classified by extended result code; PostgreSQL errors (psycopg 3) by
SQLSTATE, into the same :class:`~hermes_repo.errors.ErrorKind`, so the write core's
rules (replay the unit, spool, refuse) are written once for both. :func:`translate`
maps a driver error onto the one hierarchy of :mod:`hermes_repo.errors`; the caller
raises the result ``from`` the driver error. :func:`describe` is the error in one line,
:func:`transient_cause` and :func:`transient_fix` the words of a busy store's message.

Neither SQLAlchemy nor a driver is imported here: a driver error is recognised by its
module, so the CLI's ``--help`` and every error class stay cheap to load.
"""

from __future__ import annotations

import errno
import re
import sys
from typing import TYPE_CHECKING, cast

from .errors import (
    DatabaseBusyError,
    ErrorKind,
    HermesRepoError,
    IntegrityViolation,
    QueryTimeoutError,
    ServerConfigError,
    StateDbCorruptError,
    StorageFullError,
    StoreFileReplacedError,
    WriteFailedError,
)

if TYPE_CHECKING:
    from sqlalchemy.exc import DBAPIError

__all__ = [
    "SQLITE_BUSY",
    "SQLITE_BUSY_SNAPSHOT",
    "SQLITE_CONSTRAINT",
    "SQLITE_CORRUPT",
    "SQLITE_CORRUPT_VTAB",
    "SQLITE_FULL",
    "SQLITE_IOERR",
    "SQLITE_LOCKED",
    "SQLITE_NOTADB",
    "SQLITE_READONLY",
    "SQLITE_READONLY_DBMOVED",
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
]

SQLITE_BUSY = 5
SQLITE_BUSY_SNAPSHOT = 517
SQLITE_LOCKED = 6
SQLITE_READONLY = 8
SQLITE_READONLY_DBMOVED = 1032
SQLITE_IOERR = 10
SQLITE_CORRUPT = 11
SQLITE_FULL = 13
SQLITE_CONSTRAINT = 19
SQLITE_NOTADB = 26
SQLITE_CORRUPT_VTAB = 267


def _as_sqlalchemy_error(err: BaseException) -> DBAPIError | None:
    """``err`` if it is SQLAlchemy's wrapper of a driver error, else None.

    Looked up without importing SQLAlchemy: an error can only be SQLAlchemy's if
    SQLAlchemy is loaded, and this module must stay cheap to import (the CLI's
    ``--help`` and every error class load it).
    """
    sa_exc = sys.modules.get("sqlalchemy.exc")
    if sa_exc is not None and isinstance(err, sa_exc.DBAPIError):
        return cast("DBAPIError", err)
    return None


def _dbapi_error(err: BaseException) -> BaseException:
    wrapped = _as_sqlalchemy_error(err)
    if wrapped is not None and wrapped.orig is not None:
        return wrapped.orig
    return err


# PostgreSQL SQLSTATEs. Transient: the same unit may succeed when replayed (a
# serialization failure, a deadlock victim, a lock_timeout, a server shutting down or
# restarting, too many clients; class 08 is every lost or refused connection).
_PG_TRANSIENT = frozenset({"40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300"})
# The server's disk or memory is exhausted: like SQLITE_FULL, the transcript spools.
_PG_RESOURCE = frozenset({"53100", "53200"})
_PG_QUERY_CANCELED = "57014"
# The server refused the store as configured: unknown database (3D000), bad credentials
# or no pg_hba.conf entry (28P01, 28000), unknown schema (3F000). Waiting cannot help.
_PG_CONFIG = frozenset({"3D000", "28P01", "28000", "3F000"})

# A refusal at connect time reaches psycopg as libpq's text, without a SQLSTATE: the
# server's FATAL (in the server's lc_messages; another language than English is not
# recognised here and stays an outage, as before), or libpq's own complaint about the
# connection parameters. Each pattern maps to a cause and its fix.
_DATABASE_FIX = (
    "correct the database name in the URL, or create it (CREATE DATABASE name ENCODING 'UTF8')"
)
_LOGIN_FIX = (
    "check the user name and password in the URL (or PGPASSWORD / ~/.pgpass) and that the "
    "server's pg_hba.conf admits this user from this host"
)
_PORT_FIX = "give the server's port, a number from 1 to 65535, in the URL"
_HOST_FIX = "correct the host name in the URL (the resolver does not know it)"
_SCHEMA_FIX = "create the schema (CREATE SCHEMA name) or correct the schema named in the URL"
_PG_REFUSALS: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r'database "[^"]*" does not exist'), "the database does not exist", _DATABASE_FIX),
    (re.compile(r'role "[^"]*" does not exist'), "the user (role) does not exist", _LOGIN_FIX),
    (
        re.compile(r"password authentication failed|no password supplied|auth\w* failed"),
        "the server refused the password",
        _LOGIN_FIX,
    ),
    (re.compile(r"no pg_hba\.conf entry"), "the server admits no such login", _LOGIN_FIX),
    (re.compile(r"not permitted to log in"), "the user may not log in", _LOGIN_FIX),
    (
        re.compile(r"unsupported startup parameter"),
        "a pooler between the store and the server refuses a startup option",
        "leave hermes_schema / options out of the URL and set the role's search_path "
        "(ALTER ROLE name SET search_path = schema), or list the option in the pooler's "
        "ignore_startup_parameters",
    ),
    (
        re.compile(r'invalid port number|invalid integer value "[^"]*" for [^"]*"port"'),
        "the port in the URL is not a port",
        _PORT_FIX,
    ),
    # A name the resolver does not know (EAI_NONAME) is a typo until someone changes
    # DNS: permanent. A resolver that cannot answer now ("Temporary failure in name
    # resolution", EAI_AGAIN) is an outage like a refused connection: transient.
    (
        re.compile(
            r"(could not translate host name|failed to resolve host).*"
            r"(name or service not known|nodename nor servname|no address associated)"
        ),
        "the host name is unknown",
        _HOST_FIX,
    ),
)
_PG_CONFIG_WORDS = {
    "3D000": ("the database does not exist", _DATABASE_FIX),
    "28P01": ("the server refused the password", _LOGIN_FIX),
    "28000": ("the server refused this login", _LOGIN_FIX),
    "3F000": ("the schema does not exist", _SCHEMA_FIX),
}
_PG_UNREACHABLE = "unreachable (the server refused or dropped the connection)"


def _is_pg_error(orig: BaseException) -> bool:
    # By module, not by class: psycopg is an optional dependency, never imported here.
    return type(orig).__module__.split(".", 1)[0] == "psycopg"


def is_server_error(err: BaseException) -> bool:
    """True for an error of the PostgreSQL driver (raw or SQLAlchemy-wrapped)."""
    return _is_pg_error(_dbapi_error(err))


def pg_sqlstate(err: BaseException) -> str | None:
    """The SQLSTATE of a PostgreSQL error (raw psycopg or SQLAlchemy-wrapped), if any."""
    orig = _dbapi_error(err)
    state = getattr(orig, "sqlstate", None) if _is_pg_error(orig) else None
    return state if isinstance(state, str) else None


def _pg_lost_connection(err: BaseException, orig: BaseException) -> bool:
    """A psycopg error without SQLSTATE raised by the client: no server reached, or
    the connection broke mid-statement (SQLAlchemy marks it invalidated)."""
    wrapped = _as_sqlalchemy_error(err)
    if wrapped is not None and wrapped.connection_invalidated:
        return True
    return any(c.__name__ == "OperationalError" for c in type(orig).__mro__)


def pg_refusal(err: BaseException) -> tuple[str, str] | None:
    """``(cause, fix)`` when the server (or libpq) refused the store as configured: an
    unknown database, role, schema or host, a wrong password, a port that is not one.
    None for anything else (a refused connection, a lost one, a busy server)."""
    orig = _dbapi_error(err)
    if not _is_pg_error(orig):
        return None
    state = pg_sqlstate(orig)
    if state is not None:
        return _PG_CONFIG_WORDS.get(state)
    text = str(orig).lower()
    for pattern, cause, fix in _PG_REFUSALS:
        if pattern.search(text):
            return cause, fix
    return None


def _pg_kind(err: BaseException, orig: BaseException) -> ErrorKind:
    state = pg_sqlstate(orig)
    if state in _PG_CONFIG or (state is None and pg_refusal(orig) is not None):
        return ErrorKind.CONFIG
    if state is None:
        return ErrorKind.TRANSIENT if _pg_lost_connection(err, orig) else ErrorKind.OTHER
    if state in _PG_TRANSIENT or state.startswith("08"):
        return ErrorKind.TRANSIENT
    if state in _PG_RESOURCE:
        return ErrorKind.DISK
    if state == _PG_QUERY_CANCELED:
        return ErrorKind.TIMEOUT
    if state.startswith("23"):
        return ErrorKind.CONSTRAINT
    return ErrorKind.OTHER


# A commit that failed with these may have landed: the server may have committed and
# then lost the connection, or been told to stop, before its reply reached us.
_PG_LOST_AT_COMMIT = frozenset({"57P01", "57P02"})


def commit_outcome_unknown(err: BaseException) -> bool:
    """True when ``err``, raised by a COMMIT, leaves its outcome unknown: on a server, the
    connection was lost (no SQLSTATE, class 08, or the backend was shut down) after the
    COMMIT may have reached it. A SQLite commit is never ambiguous: the file says."""
    orig = _dbapi_error(err)
    if not _is_pg_error(orig):
        return False
    state = pg_sqlstate(orig)
    if state is None:
        return _pg_lost_connection(err, orig)
    return state.startswith("08") or state in _PG_LOST_AT_COMMIT


def sqlite_code(err: BaseException) -> int | None:
    """The extended SQLite result code carried by ``err`` (or its DBAPI original), if any."""
    code = getattr(_dbapi_error(err), "sqlite_errorcode", None)
    return code if isinstance(code, int) else None


def _text_kind(msg: str) -> ErrorKind:
    # Fallback only, for drivers that do not expose codes. Corruption is tested before
    # disk errors because "database disk image is malformed" contains "disk".
    low = msg.lower()
    if "fts5" in low or "messages_fts" in low:
        return ErrorKind.FTS
    if "malformed" in low or "not a database" in low:
        return ErrorKind.CORRUPT
    if "locked" in low or "busy" in low or "readonly" in low or "read-only" in low:
        return ErrorKind.TRANSIENT
    if "disk" in low or "full" in low or "i/o" in low:
        return ErrorKind.DISK
    if "constraint" in low or "unique" in low:
        return ErrorKind.CONSTRAINT
    return ErrorKind.OTHER


# errno values that mean the storage itself refused the write (not the program's fault).
_DISK_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENOSPC", "EDQUOT", "EIO", "EFBIG", "EROFS", "ENXIO")
    if hasattr(errno, name)
)


def classify(err: BaseException) -> ErrorKind:
    """Classify a failure: a driver (or SQLAlchemy-wrapped) SQLite error by its extended
    code, a library error by the kind it already carries, an ``OSError`` by errno.

    A plain SQLITE_CORRUPT (11) is ambiguous: a damaged FTS shadow page and a damaged
    ``messages`` page both raise it. This function answers CORRUPT for it unless the
    message names the FTS index; callers that hold a connection refine the answer with a
    read-only ``quick_check`` of the canonical tables (see ``hermes_repo.schema.fts``).

    ``pysqlite3`` reports primary codes only, so with it READONLY_DBMOVED (1032) looks
    like a plain READONLY and is retried like one, until the retry budget runs out.
    """
    if isinstance(err, WriteFailedError):
        return err.kind
    if isinstance(err, IntegrityViolation):
        return ErrorKind.CONSTRAINT
    if isinstance(err, HermesRepoError):
        # Another library error: what it was translated from decides, if anything.
        cause = err.__cause__
        return classify(cause) if cause is not None else ErrorKind.OTHER
    if isinstance(err, OSError) and _as_sqlalchemy_error(err) is None:
        return ErrorKind.DISK if err.errno in _DISK_ERRNOS else ErrorKind.OTHER
    orig = _dbapi_error(err)
    if _is_pg_error(orig):
        return _pg_kind(err, orig)
    msg = str(orig)
    code = sqlite_code(orig)
    if code is None:
        return _text_kind(msg)
    primary = code & 0xFF
    if code == SQLITE_CORRUPT_VTAB or "fts5" in msg or "messages_fts" in msg:
        return ErrorKind.FTS
    # An FTS5 xUpdate failure surfaces as a bare "constraint failed"; real constraints
    # always carry detail ("UNIQUE constraint failed: ...").
    if primary == SQLITE_CONSTRAINT and msg == "constraint failed":
        return ErrorKind.FTS
    if primary in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return ErrorKind.CORRUPT
    if code == SQLITE_READONLY_DBMOVED:
        # The file was renamed or deleted under the open connection: waiting cannot help.
        return ErrorKind.REPLACED
    if primary in (SQLITE_BUSY, SQLITE_LOCKED, SQLITE_READONLY):
        return ErrorKind.TRANSIENT
    if primary in (SQLITE_IOERR, SQLITE_FULL):
        return ErrorKind.DISK
    if primary == SQLITE_CONSTRAINT:
        return ErrorKind.CONSTRAINT
    return ErrorKind.OTHER


def transient_cause(err: BaseException) -> str:
    """What keeps a transient failure from succeeding, as words that complete
    "the database is ...": "locked by another process", "read-only", ...

    Used in the messages of :class:`DatabaseBusyError`, so an operator reads the cause
    ("database is locked by another process for 20.1 s") instead of a bare code.
    """
    orig = _dbapi_error(err)
    if _is_pg_error(orig):
        return _pg_transient_cause(err, orig)
    code = sqlite_code(orig)
    if code is None:
        low = str(orig).lower()
        if "readonly" in low or "read-only" in low:
            return "read-only"
        if "table" in low and "locked" in low:
            return "locked by another connection of this process (a table is in use)"
        return "locked by another process"
    primary = code & 0xFF
    if code == SQLITE_BUSY_SNAPSHOT:
        return "changed by another process since this transaction read it"
    if primary == SQLITE_LOCKED:
        return "locked by another connection of this process (a table is in use)"
    if primary == SQLITE_READONLY:
        return "read-only"
    return "locked by another process"


def _pg_transient_cause(err: BaseException, orig: BaseException) -> str:
    state = pg_sqlstate(orig)
    if state == "40001":
        return "changed by a concurrent transaction (serialization failure)"
    if state == "40P01":
        return "deadlocked with another transaction"
    if state == "55P03":
        return "locked by another transaction (lock_timeout)"
    if state == "53300":
        return "refusing connections (too many clients)"
    return _PG_UNREACHABLE


def transient_fix(cause: str) -> str:
    """What to do about a transient cause (as :func:`transient_cause` words it)."""
    if cause == "read-only":
        return "check the file's permissions and how it was opened (mode=ro, query_only)"
    if cause == _PG_UNREACHABLE or cause.startswith("refusing connections"):
        return "check that the PostgreSQL server is running and reachable, then retry"
    if "transaction" in cause:
        return (
            "retry later, or find the transaction that holds the rows (pg_stat_activity) and end it"
        )
    return "retry later or stop the process that holds it"


def describe(err: BaseException) -> str:
    """A one-line description of a driver error: message plus the SQLite code name or
    the PostgreSQL SQLSTATE."""
    orig = _dbapi_error(err)
    name = getattr(orig, "sqlite_errorname", None)
    text = str(orig).splitlines()[0] if str(orig) else type(orig).__name__
    state = pg_sqlstate(orig)
    if state is not None:
        return f"{text} ({type(orig).__name__}, SQLSTATE {state})"
    return f"{text} ({name})" if name else text


def translate(err: BaseException, *, action: str = "write") -> HermesRepoError:
    """Map a driver error to the library's hierarchy; the caller raises it ``from err``."""
    kind = classify(err)
    what = describe(err)
    if kind is ErrorKind.TRANSIENT:
        cause = transient_cause(err)
        fix = (
            "check the file's permissions and how it was opened"
            if cause == "read-only"
            else transient_fix(cause)
        )
        return DatabaseBusyError(f"{action} failed: the database is {cause} ({what}); {fix}")
    if kind is ErrorKind.CONFIG:
        cause, fix = pg_refusal(err) or ("the server refused the store", _LOGIN_FIX)
        return ServerConfigError(f"{action} failed: {cause} ({what}); {fix}")
    if kind is ErrorKind.TIMEOUT:
        return QueryTimeoutError(
            f"{action} failed: the server cancelled a statement that ran past its "
            f"statement_timeout ({what}); raise the timeout for this work, or find what "
            "makes it slow (EXPLAIN, a missing index, a lock it waited for)"
        )
    if kind is ErrorKind.DISK and pg_sqlstate(err) is not None:
        return StorageFullError(
            f"{action} failed: the PostgreSQL server is out of disk space or memory "
            f"({what}); free space on the server's data volume (or memory), then retry"
        )
    if kind is ErrorKind.DISK:
        return StorageFullError(
            f"{action} failed: {what}; free disk space or check the storage device, then retry"
        )
    if kind is ErrorKind.CORRUPT:
        return StateDbCorruptError(
            f"{action} failed: the database file is damaged ({what}); "
            "run `hermes-repo doctor` and `hermes-repo sessions salvage --inspect-only`"
        )
    if kind is ErrorKind.CONSTRAINT:
        return IntegrityViolation(f"{action} refused by a constraint: {what}")
    if kind is ErrorKind.REPLACED:
        return StoreFileReplacedError(
            f"{action} failed: the database file was moved or deleted while the store was "
            f"open ({what}); the write is not durable at the store's path. Stop every "
            "process using this store and run `hermes-repo doctor`"
        )
    return WriteFailedError(f"{action} failed: {what}", kind)
