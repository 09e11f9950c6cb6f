"""The read commands' own way into a SQLite store: the driver's cursor, no ORM.

``sessions list``, ``sessions show``, ``sessions export`` and ``search`` on a small
store cost little more than starting Python and loading their libraries, and the
store's usual open (:meth:`hermes_repo.store.StateStore.open`) loads far more than a
read needs: the ORM and the declarative models (a tenth of a second), the write core,
the importer's neighbours. A :class:`QuickReader` opens the file as the store's open
does (one driver connection set up as the engine sets up its own,
:func:`hermes_repo.engine.connect_store`; registered as a holder so an exclusive
repair or restore waits for it; the schema checked at head) and reads with the same
SQL the store runs on its driver's cursor (the message columns of
:mod:`hermes_repo.codec`, the search router of :mod:`hermes_repo.repositories.search`).
Listing, showing and exporting load no SQLAlchemy at all; a search loads SQLAlchemy
Core (its statements are compiled by it), never the ORM.

It reads only a store that needs nothing of an open but reading. Anything else is
left to the store's open, which knows what to do about it: a server (``--url``), a
quarantined file, a ``-wal`` with a damaged header (the open saves it first), pending
transcripts (replayed at open), a schema not at head (an upgrade to name, a damage to
report), a detached full-text index (rebuilt at open), a store without its id (made at
open), a SQLite without the WAL-reset fix (whose open warns), a store held by an
exclusive operation (the open waits for it within its budget). A driver error met
while reading (a lock, damage, undecodable text) hands the same read to the store's
open too, whose error handling (retries, quarantine, the lenient decode) applies: the
answer, or the error, is the store's own.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..codec import MESSAGE_COLUMNS, TEXT_MARK, decode_text, row_to_message
from ..engine import Driver, check_journal_files, connect_store, select_driver
from ..errors import HermesRepoError, NotFoundError
from ..holders import HolderLock, StoreHeldError
from ..homes import note_in_use
from ..ids import check_session_id
from ..schema.head import HEAD_REVISION
from ..transfer.info import SessionInfo, session_extra

if TYPE_CHECKING:
    from ..repositories.search.hits import SearchHit
    from ..repositories.search.paging import SearchPage
    from ..repositories.search.request import SearchQuery
    from ..transfer.export import ExportFormat, SessionExport

__all__ = ["HEAD_REVISION", "NEEDS_OPEN", "QuickReader", "quick_read"]

T = TypeVar("T")

#: Where pending transcripts wait (:mod:`hermes_repo.transcript.spool.names`; a test
#: compares them).
SESSIONS_DIR = "sessions"
PENDING_SUFFIX = ".pending.jsonl"
#: The ``state_meta`` keys an open acts on: a detached index, the store's id.
STALE_KEY = "fts_stale"
STORE_ID_KEY = "store_id"

_SESSION_COLUMNS = (
    "id",
    "source",
    "user_id",
    "model",
    "title",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
    "message_count",
    "tool_call_count",
    "input_tokens",
    "output_tokens",
    "extra",
)
_SESSION_TEXT = ("source", "user_id", "model", "title", "end_reason")
_SELECT_SESSIONS = f"SELECT {', '.join(_SESSION_COLUMNS)} FROM sessions"
_SELECT_MESSAGES = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages WHERE session_id = ?"


class _ReadFallback(Exception):
    """This read is the store's open's to do (see the module docstring)."""


class _NeedsOpen:
    """The type of :data:`NEEDS_OPEN`."""

    def __repr__(self) -> str:
        return "NEEDS_OPEN"


#: What :func:`quick_read` answers when the read is the store's open's to do.
NEEDS_OPEN = _NeedsOpen()


def quick_read(db_path: Path, work: Callable[[QuickReader], T]) -> T | _NeedsOpen:
    """``work`` on a :class:`QuickReader` of the store ``db_path`` (a hermes_repo
    store: the caller checked), closed after; :data:`NEEDS_OPEN` when the store's open
    has more to do than read, or the read met a driver error (the caller then does the
    same read through the store's open, which reports any cause itself)."""
    try:
        reader = QuickReader.open(db_path)
    except (_ReadFallback, OSError, HermesRepoError):
        return NEEDS_OPEN
    try:
        return work(reader)
    except _ReadFallback:
        return NEEDS_OPEN
    finally:
        reader.close()


def _pending_transcripts(home: Path) -> bool:
    try:
        names = os.listdir(home / SESSIONS_DIR)
    except OSError:
        return False  # no spool folder (or none readable): nothing to replay here
    return any(name.endswith(PENDING_SUFFIX) for name in names)


def _session_info(row: Any) -> SessionInfo:
    """A ``sessions`` row as the store's listing reads it (text decoded, ``extra``
    parsed or kept marked as unreadable)."""
    values = dict(zip(_SESSION_COLUMNS, row, strict=True))
    for field in _SESSION_TEXT:
        value = values[field]
        if value.__class__ is str and value.startswith(TEXT_MARK):
            values[field] = decode_text(value)
    stored = values["extra"]
    values["extra"] = None if stored is None else session_extra(stored)
    return SessionInfo(**values)


class QuickReader:
    """Reads of a SQLite store at head through its driver's cursor (see the module)."""

    def __init__(self, connection: Any, driver: Driver, holder: HolderLock) -> None:
        self._connection = connection
        self._driver = driver
        self._holder = holder

    @classmethod
    def open(cls, db_path: Path) -> QuickReader:
        """The reader of the store ``db_path`` (a hermes_repo store: the caller checked);
        :class:`_ReadFallback` when its open has more to do than read."""
        driver = select_driver()
        if not driver.has_wal_reset_fix:
            raise _ReadFallback("this SQLite's open warns about its journal")
        if _pending_transcripts(db_path.parent):
            raise _ReadFallback("pending transcripts")
        from .. import walcheck
        from ..schema.files import side_file

        # A quarantine is this process's record (made by a failed write or read of an
        # open store): none without its module loaded, and never imported for it.
        quarantine = sys.modules.get("hermes_repo.quarantine")
        if quarantine is not None and quarantine.quarantine_info(db_path) is not None:
            raise _ReadFallback("quarantined")
        # The open's checks of the -wal, without its writes: a damaged header is the
        # open's to save, a removed -wal its to refuse (both raise or report there).
        check_journal_files(db_path)
        walcheck.refuse_removed_wal(db_path)
        if walcheck.wal_header_problem(side_file(db_path, "-wal")) is not None:
            raise _ReadFallback("a damaged -wal")
        holder = HolderLock(db_path)
        try:
            holder.acquire_shared(timeout_s=0)
        except StoreHeldError as exc:
            holder.release()
            raise _ReadFallback("held by an exclusive operation") from exc
        try:
            connection = connect_store(db_path, driver=driver, journal_switch=holder.alone)
        except driver.module.Error as exc:
            holder.release()
            raise _ReadFallback(str(exc)) from exc
        except BaseException:
            holder.release()
            raise
        reader = cls(connection, driver, holder)
        # Its connection holds POSIX locks on the file: nothing may read the file
        # itself to classify it while the reader lives (see hermes_repo.homes).
        note_in_use(db_path, reader)
        try:
            reader._check_at_open()
        except BaseException:
            reader.close()
            raise
        return reader

    def _check_at_open(self) -> None:
        def check(cursor: Any) -> None:
            cursor.execute("SELECT version_num FROM alembic_version")
            revisions = cursor.fetchall()
            if [r[0] for r in revisions] != [HEAD_REVISION]:
                raise _ReadFallback("schema not at head")
            cursor.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' "
                "AND name IN ('sessions', 'messages', 'state_meta')"
            )
            if cursor.fetchone()[0] != 3:
                raise _ReadFallback("a canonical table is missing")
            # Any fts_stale row is a detached index (whatever its value); an empty id
            # is none (the open makes one).
            cursor.execute(
                "SELECT key, value FROM state_meta WHERE key IN (?, ?)", (STALE_KEY, STORE_ID_KEY)
            )
            meta = dict(cursor.fetchall())
            if STALE_KEY in meta or not meta.get(STORE_ID_KEY):
                raise _ReadFallback("a detached index or no store id")

        self._on_cursor(check)

    def _on_cursor(self, work: Callable[[Any], T]) -> T:
        """``work(cursor)`` on the reader's connection; a driver error is
        :class:`_ReadFallback` (the store's open reads again and handles it)."""
        try:
            cursor = self._connection.cursor()
            try:
                return work(cursor)
            finally:
                cursor.close()
        except self._driver.module.Error as exc:
            raise _ReadFallback(str(exc)) from exc

    def close(self) -> None:
        """Close the connection and the holder registration."""
        try:
            self._connection.close()
        finally:
            self._holder.release()

    # -- the reads: each as the store answers it -----------------------------------------

    def list_sessions(self, *, limit: int, source: str | None) -> list[dict[str, Any]]:
        """:meth:`StateStore.list_sessions`, each as ``SessionInfo.as_dict()``."""
        from ..codec import encode_text

        sql = _SELECT_SESSIONS
        params: tuple[Any, ...] = ()
        if source is not None:
            sql += " WHERE source = ?"
            params = (encode_text(source),)  # as stored
        sql += " ORDER BY started_at DESC, id DESC LIMIT ? OFFSET 0"

        def work(cursor: Any) -> list[dict[str, Any]]:
            cursor.execute(sql, (*params, limit))
            return [_session_info(row).as_dict() for row in cursor.fetchall()]

        return self._on_cursor(work)

    def get_session(self, session_id: str) -> SessionInfo:
        """:meth:`StateStore.get_session`."""
        check_session_id(session_id)

        def work(cursor: Any) -> Any:
            cursor.execute(f"{_SELECT_SESSIONS} WHERE id = ?", (session_id,))
            return cursor.fetchone()

        row = self._on_cursor(work)
        if row is None:
            raise NotFoundError(
                f"session {session_id!r} does not exist; "
                "list sessions with `hermes-repo sessions list`"
            )
        return _session_info(row)

    def load_messages(
        self, session_id: str, *, include_inactive: bool, last: int | None
    ) -> list[dict[str, Any]]:
        """The messages of an inspection load (:meth:`StateStore.load_conversation`
        without ``repair``)."""
        check_session_id(session_id)
        sql = _SELECT_MESSAGES
        params: tuple[Any, ...] = (session_id,)
        if not include_inactive:
            sql += " AND active = 1"
        # The newest rows are read backwards on the (session_id, id) index and turned
        # round: a tail of a long session never reads its head.
        sql += " ORDER BY id DESC" if last is not None else " ORDER BY id"
        if last is not None:
            sql += " LIMIT ? OFFSET 0"
            params = (*params, last)

        def work(cursor: Any) -> list[dict[str, Any]]:
            cursor.execute(sql, params)
            return [row_to_message(row) for row in cursor.fetchall()]

        found = self._on_cursor(work)
        if last is not None:
            found.reverse()
        return found

    def read_export(self, session_id: str, fmt: ExportFormat) -> SessionExport:
        """:func:`hermes_repo.transfer.read_export`: the session and its replay."""
        from ..transfer.export import SessionExport

        info = self.get_session(session_id)
        messages = self.load_messages(session_id, include_inactive=False, last=None)
        return SessionExport(info, messages, fmt)

    def search(self, query: SearchQuery) -> list[SearchHit]:
        """:meth:`StateStore.search` of a checked query, on the live index."""
        from ..repositories.search.fts5 import Fts5Dialect
        from ..repositories.search.liveness import IndexLiveness
        from ..repositories.search.router import SearchRouter

        def work(cursor: Any) -> list[SearchHit]:
            return SearchRouter(Fts5Dialect(cursor, IndexLiveness())).search(query, use_fts=True)

        return self._on_cursor(work)

    def search_page(self, query: SearchQuery, cursor: str | None) -> SearchPage:
        """:meth:`StateStore.search_page` of a checked query."""
        from ..repositories.search.paging import page_through

        return page_through(self.search, query, cursor)
