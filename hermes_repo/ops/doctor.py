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
(which tells a damaged file, for ``sessions recover``, from a damaged index, for
``sessions repair``), the full-text indexes, this process's quarantine, spool and
salvage files, snapshots, and the other processes holding the store. A new concern is
one more function appended there. A check that fails to read is reported as a finding
of its own, never as a crash of the doctor.

FTS integrity is checked with ``PRAGMA integrity_check(<index>)``, which works on a
read-only connection from SQLite 3.45.1 on. FTS5's own ``'integrity-check'`` command is
an INSERT: a read-only connection refuses it. ``integrity_check`` tests the index's
structure, not whether it agrees with the canonical rows, so the doctor adds cheap
read-only comparisons: documents indexed vs rows the index covers, and the presence of
the structure, averages and version records.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from sqlalchemy.exc import DBAPIError

from .. import walcheck
from ..engine import DB_NAME, Driver, check_journal_files, db_path_for_home, select_driver
from ..errors import ErrorKind, UnsafePathError, classify
from ..holders import holder_pids
from ..models import Base
from ..quarantine import quarantine_info
from ..schema import fts, migrate
from ..schema.backup import read_only_engine
from ..schema.fts_rebuild import BACKUP_LABEL, MAX_AUTOMATIC_ATTEMPTS, REPAIR_COMMAND
from ..sqlite_copies import two_copies_problems
from ..transcript import spool
from .snapshots import list_snapshots, snapshots_dir

__all__ = [
    "CANONICAL_TABLES",
    "CHECKS",
    "Check",
    "CheckResult",
    "DoctorContext",
    "DoctorReport",
    "Finding",
    "FtsIndexStatus",
    "FtsStatus",
    "HeaderFacts",
    "HolderFacts",
    "QuarantineFacts",
    "QuickCheckFacts",
    "Section",
    "SnapshotFacts",
    "SpoolFacts",
    "StoreFacts",
    "check_fts",
    "check_fts_coverage",
    "check_header",
    "check_holders",
    "check_journal",
    "check_quarantine",
    "check_quick_check",
    "check_schema",
    "check_snapshots",
    "check_spool",
    "check_store",
    "check_wal_header",
    "diagnose",
    "recover_commands",
    "recovered_path",
    "replace_command",
]

Severity = Literal["error", "warning"]

# FTS5 checks its index read-only through PRAGMA integrity_check from this version on
# (3.44 added the hook; before 3.45.1 it failed on read-only connections).
FTS_READONLY_CHECK_VERSION = (3, 45, 1)
_FTS_VERSIONS = ("4", "5")  # file-format versions FTS5 reads

_SCHEMA_FINDINGS = frozenset(
    {
        "store-missing",
        "store-unreadable",
        "schema-empty",
        "schema-foreign",
        "schema-unversioned",
        "schema-behind",
        "schema-ahead",
        "schema-damaged",
        "schema-meta-missing",
        "file-not-a-database",
    }
)
STOP_FIRST = "stop every process using the store (e.g. the gateway), then run"
SQLITE_MAGIC = b"SQLite format 3\x00"
#: The canonical tables: what ``quick_check`` decides on (damage elsewhere is derived).
CANONICAL_TABLES = ("sessions", "messages", "state_meta")


@dataclass(frozen=True)
class Finding:
    """Something wrong with the store, and the exact command or steps that fix it."""

    code: str  # stable identifier for scripts, e.g. "fts-stale"
    severity: Severity
    summary: str  # what is wrong, in one sentence
    fix: str  # what to run, with the store's --home filled in

    def to_dict(self) -> dict[str, Any]:
        """The finding as JSON-ready data."""
        return asdict(self)


class Section(Protocol):
    """Facts a check gathered: shown to people as rows, to scripts as a dict."""

    title: str

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        ...

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        ...


@dataclass(frozen=True)
class CheckResult:
    """What one check found: its facts (under ``key``) and its findings."""

    key: str
    section: Section | None
    findings: list[Finding] = field(default_factory=list)


class DoctorReadError(Exception):
    """The store could not be read for a check (the message carries SQLite's error)."""


class JournalFileError(DoctorReadError):
    """A symlink or non-regular file sits at ``-wal``/``-shm``/``-journal``.

    :func:`check_journal` reports it; the checks that would read through SQLite skip.
    """


