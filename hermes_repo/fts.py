"""The full-text indexes as data: one definition for the migrations and the runtime.

Two external-content FTS5 indexes sit over ``messages``:

* ``messages_fts`` (unicode61, diacritics removed): word search with bm25, over every
  row's text and tool name.
* ``messages_fts_trigram`` (trigram): substring and CJK search. It covers the text of
  system, user and assistant rows only. Tool output is the bulk of an agent's transcript
  and a trigram index costs ~2.4x the text it covers, so tool rows are left to the word
  index (and to the LIKE path for 1-2 character queries).

Each index reads its rows through a view (``*_src``) that projects a message to the
indexed text: for multimodal content it joins the ``text`` parts. The triggers write the
same projection from ``new.*`` / ``old.*``; all three are rendered from one template
below, so ``'rebuild'``, ``'delete'`` and the triggers can never see different text
(which would make the index drift and its integrity check fail).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "INDEXES",
    "TRIGGER_NAMES",
    "FtsIndex",
    "create_statements",
    "drop_statements",
    "text_projection",
    "trigger_statements",
]


def text_projection(t: str) -> str:
    # json_each only ever sees a valid JSON array (nested CASE is evaluated lazily, unlike
    # AND), so a malformed value can never make a trigger, and with it a write, fail.
    return (
        f"CASE WHEN {t}.content_parts IS NULL THEN {t}.content ELSE ("
        "SELECT group_concat(CASE WHEN p.type = 'object' "
        "THEN json_extract(p.value, '$.text') END, ' ') "
        f"FROM json_each(CASE WHEN json_valid({t}.content_parts) THEN "
        f"CASE WHEN json_type({t}.content_parts) = 'array' THEN {t}.content_parts "
        "ELSE '[]' END ELSE '[]' END) AS p) END"
    )


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
        watched=("content", "content_parts", "tool_name"),
    ),
    FtsIndex(
        name="messages_fts_trigram",
        tokenize="trigram",
        columns=("content",),
        row_filter="{t}.role <> 'tool'",
        watched=("content", "content_parts", "role"),
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
