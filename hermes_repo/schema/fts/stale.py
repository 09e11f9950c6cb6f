"""Degrading the full-text indexes: the stale marker and the detached sync triggers.

These take a SQLAlchemy Connection inside the caller's transaction; the caller decides
the transaction (a degrade is one BEGIN IMMEDIATE together with the replayed write).
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any

from .ddl import INDEXES, TRIGGER_NAMES

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

STALE_KEY = "fts_stale"


def detach(conn: Connection, *, index: str | None, error: str) -> None:
    """Mark the index stale and drop every sync trigger, in the caller's transaction.

    ``DROP TRIGGER`` works even when the FTS tables themselves can no longer be dropped
    or rebuilt (structure record or config damaged), so degrading is always possible.
    """
    from sqlalchemy import text

    marker = json.dumps({"since": time.time(), "index": index, "error": error[:500]})
    conn.execute(
        text(
            "INSERT INTO state_meta (key, value, updated_at) VALUES (:k, :v, :t) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
            "updated_at = excluded.updated_at"
        ),
        {"k": STALE_KEY, "v": marker, "t": time.time()},
    )
    for name in TRIGGER_NAMES:
        conn.execute(text(f"DROP TRIGGER IF EXISTS {name}"))


def index_named_in(error: str) -> str | None:
    """The index an FTS error message names (``... from table "messages_fts_trigram"``,
    ``vtable constructor failed: messages_fts``), or None when it names none."""
    for ix in INDEXES:
        # The index itself or one of its shadow tables, as a whole word: "messages_fts"
        # is a prefix of "messages_fts_trigram".
        names = "|".join(re.escape(n) for n in (ix.name, *ix.shadow_tables))
        if re.search(rf"\b(?:{names})\b", error):
            return ix.name
    return None


def stale_marker(conn: Connection) -> dict[str, Any] | None:
    """The ``fts_stale`` marker (when, which index, the error), or None when FTS is live."""
    from sqlalchemy import text

    value = conn.execute(
        text("SELECT value FROM state_meta WHERE key = :k"), {"k": STALE_KEY}
    ).scalar()
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return {"since": None, "index": None, "error": str(value)}
    return parsed if isinstance(parsed, dict) else {"since": None, "index": None, "error": value}


def present_triggers(conn: Connection) -> set[str]:
    """Which of the six sync triggers exist."""
    from sqlalchemy import text

    rows = conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'"))
    return {r[0] for r in rows} & set(TRIGGER_NAMES)
