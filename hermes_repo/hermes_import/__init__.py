"""Import a Hermes Agent ``state.db`` into the store, losing nothing and touching nothing.

The source is opened read-only *and* immutable (a percent-encoded ``file:`` URI with
``mode=ro&immutable=1``): Hermes' files carry the WAL flag, and a plain read-only open
creates ``-wal`` and ``-shm`` beside them. When a ``-wal`` is already there (a Hermes that
is running, or one that stopped without a checkpoint) its committed frames matter: the
file and its ``-wal`` are copied byte for byte into a private temporary folder (taken
when the file and the WAL header did not change during the copy; a Hermes that keeps
writing gets a copy through SQLite's backup API instead), and the copy is read. The
source's own files are only ever read, never opened for writing.

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

Each session is one unit of work. Message uids are ``hermes:<session id>:<message id>``,
so importing the same file again adds nothing, a later copy of the same install adds only
the new sessions and messages, and an interrupted import is finished by running it again.
An existing session takes the source's title, end, token counters and ``extra`` (a later
copy knows more). Counters are recomputed from the rows. Rows are imported as they are:
malformed sequences stay (repair is a separate act), inactive rows stay inactive.
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
