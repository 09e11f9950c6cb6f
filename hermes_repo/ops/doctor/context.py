"""What every doctor check shares: the read-only context, findings, sections, results.

A check is a function ``check_<name>(ctx: DoctorContext) -> CheckResult`` (see
:data:`Check`): it reads what it needs through the context, which opens one ``mode=ro``
connection on first use and holds one read transaction, so every check sees the same
snapshot and none can write.
"""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ... import walcheck
from ...codec.text import NOT_UTF8, lenient_text, not_utf8
from ...engine import DB_NAME, Driver, check_journal_files
from ...errors import DoctorReadError, JournalFileError, StoreFileReplacedError, UnsafePathError
from ...homes import in_use, read_head
from ...schema.files import read_only_uri
from ...schema.tables import COUNT_SQL

__all__ = [
    "SQLITE_MAGIC",
    "STOP_FIRST",
    "Check",
    "CheckResult",
    "DoctorContext",
    "DoctorReadError",
    "Finding",
    "JournalFileError",
    "Section",
    "Severity",
    "error_text",
    "file_size",
    "unreadable",
    "when",
]

Severity = Literal["error", "warning"]

STOP_FIRST = "stop every process using the store (e.g. the gateway), then run"
SQLITE_MAGIC = b"SQLite format 3\x00"


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
        self._in_use: in_use | None = None
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
                # Never a descriptor closed on a file this process has open (homes).
                self._header = read_head(self.db_path, 100)
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
                walcheck.refuse_removed_wal(self.db_path)
            except (UnsafePathError, StoreFileReplacedError) as exc:
                # SQLite would follow the link (or fail on the folder as CANTOPEN), or
                # make a new -wal under live holders: check_journal / check_wal_header
                # report it once, by name, with its fix.
                raise JournalFileError(str(exc)) from exc
            try:
                conn = self.driver.module.connect(
                    read_only_uri(self.db_path), uri=True, isolation_level=None, timeout=5.0
                )
                # TEXT another tool wrote in another encoding must not fail a check (the
                # driver refuses to decode a whole fetch for one such value): it is read
                # with each bad byte kept, and the values check names it.
                conn.text_factory = lenient_text
                conn.create_function(NOT_UTF8, 1, not_utf8, deterministic=True)
                conn.execute("BEGIN")
            except self.driver.module.Error as exc:
                raise DoctorReadError(error_text(exc)) from exc
            self._conn = conn
            # Its read lock must outlive every check: nothing may now read the file
            # itself to classify it (see homes.note_in_use).
            self._in_use = in_use(self.db_path)
            self._in_use.__enter__()
        return self._conn

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run a read; a SQLite error becomes :class:`DoctorReadError`."""
        conn = self._connection()
        try:
            return [tuple(r) for r in conn.execute(sql, params).fetchall()]
        except self.driver.module.Error as exc:
            raise DoctorReadError(error_text(exc)) from exc

    def value(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        """The first column of the first row, or None when there is no row."""
        found = self.rows(sql, params)
        return found[0][0] if found else None

    def counts(self) -> dict[str, int]:
        """``sessions``, ``messages`` and ``active_messages``, as every store count reads."""
        return {name: int(self.value(sql)) for name, sql in COUNT_SQL.items()}

    def command(self, cmd: str) -> str:
        """A ``hermes-repo ...`` command made exact for this store (``--home`` filled in)."""
        head, _, rest = cmd.partition(" ")
        return f"{head} --home {shlex.quote(str(self.home))} {rest}".rstrip()

    def close(self) -> None:
        """Roll the read transaction back and close the connection."""
        conn, self._conn = self._conn, None
        held, self._in_use = self._in_use, None
        try:
            self._close(conn)
        finally:
            if held is not None:  # once the connection and its locks are gone
                held.__exit__(None, None, None)

    def _close(self, conn: Any) -> None:
        if conn is not None:
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except self.driver.module.Error:
                pass  # a failed read may have ended it already; nothing was written
            finally:
                conn.close()


def error_text(exc: BaseException) -> str:
    """SQLite's message, first line only, with its error name when the driver gives one."""
    name = getattr(exc, "sqlite_errorname", None)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{text} ({name})" if name else text


def when(epoch: Any) -> str:
    """An epoch as local time for a person, or "an unknown time"."""
    if not isinstance(epoch, int | float):
        return "an unknown time"
    return dt.datetime.fromtimestamp(epoch).strftime("%Y-%m-%d %H:%M:%S")


def file_size(path: Path) -> int:
    """The size of ``path`` in bytes; 0 when it is missing or unreadable."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def unreadable(name: str, ctx: DoctorContext, exc: DoctorReadError) -> Finding:
    """The finding of a check that could not read the store: the salvage's first step."""
    source = shlex.quote(str(ctx.db_path))
    recover = ctx.command(f"hermes-repo sessions salvage --source {source} --inspect-only")
    return Finding(
        f"{name}-unreadable",
        "error",
        f"the {name} check could not read the store: {exc}",
        f"if the file is damaged, {STOP_FIRST} `{recover}`",
    )


Check = Callable[[DoctorContext], CheckResult]
"""One check: reads through the context, returns its section and findings."""
