"""The ``state_meta`` keys a store copy leaves in its target, and how to read them.

``hermes-repo db copy`` writes its target in many transactions. While it runs (and if
it is killed) the target holds part of the source, so it says so: the copy sets
:data:`COPY_MARK_KEY` before its first write and removes it only after its final
verification passed, in the transaction that appends the source's store id to
:data:`COPIED_FROM_KEY`. The doctor (``copy-unfinished``) and ``health()`` report a
marked store, with the command that finishes the copy.

:data:`STORE_ID_KEY` names a store (made when it is created). It describes the store it
sits in, so a copy never carries it over: a target keeps its own id and records where
its rows came from in :data:`COPIED_FROM_KEY`, a JSON list of source store ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..codec.text import escape_surrogates

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

__all__ = [
    "COPIED_FROM_KEY",
    "COPY_MARK_KEY",
    "STORE_ID_KEY",
    "CopyMark",
    "copy_mark",
    "parse_copy_mark",
]

STORE_ID_KEY: Final = "store_id"
"""The store's own id (a store copy never copies it)."""
COPIED_FROM_KEY: Final = "copied_from"
"""JSON list of the store ids whose rows a finished copy brought into this store."""
COPY_MARK_KEY: Final = "copy_in_progress"
"""Set while a copy into this store has not finished (JSON, see :class:`CopyMark`)."""


@dataclass(frozen=True)
class CopyMark:
    """What an unfinished copy into this store recorded when it started."""

    source: str
    """The source store (its URL or folder, never a password)."""
    source_store_id: str | None
    started_at: float | None
    command: str
    """The command that runs the copy again (it resumes and finishes)."""

    def as_json(self) -> str:
        """The text stored under :data:`COPY_MARK_KEY` (a path from non-UTF-8 argv bytes
        keeps its lone surrogates as JSON escapes: SQLite takes only UTF-8)."""
        return escape_surrogates(
            json.dumps(
                {
                    "source": self.source,
                    "source_store_id": self.source_store_id,
                    "started_at": self.started_at,
                    "command": self.command,
                },
                ensure_ascii=False,
            )
        )

    def message(self) -> str:
        """One line for people: what is unfinished and what finishes it."""
        password = (
            " (a password is never stored: PGPASSWORD or ~/.pgpass gives it)"
            if "://" in self.command
            else ""
        )
        return (
            f"a copy from {self.source} into this store was started and has not finished "
            "(killed, or it failed): the store holds only part of the source; run "
            f"`{self.command}` to finish it{password}"
        )


def parse_copy_mark(value: str | None) -> CopyMark | None:
    """The mark stored as ``value``; a value that is not the JSON a copy writes still
    means an unfinished copy (whatever wrote it)."""
    if value is None:
        return None
    data: Any
    try:
        data = json.loads(value)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        data = {}
    started = data.get("started_at")

    def text(key: str, default: str) -> str:
        got = data.get(key)
        return got if isinstance(got, str) and got else default

    return CopyMark(
        source=text("source", "an unknown source"),
        source_store_id=sid if isinstance(sid := data.get("source_store_id"), str) else None,
        started_at=float(started) if isinstance(started, int | float) else None,
        command=text("command", "hermes-repo --home SOURCE db copy --to THIS-STORE"),
    )


def copy_mark(conn: Connection) -> CopyMark | None:
    """The unfinished-copy mark of the store ``conn`` reads, or None."""
    # Plain SQL, not the models: the doctor imports this module for the key and the
    # parser and must not load the ORM for them.
    from sqlalchemy import text

    value = conn.execute(
        text('SELECT value FROM state_meta WHERE "key" = :key'), {"key": COPY_MARK_KEY}
    ).scalar_one_or_none()
    return parse_copy_mark(value)