class DoctorContext:
    """What every check shares: paths, driver, one read-only connection, commands.

    The connection is opened on first use, in ``mode=ro``, and holds one read
    transaction (a consistent snapshot for every check) until :meth:`close` rolls it
    back.
    """

    def __init__(self, home: Path, driver: Driver) -> None:
        self.home = home
        self.db_path = home / DB_NAME
        self.driver = driver
        self._conn: Any = None
        self._header: bytes | None = None
        self._header_read = False
        #: What the checks run so far found (a later check may depend on it: whether
        #: the store's holders stand between the operator and a fix).
        self.findings: list[Finding] = []

    @property
    def exists(self) -> bool:
        """True when there is a ``state.db`` to examine."""
        return self.db_path.is_file()

    @property
    def header(self) -> bytes | None:
        """The first 100 bytes of ``state.db`` (fewer if it is shorter), None if unreadable."""
        if not self._header_read:
            self._header_read = True
            try:
                with open(self.db_path, "rb") as f:
                    self._header = f.read(100)
            except OSError:
                self._header = None
        return self._header

    @property
    def header_ok(self) -> bool:
        """True unless ``state.db`` is there, not empty, and lacks the SQLite header.

        Checks that read through SQLite skip a file that fails this: the header check
        reports it, once, with the command that fixes it.
        """
        head = self.header
        return not head or (head.startswith(SQLITE_MAGIC) and len(head) == 100)

    def _connection(self) -> Any:
        if self._conn is None:
            if not self.exists:
                raise DoctorReadError(f"{self.db_path} does not exist")
            try:
                check_journal_files(self.db_path)
            except UnsafePathError as exc:
                # SQLite would follow the link (or fail on the folder as CANTOPEN):
                # check_journal_files reports it once, by name, with its fix.
                raise JournalFileError(str(exc)) from exc
            try:
                # as_uri percent-encodes the path: a "?" or "#" in a folder name
                # would otherwise end it early.
                uri = self.db_path.absolute().as_uri() + "?mode=ro"
                conn = self.driver.module.connect(uri, uri=True, isolation_level=None, timeout=5.0)
                conn.execute("BEGIN")
            except self.driver.module.Error as exc:
                raise DoctorReadError(_error_text(exc)) from exc
            self._conn = conn
        return self._conn

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read; a SQLite error becomes :class:`DoctorReadError`."""
        conn = self._connection()
        try:
            return [tuple(r) for r in conn.execute(sql, params).fetchall()]
        except self.driver.module.Error as exc:
            raise DoctorReadError(_error_text(exc)) from exc

    def value(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """The first column of the first row, or None when there is no row."""
        found = self.rows(sql, params)
        return found[0][0] if found else None

    def command(self, cmd: str) -> str:
        """A ``hermes-repo ...`` command made exact for this store (``--home`` filled in)."""
        head, _, rest = cmd.partition(" ")
        return f"{head} --home {shlex.quote(str(self.home))} {rest}".rstrip()

    def close(self) -> None:
        """Roll the read transaction back and close the connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except self.driver.module.Error:
                pass  # a failed read may have ended it already; nothing was written
            finally:
                conn.close()


