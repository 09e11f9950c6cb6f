"""Spool files: where a transcript goes when the database cannot take it.

``<home>/sessions/<sid>.pending.jsonl`` is a retry queue of JSON records, appended
durably and replayed exactly once by :mod:`hermes_repo.transcript.replay`. One module
per job:

* :mod:`.records`: the record format, and parsing a file's bytes into records;
* :mod:`.names`: file names (the encoded session id and the suffix of each kind);
* :mod:`.files`: safe access: the lock, durable appends, reads and deletes;
* :mod:`.listing`: every spool file of a home with its size, records and age.
"""

from __future__ import annotations

from typing import Any

from ...deprecation import moved_names
from .files import (
    LOCK_SUFFIX,
    append_lines,
    append_messages,
    keep_only,
    read_spool,
    remove_file,
    spool_lock,
)
from .listing import PendingFile, list_pending
from .names import (
    HOLD_SUFFIX,
    PENDING_SUFFIX,
    REJECTED_SUFFIX,
    SESSIONS_DIR,
    encode_session_id,
    existing_names,
    parse_name,
    pending_name,
    session_id_from_name,
    sessions_dir,
)
from .records import (
    FALLBACK_KEY,
    SESSION_KEY,
    SOURCE_KEY,
    STORE_KEY,
    TARGET_KEY,
    RejectedLine,
    SpoolContents,
    SpoolOwner,
    SpoolRecord,
    encode_record,
    parse_line,
    parse_spool,
    wrap,
)

__all__ = [
    "FALLBACK_KEY",
    "HOLD_SUFFIX",
    "LOCK_SUFFIX",
    "PENDING_SUFFIX",
    "REJECTED_SUFFIX",
    "SESSIONS_DIR",
    "SESSION_KEY",
    "SOURCE_KEY",
    "STORE_KEY",
    "TARGET_KEY",
    "PendingFile",
    "RejectedLine",
    "SpoolContents",
    "SpoolOwner",
    "SpoolRecord",
    "append_lines",
    "append_messages",
    "encode_record",
    "encode_session_id",
    "existing_names",
    "keep_only",
    "list_pending",
    "parse_line",
    "parse_name",
    "parse_spool",
    "pending_name",
    "read_spool",
    "remove_file",
    "session_id_from_name",
    "sessions_dir",
    "spool_lock",
    "wrap",
]

#: Names this module had before the hold file and the salvage were told apart.
_moved = moved_names(
    "hermes_repo.transcript.spool",
    {"SALVAGE_SUFFIX": "hermes_repo.transcript.spool.names:HOLD_SUFFIX"},
)


def __getattr__(name: str) -> Any:
    return _moved(name)
