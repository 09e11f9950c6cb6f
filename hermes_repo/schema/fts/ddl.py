"""The full-text indexes as data, and the DDL that creates and drops them.

One definition for the migrations and the runtime: each index reads its rows through
a view (``*_src``) and is kept in sync by triggers, all rendered from one template.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .. import pg_search
from .projection import _CJK_GLOB, TRIGRAM_CAP, WORD_CAP, indexed_projection, long_row_condition


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
    # The most characters of one row's text the index takes (see WORD_CAP).
    cap: int

    @property
    def long_rows_index(self) -> str:
        """The partial b-tree index listing the rows longer than this index's cap."""
        return f"ix_messages_over_{self.name.removeprefix('messages_')}_cap"

    def long_rows_ddl(self) -> str:
        """CREATE INDEX of :attr:`long_rows_index`."""
        where = long_row_condition("messages", self.cap).replace("messages.", "")
        return f"CREATE INDEX {self.long_rows_index} ON messages (id) WHERE {where}"

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
        exprs = {"content": indexed_projection(t, self.cap), "tool_name": f"{t}.tool_name"}
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


_TRIGRAM_TEXT = indexed_projection("{t}", TRIGRAM_CAP)

INDEXES: tuple[FtsIndex, ...] = (
    FtsIndex(
        name="messages_fts",
        tokenize="unicode61 remove_diacritics 2",
        columns=("content", "tool_name"),
        row_filter=None,
        watched=("content", "content_text", "calls_text", "tool_name"),
        cap=WORD_CAP,
    ),
    FtsIndex(
        name="messages_fts_trigram",
        tokenize="trigram",
        columns=("content",),
        # The GLOB reads the capped text: a tool row is in the index exactly when the
        # part of it the index would hold has CJK. Text whose UTF-8 is as long as its
        # characters is ASCII and cannot: that test first spares most tool output the
        # GLOB, which re-reads the character ranges at every character (the bulk of an
        # import of large tool outputs was this check).
        row_filter=(
            "({t}.role <> 'tool' OR ("
            + f"length(CAST({_TRIGRAM_TEXT} AS BLOB)) <> length({_TRIGRAM_TEXT})"
            + f" AND {_TRIGRAM_TEXT} GLOB '{_CJK_GLOB}'))"
        ),
        watched=("content", "content_text", "calls_text", "role"),
        cap=TRIGRAM_CAP,
    ),
)

#: CREATE INDEX statements of the partial indexes over rows longer than a cap.
LONG_ROW_INDEXES: tuple[str, ...] = tuple(ix.long_rows_ddl() for ix in INDEXES)

TRIGGER_NAMES: tuple[str, ...] = tuple(n for ix in INDEXES for n in ix.trigger_names)

# Names that belong to the derived indexes: kept out of MetaData and autogenerate.
# The PostgreSQL search objects (a generated column and its indexes) are derived too.
DERIVED_NAMES: frozenset[str] = (
    frozenset(
        n
        for ix in INDEXES
        for n in (ix.name, ix.source_view, ix.long_rows_index, *ix.shadow_tables)
    )
    | pg_search.DERIVED_NAMES
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