def _error_text(exc: BaseException) -> str:
    name = getattr(exc, "sqlite_errorname", None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{text} ({name})" if name else text


def _when(epoch: Any) -> str:
    if not isinstance(epoch, int | float):
        return "an unknown time"
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


# -- the store: file, SQLite, schema, counts --------------------------------------------


@dataclass
class StoreFacts:
    """The file, the SQLite that reads it, the schema revision and the canonical counts."""

    title = "store"
    path: str
    exists: bool
    size_bytes: int
    wal_bytes: int
    driver: str
    sqlite_version: str
    sqlite_has_wal_fix: bool
    journal_mode: str | None = None
    revision: str | None = None
    head: str | None = None
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def at_head(self) -> bool:
        """True when the schema is at the code's newest migration."""
        return self.revision is not None and self.revision == self.head

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return {**asdict(self), "at_head": self.at_head}

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        fix = "yes" if self.sqlite_has_wal_fix else "no (fixed in 3.51.3)"
        revision = self.revision or "none"
        if self.head is not None:
            revision += " (at head)" if self.at_head else f" (head is {self.head})"
        out = [
            ("file", f"{self.path} ({_size(self.size_bytes)})" if self.exists else "missing"),
            ("WAL", _size(self.wal_bytes)),
            ("SQLite", f"{self.sqlite_version} via {self.driver}; WAL-reset fix: {fix}"),
            ("journal mode", self.journal_mode or "-"),
            ("schema revision", revision),
        ]
        if self.counts:
            out.append(("rows", ", ".join(f"{k} {v}" for k, v in self.counts.items())))
        return out


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_store(ctx: DoctorContext, facts: StoreFacts) -> set[str]:
    facts.journal_mode = str(ctx.value("PRAGMA journal_mode")).lower()
    tables = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "alembic_version" in tables:
        facts.revision = ctx.value("SELECT version_num FROM alembic_version")
    if {"sessions", "messages"} <= tables:
        facts.counts = {
            "sessions": int(ctx.value("SELECT count(*) FROM sessions")),
            "messages": int(ctx.value("SELECT count(*) FROM messages")),
            "active_messages": int(ctx.value("SELECT count(*) FROM messages WHERE active = 1")),
        }
    return tables


def _has_model_columns(ctx: DoctorContext) -> bool:
    """Whether each canonical table has every column of this code's models."""
    for name in CANONICAL_TABLES:
        have = {str(r[1]) for r in ctx.rows(f"PRAGMA table_info({name})")}
        if not {c.name for c in Base.metadata.tables[name].columns} <= have:
            return False
    return True


@dataclass
class SchemaFacts:
    """The schema compared with the models, as `db check` does (Alembic's comparison)."""

    title = "schema"
    drift: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        return [("models", "no drift" if self.drift is None else f"DRIFT: {self.drift}")]


def check_schema(ctx: DoctorContext) -> CheckResult:
    """A store at head whose tables, columns or indexes differ from the models.

    Run only where the store check found a sound revision at head: a missing table
    is that check's finding, and a store behind head differs by design.
    """
    codes = {f.code for f in ctx.findings}
    if not ctx.exists or not ctx.header_ok or codes & _SCHEMA_FINDINGS:
        return CheckResult("schema", None)
    try:
        revision = ctx.value("SELECT version_num FROM alembic_version")
    except JournalFileError:
        raise  # reported once, by check_journal
    except DoctorReadError:
        return CheckResult("schema", None)  # the store check reported why
    if revision != migrate.head_revision():
        return CheckResult("schema", None)
    engine = read_only_engine(ctx.db_path, ctx.driver)
    try:
        drift = migrate.check(engine)
    except DBAPIError as exc:
        raise DoctorReadError(_error_text(exc.orig or exc)) from exc
    finally:
        engine.dispose()
    facts = SchemaFacts(drift=" ".join(drift.split()) if drift else None)
    if drift is None:
        return CheckResult("schema", facts)
    recover = recover_commands(ctx.db_path)[1]
    finding = Finding(
        "schema-drift",
        "error",
        f"the schema of {ctx.db_path} differs from the models ({facts.drift})",
        f"{STOP_FIRST} `{recover}` (a store built by the migrations) and install it with "
        f"`{replace_command(ctx.db_path)}`",
    )
    return CheckResult("schema", facts, [finding])


def check_store(ctx: DoctorContext) -> CheckResult:
    """File and WAL size, SQLite and its WAL-reset fix, schema revision, canonical counts."""
    drv = ctx.driver
    facts = StoreFacts(
        path=str(ctx.db_path),
        exists=ctx.exists,
        size_bytes=_file_size(ctx.db_path),
        wal_bytes=_file_size(ctx.db_path.with_name(DB_NAME + "-wal")),
        driver=drv.name,
        sqlite_version=drv.sqlite_version,
        sqlite_has_wal_fix=drv.has_wal_reset_fix,
        head=migrate.head_revision(),
    )
    findings: list[Finding] = []
    upgrade = ctx.command("hermes-repo db upgrade")
    if not ctx.exists or facts.size_bytes == 0:
        findings.append(
            Finding(
                "store-missing",
                "error",
                f"there is no store at {ctx.db_path} (the folder may be the wrong one)",
                f"check --home / HERMES_HOME; to create an empty store run `{upgrade}`",
            )
        )
        return CheckResult("store", facts, findings)

    if not ctx.header_ok:
        return CheckResult("store", facts, findings)  # check_header reports it
    try:
        tables = _read_store(ctx, facts)
    except JournalFileError:
        return CheckResult("store", facts, findings)  # check_journal names the file
    except DoctorReadError as exc:
        # The facts gathered so far are still worth showing next to the finding.
        findings.append(_unreadable("store", ctx, exc))
        return CheckResult("store", facts, findings)

    missing = [t for t in CANONICAL_TABLES if t not in tables]
    if facts.revision is None and tables and not missing and _has_model_columns(ctx):
        status = migrate.SchemaStatus(None, migrate.head_revision(), "unversioned")
        findings.append(
            Finding(
                "schema-unversioned",
                "error",
                f"{ctx.db_path} holds the hermes_repo tables but no schema revision (its "
                "alembic_version table is missing or empty): every open of the store fails",
                migrate.damaged_schema_fix(ctx.db_path, status).split("; ", 1)[1],
            )
        )
    elif facts.at_head and missing:
        status = migrate.SchemaStatus(
            facts.revision, migrate.head_revision(), "damaged", tuple(missing)
        )
        findings.append(
            Finding(
                "schema-meta-missing" if missing == ["state_meta"] else "schema-damaged",
                "error",
                f"{ctx.db_path} is at schema head but lacks the table(s) "
                f"{', '.join(missing)}: every open of the store fails",
                migrate.damaged_schema_fix(ctx.db_path, status).split("; ", 1)[1],
            )
        )
    elif facts.revision is None:
        if tables:
            findings.append(
                Finding(
                    "schema-foreign",
                    "error",
                    f"{ctx.db_path} holds tables but no hermes_repo schema revision: "
                    "it is not a hermes_repo store",
                    "point --home / HERMES_HOME at the folder of the hermes_repo store",
                )
            )
        else:
            findings.append(
                Finding(
                    "schema-empty",
                    "error",
                    "the store has no schema yet",
                    f"run `{upgrade}`",
                )
            )
    elif not facts.at_head:
        if facts.revision in migrate.known_revisions():
            findings.append(
                Finding(
                    "schema-behind",
                    "error",
                    f"the schema is at revision {facts.revision}, behind this code "
                    f"({facts.head}): the store refuses to open",
                    f"{STOP_FIRST} `{upgrade}` (it backs up first)",
                )
            )
        else:
            findings.append(
                Finding(
                    "schema-ahead",
                    "error",
                    f"the schema is at revision {facts.revision}, newer than this version "
                    "of hermes_repo knows",
                    "upgrade the hermes_repo package (`pip install -U hermes_repo`)",
                )
            )
    if facts.journal_mode == "wal" and not facts.sqlite_has_wal_fix:
        findings.append(
            Finding(
                "sqlite-wal-reset-bug",
                "warning",
                f"SQLite {drv.sqlite_version} has the WAL-reset bug (fixed in 3.51.3) and the "
                "store is in WAL mode: concurrent writers and checkpoints can corrupt it",
                "install a fixed SQLite with `pip install pysqlite3`; or stop every process "
                "using the store and open it alone with this SQLite (and "
                "HERMES_REPO_JOURNAL_MODE unset): the file then switches to "
                "journal_mode=DELETE, which avoids the bug",
            )
        )
    # Only this process is seen: a doctor run from the library inside a host application.
    for cause, fix in two_copies_problems(drv, ctx.db_path):
        findings.append(Finding("two-sqlite-copies", "warning", cause, fix))
    return CheckResult("store", facts, findings)


# -- the full-text indexes ---------------------------------------------------------------


@dataclass
class FtsIndexStatus:
    """One index: its integrity check, and how it compares with the rows it covers."""

    name: str
    integrity: str  # "ok", the failure, or why it was not checked
    indexed_rows: int | None  # documents in the index (its docsize table)
    covered_rows: int | None  # canonical rows the index should hold
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing is known to be wrong with the index."""
        checked = self.integrity == "ok" or self.integrity.startswith("not checked")
        return checked and not self.problems and self.indexed_rows == self.covered_rows


@dataclass
class FtsStatus:
    """The ``fts_stale`` marker, the sync triggers, each index, the rebuild ledger."""

    title = "full-text search"
    stale: bool
    marker: dict[str, Any] | None
    triggers: dict[str, bool]
    indexes: list[FtsIndexStatus]
    rebuild_attempts: int = 0
    rebuild_last_error: str | None = None
    backups: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        if self.marker is None:
            state = "live"
        else:
            where = self.marker.get("index") or "index"
            state = (
                f"STALE since {_when(self.marker.get('since'))} "
                f"({where}: {self.marker.get('error')}); search uses the LIKE fallback"
            )
        out = [("state", state)]
        missing = [name for name, present in self.triggers.items() if not present]
        out.append(
            ("triggers", "all 6 present" if not missing else f"missing: {', '.join(missing)}")
        )
        for ix in self.indexes:
            counts = f"{ix.indexed_rows} of {ix.covered_rows} rows indexed"
            detail = "; ".join([f"integrity {ix.integrity}", counts, *ix.problems])
            out.append((ix.name, detail))
        if self.rebuild_attempts:
            out.append(
                (
                    "rebuild attempts",
                    f"{self.rebuild_attempts} of {MAX_AUTOMATIC_ATTEMPTS} automatic "
                    f"(last error: {self.rebuild_last_error})",
                )
            )
        if self.backups:
            out.append(("rebuild backups", ", ".join(self.backups)))
        return out


def _index_status(ctx: DoctorContext, ix: fts.FtsIndex, tables: set[str]) -> FtsIndexStatus:
    data, _idx, docsize, config = ix.shadow_tables
    status = FtsIndexStatus(ix.name, integrity="not checked", indexed_rows=None, covered_rows=None)
    covered = "SELECT count(*) FROM messages"
    if ix.row_filter:
        covered += f" WHERE {ix.row_filter.format(t='messages')}"
    status.covered_rows = int(ctx.value(covered))
    if not {ix.name, data, docsize, config} <= tables:
        status.problems.append("index tables missing")
        return status

    def read(what: str, sql: str) -> Any:
        try:
            return ctx.value(sql)
        except JournalFileError:
            raise  # reported once, by check_journal
        except DoctorReadError as exc:
            status.problems.append(f"{what} unreadable: {exc}")
            return None

    indexed = read("document sizes", f"SELECT count(*) FROM {docsize}")
    status.indexed_rows = None if indexed is None else int(indexed)
    structure = read("structure record", f"SELECT block FROM {data} WHERE id = 10")
    averages = read("averages record", f"SELECT count(*) FROM {data} WHERE id = 1")
    version = read("format version", f"SELECT v FROM {config} WHERE k = 'version'")
    if averages == 0:
        status.problems.append("averages record missing")
    if structure is None:
        status.problems.append("structure record missing")
    elif not any(bytes(structure)) and status.indexed_rows:
        # All zeros is the structure of an empty index, not of one holding documents.
        status.problems.append("structure record is empty but documents are indexed")
    if version is not None and str(version) not in _FTS_VERSIONS:
        status.problems.append(f"unsupported format version {version}")

    if ctx.driver.version_tuple < FTS_READONLY_CHECK_VERSION:
        need = ".".join(map(str, FTS_READONLY_CHECK_VERSION))
        status.integrity = (
            f"not checked (SQLite {ctx.driver.sqlite_version} cannot check an FTS5 index "
            f"read-only; {need}+ can)"
        )
    else:
        try:
            result = [str(r[0]) for r in ctx.rows(f"PRAGMA integrity_check({ix.name})")]
        except JournalFileError:
            raise  # reported once, by check_journal
        except DoctorReadError as exc:
            status.integrity = str(exc)
        else:
            status.integrity = "ok" if result == ["ok"] else "; ".join(result)
    return status


def _ledger(ctx: DoctorContext) -> dict[str, Any]:
    try:
        data = json.loads(ctx.db_path.with_name(DB_NAME + ".fts-rebuild.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def check_fts(ctx: DoctorContext) -> CheckResult:
    """The ``fts_stale`` marker, the six sync triggers, each index's integrity."""
    if not ctx.exists or _file_size(ctx.db_path) == 0 or not ctx.header_ok:
        return CheckResult("fts", None)  # no store, or not a database: reported elsewhere
    if any(f.code == "file-damaged" for f in ctx.findings):
        # The index is derived from tables that are damaged themselves: its state says
        # nothing more, and the salvage (`sessions recover`) builds a new one anyway.
        return CheckResult("fts", None)
    tables = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"messages", "state_meta"} <= tables:
        return CheckResult("fts", None)  # no schema: check_store reports it
    raw = ctx.value("SELECT value FROM state_meta WHERE key = ?", (fts.STALE_KEY,))
    marker: dict[str, Any] | None = None
    if raw is not None:
        # The raw row: fts.stale_marker needs a SQLAlchemy connection.
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        marker = parsed if isinstance(parsed, dict) else {"error": str(raw)}
    present = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    ledger = _ledger(ctx) if marker is not None else {}
    status = FtsStatus(
        stale=marker is not None,
        marker=marker,
        triggers={name: name in present for name in fts.TRIGGER_NAMES},
        indexes=[_index_status(ctx, ix, tables) for ix in fts.INDEXES],
        rebuild_attempts=int(ledger.get("attempts", 0) or 0),
        rebuild_last_error=ledger.get("last_error"),
        backups=sorted(p.name for p in ctx.home.glob(f"{DB_NAME}.{BACKUP_LABEL}-*.bak")),
    )

    repair = f"{STOP_FIRST} `{ctx.command(REPAIR_COMMAND)}`"
    findings: list[Finding] = []
    if marker is not None:
        where = marker.get("index") or "the index"
        summary = (
            f"the full-text index is detached since {_when(marker.get('since'))} "
            f"({where}: {marker.get('error')}); search answers from a slower LIKE scan"
        )
        if status.rebuild_attempts >= MAX_AUTOMATIC_ATTEMPTS:
            summary += (
                f"; the automatic rebuild gave up after {status.rebuild_attempts} attempts "
                f"(last error: {status.rebuild_last_error})"
            )
        findings.append(Finding("fts-stale", "error", summary, repair))
    else:
        missing = [name for name, ok in status.triggers.items() if not ok]
        if missing:
            findings.append(
                Finding(
                    "fts-triggers-missing",
                    "error",
                    f"sync triggers missing without a stale marker ({', '.join(missing)}): "
                    "new messages are not indexed and search silently misses them",
                    repair,
                )
            )
        for ix in status.indexes:
            if ix.ok:
                continue
            what = [*ix.problems]
            if ix.integrity != "ok" and not ix.integrity.startswith("not checked"):
                what.append(f"integrity check: {ix.integrity}")
            if what:
                findings.append(
                    Finding(
                        "fts-damaged",
                        "error",
                        f"{ix.name} is damaged but not detached yet ({'; '.join(what)}): "
                        "search may miss messages; the next write that meets it detaches it",
                        repair,
                    )
                )
            else:
                findings.append(
                    Finding(
                        "fts-behind",
                        "error",
                        f"{ix.name} holds {ix.indexed_rows} of the {ix.covered_rows} rows it "
                        "covers: search silently misses the others",
                        repair,
                    )
                )
    return CheckResult("fts", status, findings)


