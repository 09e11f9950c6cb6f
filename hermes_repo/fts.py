"""The full-text indexes as data: one definition for the migrations and the runtime.

Two external-content FTS5 indexes sit over ``messages``:

* ``messages_fts`` (unicode61, diacritics removed): word search with bm25, over every
  row's text and tool name.
* ``messages_fts_trigram`` (trigram): substring and CJK search. It covers the text of
  system, user and assistant rows only. Tool output is the bulk of an agent's transcript
  and a trigram index costs ~2.4x the text it covers, so tool rows are left to the word
  index (and to the LIKE path for 1-2 character queries).

Each index reads its rows through a view (``*_src``) that projects a message to the
indexed text: its text content, or for multimodal content the joined ``text`` parts
(stored in ``content_text`` when the row is written). The triggers write the
same projection from ``new.*`` / ``old.*``; all three are rendered from one template
below, so ``'rebuild'``, ``'delete'`` and the triggers can never see different text
(which would make the index drift and its integrity check fail).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

__all__ = [
    "INDEXES",
    "STALE_KEY",
    "TRIGGER_NAMES",
    "FtsIndex",
    "create_statements",
    "detach",
    "drop_statements",
    "index_named_in",
    "integrity_errors",
    "present_triggers",
    "recreate",
    "reset_shadow_tables",
    "stale_marker",
    "text_projection",
    "trigger_statements",
]


def text_projection(t: str) -> str:
    """The indexed text of a row ``t``: its text content, or its multimodal text parts."""
    return f"coalesce({t}.content, {t}.content_text)"


@dataclass(frozen=True)
class FtsIndex:
    """One external-content FTS5 index over ``messages``."""

    name: str
    tokenize: str
    columns: tuple[str, ...]
    # SQL condition over a row alias `{t}` that decides whether the row is indexed.
    row_filter: str | None
    # The message columns the projection and the filter read: only these fire the update
    # trigger, so archiving a row (active, archived_*) never touches the index.
    watched: tuple[str, ...]

    @property
    def source_view(self) -> str:
        return f"{self.name}_src"

    @property
    def shadow_tables(self) -> tuple[str, ...]:
        return tuple(f"{self.name}_{s}" for s in ("data", "idx", "docsize", "config"))

    @property
    def trigger_names(self) -> tuple[str, str, str]:
        return (f"{self.name}_insert", f"{self.name}_update", f"{self.name}_delete")

    def _values(self, t: str) -> list[str]:
        exprs = {"content": text_projection(t), "tool_name": f"{t}.tool_name"}
        return [exprs[c] for c in self.columns]

    def _where(self, t: str) -> str:
        return f" WHERE {self.row_filter.format(t=t)}" if self.row_filter else ""

    def view_ddl(self) -> str:
        cols = ", ".join(
            f"{v} AS {c}" for v, c in zip(self._values("m"), self.columns, strict=True)
        )
        where = self._where("m")
        return (
            f"CREATE VIEW {self.source_view} AS SELECT m.id AS id, {cols} FROM messages AS m{where}"
        )

    def table_ddl(self) -> str:
        cols = ", ".join(self.columns)
        return (
            f"CREATE VIRTUAL TABLE {self.name} USING fts5({cols}, "
            f"content='{self.source_view}', content_rowid='id', tokenize=\"{self.tokenize}\")"
        )

    def _insert(self, t: str) -> str:
        cols = ", ".join(self.columns)
        vals = ", ".join(self._values(t))
        return f"INSERT INTO {self.name}(rowid, {cols}) SELECT {t}.id, {vals}{self._where(t)};"

    def _delete(self, t: str) -> str:
        # The 'delete' command must receive exactly what was indexed; a 'delete' of a row
        # that was never indexed corrupts FTS5, hence the same row filter as the insert.
        cols = ", ".join(self.columns)
        vals = ", ".join(self._values(t))
        return (
            f"INSERT INTO {self.name}({self.name}, rowid, {cols}) "
            f"SELECT 'delete', {t}.id, {vals}{self._where(t)};"
        )

    def trigger_ddl(self) -> tuple[str, str, str]:
        ins, upd, dele = self.trigger_names
        watched = ", ".join(self.watched)
        return (
            f"CREATE TRIGGER {ins} AFTER INSERT ON messages BEGIN {self._insert('new')} END",
            f"CREATE TRIGGER {upd} AFTER UPDATE OF {watched} ON messages BEGIN "
            f"{self._delete('old')} {self._insert('new')} END",
            f"CREATE TRIGGER {dele} AFTER DELETE ON messages BEGIN {self._delete('old')} END",
        )


INDEXES: tuple[FtsIndex, ...] = (
    FtsIndex(
        name="messages_fts",
        tokenize="unicode61 remove_diacritics 2",
        columns=("content", "tool_name"),
        row_filter=None,
        watched=("content", "content_text", "tool_name"),
    ),
    FtsIndex(
        name="messages_fts_trigram",
        tokenize="trigram",
        columns=("content",),
        row_filter="{t}.role <> 'tool'",
        watched=("content", "content_text", "role"),
    ),
)

TRIGGER_NAMES: tuple[str, ...] = tuple(n for ix in INDEXES for n in ix.trigger_names)

# Names that belong to the derived indexes: kept out of MetaData and autogenerate.
DERIVED_NAMES: frozenset[str] = frozenset(
    n for ix in INDEXES for n in (ix.name, ix.source_view, *ix.shadow_tables)
)


def trigger_statements(indexes: Iterable[FtsIndex] = INDEXES) -> list[str]:
    """CREATE TRIGGER statements of the sync triggers."""
    return [s for ix in indexes for s in ix.trigger_ddl()]


def create_statements(indexes: Iterable[FtsIndex] = INDEXES) -> list[str]:
    """Every statement that creates the derived indexes (views, tables, triggers), in order.

    The caller backfills existing rows with ``'rebuild'`` afterwards where needed.
    """
    out: list[str] = []
    for ix in indexes:
        out += [ix.view_ddl(), ix.table_ddl(), *ix.trigger_ddl()]
    return out


def drop_statements(indexes: Iterable[FtsIndex] = INDEXES) -> list[str]:
    """Statements that remove the derived indexes: triggers first, then table and view."""
    out: list[str] = []
    for ix in indexes:
        out += [f"DROP TRIGGER IF EXISTS {t}" for t in ix.trigger_names]
        out += [f"DROP TABLE IF EXISTS {ix.name}", f"DROP VIEW IF EXISTS {ix.source_view}"]
    return out


# -- runtime: detach, check, rebuild ---------------------------------------------------
# These take a SQLAlchemy Connection inside the caller's transaction; the caller decides
# the transaction (a degrade is one BEGIN IMMEDIATE together with the replayed write).

STALE_KEY = "fts_stale"


def detach(conn: Connection, *, index: str | None, error: str) -> None:
    """Mark the index stale and drop every sync trigger, in the caller's transaction.

    ``DROP TRIGGER`` works even when the FTS tables themselves can no longer be dropped
    or rebuilt (structure record or config damaged), so degrading is always possible.
    """
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
    rows = conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'trigger'"))
    return {r[0] for r in rows} & set(TRIGGER_NAMES)


def integrity_errors(conn: Connection, indexes: Iterable[FtsIndex] = INDEXES) -> dict[str, str]:
    """Run each index's ``'integrity-check'``; returns {index: error} for the failing ones.

    The check runs with ``rank = 1``, which also compares the index with its content
    view, so it catches an index that silently fell behind the canonical rows. Without
    that argument FTS5 checks only the index's internal consistency: an index missing
    rows, or with a zeroed structure or a lost averages record, passes.
    """
    failures: dict[str, str] = {}
    for ix in indexes:
        try:
            with conn.begin_nested():
                conn.execute(
                    text(f"INSERT INTO {ix.name}({ix.name}, rank) VALUES ('integrity-check', 1)")
                )
        except DBAPIError as exc:
            failures[ix.name] = str(exc.orig).splitlines()[0] if exc.orig else str(exc)
    return failures


def reset_shadow_tables(conn: Connection, ix: FtsIndex) -> None:
    """Put an index's shadow tables back to the state of a new, empty index.

    When the structure record (id 10) or the config version is damaged, FTS5's
    constructor fails, and with it ``DROP TABLE`` and ``'rebuild'``. Writing the empty
    structure record and a valid version by hand makes the table constructible again.
    """
    data, idx, docsize, config = ix.shadow_tables
    conn.execute(text(f"INSERT OR REPLACE INTO {config} (k, v) VALUES ('version', 4)"))
    conn.execute(text(f"DELETE FROM {data}"))
    conn.execute(text(f"DELETE FROM {idx}"))
    conn.execute(text(f"DELETE FROM {docsize}"))
    conn.execute(text(f"INSERT INTO {data} (id, block) VALUES (1, x''), (10, x'00000000000000')"))


def recreate(conn: Connection, indexes: Iterable[FtsIndex] = INDEXES) -> None:
    """Recreate the indexes from the runtime DDL and refill them, in the caller's transaction.

    Order: make each table constructible, drop it and its view, create both anew, run
    ``'rebuild'`` from the canonical rows, verify with ``'integrity-check'``, and only
    then create the triggers. Any failure raises; the caller rolls the whole thing back.
    """
    present = {
        r[0] for r in conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'"))
    }
    for ix in indexes:
        for name in ix.trigger_names:
            conn.execute(text(f"DROP TRIGGER IF EXISTS {name}"))
        if set(ix.shadow_tables) <= present:
            reset_shadow_tables(conn, ix)
        conn.execute(text(f"DROP TABLE IF EXISTS {ix.name}"))
        conn.execute(text(f"DROP VIEW IF EXISTS {ix.source_view}"))
        conn.execute(text(ix.view_ddl()))
        conn.execute(text(ix.table_ddl()))
        conn.execute(text(f"INSERT INTO {ix.name}({ix.name}) VALUES ('rebuild')"))
    failures = integrity_errors(conn, indexes)
    if failures:
        raise RuntimeError(f"FTS integrity-check failed after rebuild: {failures}")
    for statement in trigger_statements(indexes):
        conn.execute(text(statement))
    conn.execute(text("DELETE FROM state_meta WHERE key = :k"), {"k": STALE_KEY})
