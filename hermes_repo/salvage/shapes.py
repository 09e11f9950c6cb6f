"""Table shapes: a table's columns as stored in its records.

A decoded row is checked and normalised against a shape; a row found on a page that no
readable b-tree reaches goes back to the canonical table whose shape it fits, never
dropped in silence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Integer, Table

from ..engine import Driver
from ..models import (
    ROLES,
    langgraph_blobs_table,
    langgraph_checkpoints_table,
    langgraph_writes_table,
    messages_table,
    sessions_table,
    state_meta_table,
)
from ..schema.tables import CANONICAL_TABLES

__all__ = [
    "CHECKPOINT_TABLES",
    "MODEL_TABLES",
    "SALVAGED_TABLES",
    "Column",
    "Shape",
    "key_column",
    "key_columns",
    "match_canonical",
    "model_shape",
    "quote",
    "resembles",
    "schema_shape",
]

#: LangGraph's checkpoint tables (hermes_repo.integrations.langgraph): a thread's
#: memory, salvaged like the canonical tables when the source has them (revision 0006).
CHECKPOINT_TABLES = ("langgraph_checkpoints", "langgraph_blobs", "langgraph_writes")
#: Every table a salvage reads rows of and writes into the new store.
SALVAGED_TABLES = (*CANONICAL_TABLES, *CHECKPOINT_TABLES)

#: This version's definition of each salvaged table.
MODEL_TABLES: dict[str, Table] = {
    "sessions": sessions_table,
    "messages": messages_table,
    "state_meta": state_meta_table,
    "langgraph_checkpoints": langgraph_checkpoints_table,
    "langgraph_blobs": langgraph_blobs_table,
    "langgraph_writes": langgraph_writes_table,
}
# Values a CHECK constraint allows; used to tell rows from garbage when assigning by shape.
_ALLOWED: dict[str, dict[str, tuple[Any, ...]]] = {
    "messages": {"role": ROLES, "active": (0, 1), "display_only": (0, 1)},
}


@dataclass(frozen=True)
class Column:
    """One column of a shape."""

    name: str
    affinity: str  # INTEGER, REAL, TEXT, BLOB or NUMERIC (SQLite's affinity rules)
    notnull: bool
    rowid_alias: bool


@dataclass(frozen=True)
class Shape:
    """A table's columns as stored in its records, to check and normalise decoded rows."""

    name: str
    columns: tuple[Column, ...]
    allowed: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def normalise(self, rowid: int, values: Sequence[Any]) -> tuple[Any, ...] | None:
        """The row's column values, or None when it does not fit this table.

        The rowid-alias column is stored as NULL (its value is the rowid), and SQLite
        stores integral REAL values as integers on disk: both are undone here, so a row
        from the scanner equals the same row read through SQL.
        """
        if len(values) != len(self.columns):
            return None
        out = list(values)
        for i, col in enumerate(self.columns):
            v = out[i]
            if col.rowid_alias:
                if v is not None:
                    return None
                out[i] = rowid
                continue
            if v is None:
                if col.notnull:
                    return None
                continue
            if col.affinity in ("INTEGER", "REAL"):
                if isinstance(v, int) and col.affinity == "REAL":
                    out[i] = float(v)
                elif not isinstance(v, int | float):
                    return None
            elif col.affinity == "TEXT" and not isinstance(v, str):
                return None
            allowed = self.allowed.get(col.name)
            if allowed is not None and out[i] not in allowed:
                return None
        return tuple(out)


def _affinity(declared: str) -> str:
    t = declared.upper()
    if "INT" in t:
        return "INTEGER"
    if "CHAR" in t or "CLOB" in t or "TEXT" in t:
        return "TEXT"
    if not t or "BLOB" in t:
        return "BLOB"
    if "REAL" in t or "FLOA" in t or "DOUB" in t:
        return "REAL"
    return "NUMERIC"


def model_shape(name: str) -> Shape:
    """The shape of canonical table ``name`` as this version defines it."""
    table = MODEL_TABLES[name]
    pk = list(table.primary_key.columns)
    cols = []
    for c in table.columns:
        declared = "INTEGER" if isinstance(c.type, Integer) else str(c.type.compile())
        alias = len(pk) == 1 and pk[0] is c and isinstance(c.type, Integer)
        cols.append(Column(c.name, _affinity(declared), not c.nullable, alias))
    return Shape(name, tuple(cols), _ALLOWED.get(name, {}))


def schema_shape(driver: Driver, name: str, sql: str) -> Shape | None:
    """The shape declared by a ``CREATE TABLE`` statement, parsed by SQLite itself."""
    con = driver.module.connect(":memory:")
    try:
        con.execute(sql)
        info = con.execute(f"PRAGMA table_info({quote(name)})").fetchall()
    except driver.module.Error:
        return None
    finally:
        con.close()
    if not info:
        return None
    pks = [r for r in info if r[5]]
    without_rowid = "WITHOUT ROWID" in " ".join(sql.upper().split())
    cols = tuple(
        Column(
            r[1],
            _affinity(r[2] or ""),
            bool(r[3]),
            len(pks) == 1 and r[5] == 1 and (r[2] or "").upper() == "INTEGER" and not without_rowid,
        )
        for r in info
    )
    return Shape(name, cols, _ALLOWED.get(name, {}))


def quote(name: str) -> str:
    """``name`` as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def key_column(name: str) -> str:
    """The (first) primary-key column of salvaged table ``name``."""
    return key_columns(name)[0]


def key_columns(name: str) -> list[str]:
    """The primary-key columns of salvaged table ``name``: rows are de-duplicated on them
    (a checkpoint table's key is natural and made of several columns)."""
    return [c.name for c in MODEL_TABLES[name].primary_key.columns]


def match_canonical(
    shapes: dict[str, Shape], rowid: int, values: Sequence[Any]
) -> tuple[str, tuple[Any, ...]] | None:
    """The first salvaged table (of ``shapes``) whose shape the row fits, with the
    normalised row."""
    for name in SALVAGED_TABLES:
        if name not in shapes:
            continue
        shape_row = shapes[name].normalise(rowid, values)
        if shape_row is not None:
            return name, shape_row
    return None


def resembles(others: Sequence[Shape], rowid: int, values: Sequence[Any]) -> str:
    """What a row that fits no canonical table looks like: the tables whose shape it
    fits, or its column count."""
    # Several tables can share a shape (two FTS shadow tables do): name them all.
    like = " or ".join(s.name for s in others if s.normalise(rowid, values) is not None)
    return like or f"{len(values)} columns"