def check_fts_coverage(ctx: DoctorContext) -> CheckResult:
    """Whether each live index finds what the table holds (:func:`fts.coverage_check`).

    FTS5's integrity checks pass when rows of an index's ``_idx`` b-tree are gone, yet
    every term on the pages they led to is then unfindable. Skipped when the index is
    detached or already reported damaged: the repair for those rebuilds it anyway.
    """
    if not ctx.exists or not ctx.header_ok:
        return CheckResult("fts_coverage", None)
    if any(f.code.startswith(("fts-", "file-")) for f in ctx.findings):
        return CheckResult("fts_coverage", None)
    tables = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not {"messages", *(ix.name for ix in fts.INDEXES)} <= tables:
        return CheckResult("fts_coverage", None)  # no schema, or no index: reported elsewhere
    try:
        problems = [str(p) for p in fts.coverage_check(ctx.rows)]
    except JournalFileError:
        raise  # reported once, by check_journal
    except DoctorReadError as exc:
        problems = [f"the index could not be probed: {exc}"]
    findings = [
        Finding(
            "fts-partial",
            "error",
            f"the full-text index misses messages it should find ({'; '.join(problems)}): "
            "search silently returns fewer results",
            f"{STOP_FIRST} `{ctx.command(REPAIR_COMMAND + ' --rebuild-search')}`",
        )
    ]
    return CheckResult("fts_coverage", None, findings if problems else [])


