"""Import a Hermes Agent ``state.db`` into the store, losing nothing and touching nothing.

The source is opened read-only *and* immutable (a percent-encoded ``file:`` URI with
``mode=ro&immutable=1``): Hermes' files carry the WAL flag, and a plain read-only open
creates ``-wal`` and ``-shm`` beside them. When a ``-wal`` is already there (a Hermes that
is running, or one that stopped without a checkpoint) its committed frames matter; when a
non-empty ``-journal`` is there (Hermes in rollback-journal mode, its fallback on network
and FUSE filesystems, killed mid-commit) the file holds pages of a transaction that never
committed. Either way the file and that side file are copied byte for byte into a private
temporary folder (taken when neither changed during the copy; a Hermes that keeps writing
gets a copy through SQLite's backup API instead), and the copy is opened normally: SQLite
replays the WAL or rolls the hot journal back there, as it would for Hermes, so a row
SQLite never committed is never read. The source's own files are only ever read, never
opened for writing.

Columns are read by name (``PRAGMA table_info``), never by position: real installs were
upgraded in place, so later columns sit at the end in any order, and a column a version
lacks is simply absent. What has a column here lands in it; every other non-NULL value
is kept in the row's JSON ``extra`` (messages and sessions both have one; a message value
that could not be used as is, e.g. a timestamp in milliseconds, is kept there as
``hermes_timestamp`` and the row keeps its place with the time before it). Rows of other
tables that name a session (``session_id``) go into that session's ``extra`` under
``"hermes_tables"``; the rest (``state_meta``, ``system_prompts``, topic modes...) are
kept in this store's ``state_meta`` as ``hermes_import.<table>``. Full-text tables and
their shadows are derived data and are not copied: this store indexes the rows itself.

Every session lands. Hermes takes ids this store's rule refuses (its API server passes any
id up to 256 characters through); such a session is stored under ``hermes-<readable
part>-<hash of the id>`` (the same on every import), its Hermes id kept in the session's
``extra`` as ``hermes_session_id`` and listed in the report. One odd value never stops the
rest: NaN/Infinity in a JSON column (Hermes writes them with ``json.dumps``) become null
with the exact text kept in ``extra``; U+0000 on a PostgreSQL store becomes U+FFFD with
the original in ``extra``; a BLOB content that is not UTF-8 is replayed as text with the
bytes kept; a parent cycle is cut at the session that started first; a table SQLite
cannot read is skipped. Each comes with a warning naming the session and message.

Sessions are written a few to a unit of work (about 5,000 rows; a longer session in parts
of that size, so memory stays bounded), their new rows with multi-row INSERTs. Message
uids are ``hermes:<session id>:<message id>``,
so importing the same file again adds nothing, a later copy of the same install adds only
the new sessions and messages, and an interrupted import is finished by running it again.
A re-import follows the source: a row Hermes deleted or rewrote (``/retry``, ``/undo``,
``/compress`` replace rows with new ids) is archived with the reason
``"hermes: deleted or rewritten in the source"``; a row Hermes changed in place (an
edit, ``set_latest_user_api_content``) is rewritten, its previous version kept as an
archived row (``"hermes: previous version of #<id> ..."``); a row this store's own repair
rewrote is left as repaired. An existing session takes the source's title, end, token
counters and ``extra`` (a later copy knows more). Counters are recomputed from the rows.
Rows are imported as they are: malformed sequences stay (repair is a separate act),
inactive rows stay inactive.
"""

from __future__ import annotations

from .report import HermesImportReport, TableCounts
from .run import ImportTarget, import_hermes_db
from .source import SQLITE_HEADER, is_sqlite_file

__all__ = [
    "SQLITE_HEADER",
    "HermesImportReport",
    "ImportTarget",
    "TableCounts",
    "import_hermes_db",
    "is_sqlite_file",
]