# -- the file: header, quick_check --------------------------------------------------------


def recovered_path(db_path: Path) -> Path:
    """Where the salvage commands put the new store: ``<home>/recovered-<stamp>/state.db``.

    One folder per incident: ``db replace`` leaves the salvaged store's folder behind,
    and a fixed name would send the operator of the next incident to the previous
    incident's stale store (or fail on "already exists"). See
    :func:`hermes_repo.walcheck.recovered_path`.
    """
    return walcheck.recovered_path(db_path)


def replace_command(db_path: Path) -> str:
    """The command that installs the recovered store in place of the damaged one."""
    home = shlex.quote(str(db_path.parent))
    return f"hermes-repo --home {home} db replace {shlex.quote(str(recovered_path(db_path)))}"


def recover_commands(db_path: Path) -> tuple[str, str]:
    """The two salvage commands for a store: inspect, then recover into a new file.

    The new file goes to ``<home>/recovered/state.db``: ``sessions recover`` refuses an
    existing path, and a ``state.db`` in a folder of its own opens with ``--home``.
    """
    source = shlex.quote(str(db_path))
    output = shlex.quote(str(recovered_path(db_path)))
    return (
        f"hermes-repo sessions recover --source {source} --inspect-only",
        f"hermes-repo sessions recover --source {source} --output {output}",
    )


def _damaged_file_fix(ctx: DoctorContext) -> str:
    inspect, output = recover_commands(ctx.db_path)
    fix = (
        f"{STOP_FIRST} `{inspect}`, then, if rows are recoverable, `{output}` and put it in "
        f"place of the old file with `{replace_command(ctx.db_path)}`"
    )
    newest = next((s for s in list_snapshots(ctx.home) if s.ok), None)
    if newest is not None:
        restore = ctx.command(f"hermes-repo snapshot restore {newest.id}")
        fix += f"; or restore the newest snapshot ({newest.created_at}) with `{restore}`"
    return fix


@dataclass
class WalHeaderFacts:
    """The ``-wal``'s header (checked before any read) and damaged ones saved aside."""

    title = "WAL header"
    damaged: str | None = None
    saved: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        out = [("-wal header", f"DAMAGED: {self.damaged}" if self.damaged else "valid or none")]
        if self.saved:
            out.append(("saved -wal sets", ", ".join(self.saved)))
        return out


def check_journal(ctx: DoctorContext) -> CheckResult:
    """A symlink or non-regular file at ``-wal``/``-shm``/``-journal``, named with its fix.

    SQLite opens those by name and follows a link; a folder in their place makes every
    read fail as SQLITE_CANTOPEN, which is not damage: moving the file away fixes it.
    """
    try:
        check_journal_files(ctx.db_path)
    except UnsafePathError as exc:
        # engine's message: "<file> is a symlink; SQLite would keep ... there. Move it away ..."
        text = str(exc)
        split = text.rfind("Move it away")
        cause, fix = (text[:split].rstrip(". "), text[split:]) if split > 0 else (text, text)
        return CheckResult("journal", None, [Finding("journal-file-unsafe", "error", cause, fix)])
    return CheckResult("journal", None)


def check_wal_header(ctx: DoctorContext) -> CheckResult:
    """A ``-wal`` whose header is invalid: saved aside before this doctor's first read.

    SQLite would treat it as empty (and the next read-write open deletes it), so its
    committed frames are in no read the other checks make: they would call the store
    healthy. Sets saved earlier (by any open) stay a finding until salvaged and removed.
    """
    if any(f.code == "journal-file-unsafe" for f in ctx.findings):
        return CheckResult("wal_header", None)  # check_journal named the file
    try:
        found = walcheck.preserve_damaged_wal(ctx.db_path)
    except walcheck.WalSaveError as exc:
        cause, _, fix = str(exc).partition("; ")
        return CheckResult("wal_header", None, [Finding("wal-header-damaged", "error", cause, fix)])
    saved = [str(p) for p in walcheck.saved_sets(ctx.db_path)]
    if found is None and not saved:
        return CheckResult("wal_header", None)  # the usual case: nothing worth a section
    facts = WalHeaderFacts(damaged=found.reason if found else None, saved=saved)
    findings: list[Finding] = []
    if found is not None:
        findings.append(
            Finding(
                "wal-header-damaged",
                "error",
                found.message(),
                f"{STOP_FIRST} `{found.recover_command()}`, then put the new store in place "
                f"of the old one with `{ctx.command('hermes-repo db replace')} "
                f"{shlex.quote(str(recovered_path(ctx.db_path)))}`",
            )
        )
    elif saved:
        source = shlex.quote(saved[-1][: -len("-wal")])
        findings.append(
            Finding(
                "wal-saved",
                "warning",
                f"{len(saved)} -wal file(s) with a damaged header were saved beside the store "
                f"({', '.join(Path(p).name for p in saved)}); their committed frames may hold "
                "messages the store lost when SQLite discarded the log",
                f"check with `hermes-repo sessions recover --source {source} --inspect-only`; "
                "salvage what is missing, then delete the saved set",
            )
        )
    return CheckResult("wal_header", facts, findings)


@dataclass
class HeaderFacts:
    """The first bytes of ``state.db``: an SQLite database says ``SQLite format 3``."""

    title = "file header"
    ok: bool
    magic: str  # the first 16 bytes, as text a person can read

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        verdict = "valid SQLite database" if self.ok else "NOT an SQLite database (NOTADB)"
        return [("header", f"{verdict}: {self.magic}")]


def check_header(ctx: DoctorContext) -> CheckResult:
    """The SQLite header: without it SQLite answers NOTADB to every read."""
    head = ctx.header
    if not ctx.exists or not head:
        return CheckResult("header", None)  # no store, or an empty one: check_store says so
    magic = head[:16]
    if ctx.header_ok:
        magic = magic.rstrip(b"\0")  # the terminating NUL of "SQLite format 3\0"
    facts = HeaderFacts(ok=ctx.header_ok, magic=repr(magic)[2:-1])
    if facts.ok:
        return CheckResult("header", facts)
    finding = Finding(
        "file-not-a-database",
        "error",
        f"{ctx.db_path} does not start with the SQLite header (its first bytes are "
        f"{facts.magic}): "
        "the file is damaged (SQLITE_NOTADB) and cannot be opened or repaired in place",
        _damaged_file_fix(ctx),
    )
    return CheckResult("header", facts, [finding])


@dataclass
class QuickCheckFacts:
    """``PRAGMA quick_check`` of each canonical table (read-only)."""

    title = "canonical tables"
    tables: dict[str, str]  # table -> "ok", the problems, or why it could not be checked

    @property
    def damaged(self) -> dict[str, str]:
        """The tables that fail the check."""
        return {t: r for t, r in self.tables.items() if r != "ok"}

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return {"tables": dict(self.tables), "ok": not self.damaged}

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        return [(f"quick_check({t})", r) for t, r in self.tables.items()]


def check_quick_check(ctx: DoctorContext) -> CheckResult:
    """``quick_check`` of ``sessions``, ``messages`` and ``state_meta``, read-only.

    These decide between the two kinds of damage: a failing canonical table means the
    file itself is damaged (salvage with ``sessions recover``; a rebuild would make it
    worse), while damage confined to the FTS tables is the index's, which the repair
    rebuilds. ``schema`` stands for the schema table, read first.
    """
    if not ctx.exists or _file_size(ctx.db_path) == 0 or not ctx.header_ok:
        return CheckResult("quick_check", None)
    facts = QuickCheckFacts(tables={})
    try:
        present = {r[0] for r in ctx.rows("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except JournalFileError:
        raise  # reported once, by check_journal
    except DoctorReadError as exc:
        if not _is_damage(exc):
            raise
        facts.tables["schema"] = str(exc)
        present = set()
    for table in CANONICAL_TABLES:
        if table not in present:
            continue  # no schema yet (check_store reports it), or the schema is unreadable
        try:
            result = [str(r[0]) for r in ctx.rows(f"PRAGMA quick_check({table})")]
        except JournalFileError:
            raise  # reported once, by check_journal
        except DoctorReadError as exc:
            if not _is_damage(exc):
                raise
            facts.tables[table] = str(exc)
        else:
            facts.tables[table] = "ok" if result == ["ok"] else "; ".join(result[:3])
    if not facts.damaged:
        return CheckResult("quick_check", facts)
    what = "; ".join(f"{t}: {r}" for t, r in facts.damaged.items())
    finding = Finding(
        "file-damaged",
        "error",
        f"the canonical tables fail quick_check ({what}): the file itself is damaged, "
        "not only the search index, and a repair in place would make it worse",
        _damaged_file_fix(ctx),
    )
    return CheckResult("quick_check", facts, [finding])


def _is_damage(exc: DoctorReadError) -> bool:
    """True when a read failed because the file is damaged (not locked, not missing)."""
    cause = exc.__cause__
    return cause is not None and classify(cause) is ErrorKind.CORRUPT


# -- this process, other processes ------------------------------------------------------


@dataclass
class QuarantineFacts:
    """Whether this process has quarantined the store (a damaged file met by a write)."""

    title = "quarantine"
    quarantined: bool
    since: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        if not self.quarantined:
            return [("this process", "not quarantined")]
        return [("this process", f"QUARANTINED since {_when(self.since)}: {self.error}")]


def check_quarantine(ctx: DoctorContext) -> CheckResult:
    """The quarantine of this process: it refuses every write to the file until restart."""
    info = quarantine_info(ctx.db_path)
    if info is None:
        return CheckResult("quarantine", QuarantineFacts(quarantined=False))
    facts = QuarantineFacts(quarantined=True, since=info.since, error=info.error)
    finding = Finding(
        "quarantined",
        "error",
        f"this process quarantined {ctx.db_path} at {_when(info.since)} after {info.error}: "
        "it writes nothing more to the file until it restarts on a repaired or recovered one",
        _damaged_file_fix(ctx) + "; then restart this process",
    )
    return CheckResult("quarantine", facts, [finding])


@dataclass
class HolderFacts:
    """The other processes that have the store open (registered holders)."""

    title = "holders"
    pids: list[int]

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        if not self.pids:
            return [("other processes", "none has the store open")]
        return [("other processes", "pids " + ", ".join(str(p) for p in self.pids))]


def check_holders(ctx: DoctorContext) -> CheckResult:
    """Who else has the store open; a finding only when it stands in the way of a fix.

    A running gateway holding the store is normal, not a fault. But every fix above
    (repair, recover, restore) needs the store to itself, so when there is something to
    fix, the processes to stop are named. Runs after the other checks for that reason.
    """
    if not ctx.exists:
        return CheckResult("holders", None)
    facts = HolderFacts(pids=list(holder_pids(ctx.db_path)))
    if not facts.pids or not any(f.severity == "error" for f in ctx.findings):
        return CheckResult("holders", facts)
    listed = ", ".join(str(p) for p in facts.pids)
    finding = Finding(
        "store-held",
        "warning",
        f"process(es) {listed} have the store open: the fixes above refuse to run while they do",
        "stop them first (e.g. the gateway), then run the fixes above",
    )
    return CheckResult("holders", facts, [finding])


# -- files beside the store ---------------------------------------------------------------


@dataclass
class SpoolFacts:
    """Transcript spool files in ``<home>/sessions``: pending, rejected, salvage."""

    title = "spool files"
    folder: str
    pending_files: int = 0
    pending_records: int = 0
    oldest_pending_age_s: float | None = None
    rejected_files: int = 0
    rejected_lines: int = 0
    salvage_files: int = 0
    salvage_records: int = 0
    unreadable: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        age = (
            ""
            if self.oldest_pending_age_s is None
            else f", oldest {self.oldest_pending_age_s / 3600:.1f} h old"
        )
        out = [
            ("pending", f"{self.pending_files} file(s), {self.pending_records} record(s){age}"),
            ("rejected", f"{self.rejected_files} file(s), {self.rejected_lines} line(s)"),
            ("salvage", f"{self.salvage_files} file(s), {self.salvage_records} record(s)"),
        ]
        if self.unreadable:
            out.append(("unreadable", ", ".join(self.unreadable)))
        return out


def check_spool(ctx: DoctorContext) -> CheckResult:
    """Pending (replayed later), rejected and salvage (never replayed) spool files."""
    now = time.time()
    folder = spool.sessions_dir(ctx.home)
    try:
        pending = spool.list_pending(ctx.home)
        rejected = spool.list_pending(ctx.home, suffix=spool.REJECTED_SUFFIX)
        salvage = spool.list_pending(ctx.home, suffix=spool.SALVAGE_SUFFIX)
    except OSError as exc:  # e.g. `sessions` is a file: the folder cannot be listed
        finding = Finding(
            "spool-unreadable",
            "warning",
            f"the spool folder {folder} cannot be listed: {exc}",
            f"make {folder} a folder (mode 0700) owned by the store's user",
        )
        return CheckResult("spool", SpoolFacts(folder=str(folder)), [finding])
    ages = [a for f in pending if (a := f.age_s(now)) is not None]
    facts = SpoolFacts(
        folder=str(folder),
        pending_files=len(pending),
        pending_records=sum(f.records for f in pending),
        oldest_pending_age_s=max(ages) if ages else None,
        rejected_files=len(rejected),
        rejected_lines=sum(f.records + f.bad_lines for f in rejected),
        salvage_files=len(salvage),
        salvage_records=sum(f.records for f in salvage),
        unreadable=[f"{f.name}: {f.error}" for f in (*pending, *rejected, *salvage) if f.error],
    )
    listing = ctx.command("hermes-repo pending list")
    findings: list[Finding] = []
    if pending:
        findings.append(
            Finding(
                "pending-transcripts",
                "warning",
                f"{facts.pending_files} spool file(s) in {folder} hold {facts.pending_records} "
                "message(s) not yet in the database (the next open of the store replays them)",
                f"run `{ctx.command('hermes-repo pending recover')}`",
            )
        )
    if salvage:
        names = ", ".join(f.name for f in salvage[:3]) + (", ..." if len(salvage) > 3 else "")
        findings.append(
            Finding(
                "salvage-transcripts",
                "error",
                f"{facts.salvage_files} salvage file(s) in {folder} ({names}) hold "
                f"{facts.salvage_records} message(s) written while the database file was "
                "damaged; they are in no database and are never replayed by themselves",
                "once the store is recovered or restored, append each <sid>.jsonl to "
                f"<sid>.pending.jsonl in {folder}, delete it, and run "
                f"`{ctx.command('hermes-repo pending recover')}` (already stored messages "
                f"are skipped); `{listing}` shows them",
            )
        )
    if rejected:
        findings.append(
            Finding(
                "rejected-spool-lines",
                "warning",
                f"{facts.rejected_files} file(s) in {folder} keep {facts.rejected_lines} "
                "spool line(s) that recovery could not use (torn or invalid), for inspection",
                f"read them (`{listing}` names them) and delete each <sid>.rejected.jsonl "
                "once nothing in it is needed",
            )
        )
    if facts.unreadable:
        findings.append(
            Finding(
                "spool-unreadable",
                "warning",
                f"spool file(s) could not be read: {'; '.join(facts.unreadable)}",
                f"check the files' owner and mode in {folder} (they must be regular files)",
            )
        )
    return CheckResult("spool", facts, findings)


@dataclass
class SnapshotFacts:
    """Snapshots in ``<home>/state-snapshots``: how many, the newest, damaged ones."""

    title = "snapshots"
    count: int
    newest_id: str | None = None
    newest_created_at: str | None = None
    newest_age_s: float | None = None
    damaged: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        if self.newest_id is None:
            newest = "none"
        else:
            age = "" if self.newest_age_s is None else f", {self.newest_age_s / 3600:.1f} h old"
            newest = f"{self.newest_id} ({self.newest_created_at}{age})"
        out = [("snapshots", str(self.count)), ("newest", newest)]
        if self.damaged:
            out.append(("damaged", ", ".join(self.damaged)))
        return out


def check_snapshots(ctx: DoctorContext) -> CheckResult:
    """How many verified snapshots there are and how old the newest is; damaged ones."""
    snaps = list_snapshots(ctx.home)
    good = [s for s in snaps if s.ok]
    facts = SnapshotFacts(
        count=len(good), damaged=[f"{s.id}: {s.error}" for s in snaps if not s.ok]
    )
    if good:
        newest = good[0]
        facts.newest_id = newest.id
        facts.newest_created_at = newest.created_at
        if newest.created_at is not None:
            with contextlib.suppress(ValueError):
                made = dt.datetime.fromisoformat(newest.created_at).timestamp()
                facts.newest_age_s = max(0.0, time.time() - made)
    findings = []
    if facts.damaged:
        findings.append(
            Finding(
                "snapshot-damaged",
                "warning",
                f"{len(facts.damaged)} snapshot(s) cannot be restored: {'; '.join(facts.damaged)}",
                f"see `{ctx.command('hermes-repo snapshot list')}`; delete the damaged "
                f"snapshot's files from {snapshots_dir(ctx.home)} once nothing in them is needed",
            )
        )
    return CheckResult("snapshots", facts, findings)


# -- the report ------------------------------------------------------------------------

Check = Callable[[DoctorContext], CheckResult]

# Report order. The header comes first (a file that is not a database skips every SQL
# read); holders come last (whether they matter depends on what the others found).
CHECKS: list[Check] = [
    check_journal,
    check_wal_header,
    check_header,
    check_store,
    check_schema,
    check_quick_check,
    check_fts,
    check_fts_coverage,
    check_quarantine,
    check_spool,
    check_snapshots,
    check_holders,
]


@dataclass
class DoctorReport:
    """Every check's facts, by key, and every finding; ``healthy`` when there are none."""

    path: str
    sections: dict[str, Section] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """True when no check found anything to fix."""
        return not self.findings

    @property
    def store(self) -> StoreFacts:
        """The store section (always present)."""
        section = self.sections["store"]
        assert isinstance(section, StoreFacts)
        return section

    @property
    def fts(self) -> FtsStatus | None:
        """The full-text section, or None when the store has no schema to check."""
        section = self.sections.get("fts")
        assert section is None or isinstance(section, FtsStatus)
        return section

    def to_dict(self) -> dict[str, Any]:
        """The whole report as JSON-ready data."""
        return {
            "path": self.path,
            "healthy": self.healthy,
            "findings": [f.to_dict() for f in self.findings],
            **{key: section.to_dict() for key, section in self.sections.items()},
        }


def _unreadable(name: str, ctx: DoctorContext, exc: DoctorReadError) -> Finding:
    source = shlex.quote(str(ctx.db_path))
    recover = ctx.command(f"hermes-repo sessions recover --source {source} --inspect-only")
    return Finding(
        f"{name}-unreadable",
        "error",
        f"the {name} check could not read the store: {exc}",
        f"if the file is damaged, {STOP_FIRST} `{recover}`",
    )


def _run(check: Check, ctx: DoctorContext) -> CheckResult:
    try:
        return check(ctx)
    except JournalFileError:
        return CheckResult(check.__name__.removeprefix("check_"), None)  # see check_journal
    except DoctorReadError as exc:
        name = check.__name__.removeprefix("check_")
        return CheckResult(name, None, [_unreadable(name, ctx, exc)])


def diagnose(
    home: str | os.PathLike[str] | None = None,
    *,
    driver: Driver | None = None,
    checks: list[Check] | None = None,
) -> DoctorReport:
    """Examine the store in ``home`` (default ``$HERMES_HOME``, else ``~/.hermes``).

    Writes nothing: see the module docstring. Safe while other processes use the store.
    """
    db_path = db_path_for_home(home)
    ctx = DoctorContext(db_path.parent, driver or select_driver())
    report = DoctorReport(path=str(db_path))
    try:
        for check in CHECKS if checks is None else checks:
            result = _run(check, ctx)
            if result.section is not None:
                report.sections[result.key] = result.section
            report.findings.extend(result.findings)
            ctx.findings.extend(result.findings)
    finally:
        ctx.close()
    return report
