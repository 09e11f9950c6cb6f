"""The LangGraph checkpoint rows of a store copy: checkpoints, channel values, pending writes.

A LangGraph thread's memory (see :mod:`hermes_repo.integrations.langgraph`) lives in the
three ``langgraph_*`` tables, keyed by their natural primary keys (the session, the
checkpoint namespace and the checkpoint id; a channel's version; a task's write index).
They are copied like the messages: each table is walked in key order from a cursor, one
batch read in its own read transaction and written in its own write transaction, so
memory holds one batch and a run killed between two batches leaves a prefix that the
next run compares and skips.

A row is recognised by its key: a key the target lacks is inserted, a key whose other
columns differ is updated (a ``put`` that wrote the same checkpoint again), an equal row
is left alone. A target row whose key the source lacks is refused before anything is
written (:func:`refuse_foreign_checkpoints`), as another store's messages are: unlike
messages, checkpoints are deleted by the framework (``delete_thread``, ``prune``,
``delete_for_runs``), but such a row may as well be a checkpoint LangGraph wrote into
the target after an earlier copy, and a copy never deletes what it cannot tell apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

from sqlalchemy import Table, and_, bindparam, func, select, tuple_, update
from sqlalchemy.engine import Connection

from ..backend import backend_of
from ..core import WriteCore
from ..errors import CopyConflictError, CopyError
from ..models import langgraph_blobs_table, langgraph_checkpoints_table, langgraph_writes_table
from .copy_rows import TableTally, _in_unit, _insert_rows, _rows, _wide

__all__ = [
    "CHECKPOINT_TABLES",
    "checkpoint_checksums",
    "checkpoint_row_count",
    "copy_checkpoints",
    "refuse_foreign_checkpoints",
]

#: The tables of LangGraph's checkpoints, in the order they are copied.
CHECKPOINT_TABLES = ("langgraph_checkpoints", "langgraph_blobs", "langgraph_writes")

_TABLES: dict[str, Table] = {
    t.name: _wide(t)
    for t in (langgraph_checkpoints_table, langgraph_blobs_table, langgraph_writes_table)
}
# Keys looked up in the target per statement: 5 key columns x 500 rows of bound
# parameters stay far below SQLite's limit (32766) whatever the batch size.
_LOOKUP = 500
_NUL = "\x00"

Row = dict[str, Any]
Key = tuple[Any, ...]


def _pk(table: Table) -> list[Any]:
    return list(table.primary_key.columns)


def _key(table: Table, row: Row) -> Key:
    return tuple(row[c.name] for c in _pk(table))


def _batches(
    end: WriteCore, table: Table, size: int, *, keys_only: bool = False
) -> Iterable[list[Row]]:
    """``table``'s rows (or only their keys) in primary-key order, one read transaction
    per batch."""
    pk = _pk(table)
    after: Key | None = None
    while True:
        stmt = (select(*pk) if keys_only else select(table)).order_by(*pk).limit(size)
        if after is not None:
            stmt = stmt.where(tuple_(*pk) > tuple_(*after))
        rows = end.read(partial(_rows, stmt=stmt))
        if not rows:
            return
        yield rows
        after = _key(table, rows[-1])


def _lookup(conn: Connection, table: Table, keys: Sequence[Key], narrow: bool) -> dict[Key, Row]:
    """The rows of ``table`` among ``keys``: each key column ``IN`` the batch's values (a
    superset the primary-key index answers on both dialects), kept when the whole key is
    wanted. ``narrow`` reads the key columns only."""
    pk = _pk(table)
    wanted = set(keys)
    found: dict[Key, Row] = {}
    cols = pk if narrow else [table]
    for start in range(0, len(keys), _LOOKUP):
        chunk = keys[start : start + _LOOKUP]
        conds = [c.in_(sorted({k[i] for k in chunk})) for i, c in enumerate(pk)]
        for row in _rows(conn, select(*cols).where(and_(*conds))):
            key = _key(table, row)
            if key in wanted:
                found[key] = row
    return found


def _check_text(conn: Connection, table: Table, rows: Sequence[Row]) -> None:
    if not backend_of(conn).refuses_nul_text:
        return
    for row in rows:
        for column, value in row.items():
            if isinstance(value, str) and _NUL in value:
                raise CopyError(
                    f"{table.name} row {_key(table, row)!r}: column {column} holds a NUL "
                    "character (U+0000), which PostgreSQL text cannot store; nothing of "
                    "this batch was written. Delete that thread in the source (or copy "
                    "into an SQLite store instead), then run the copy again: it resumes"
                )


def _key_match(table: Table) -> Any:
    return and_(*(c == bindparam(f"k_{c.name}") for c in _pk(table)))


def _key_params(table: Table, key: Key) -> Row:
    return {f"k_{c.name}": v for c, v in zip(_pk(table), key, strict=True)}


def _write(table: Table, conn: Connection, rows: list[Row]) -> TableTally:
    """Insert the batch's rows the target lacks, update those that differ."""
    tally, fresh = TableTally(), []
    have = _lookup(conn, table, [_key(table, r) for r in rows], narrow=False)
    for row in rows:
        key = _key(table, row)
        old = have.get(key)
        if old is None:
            fresh.append(row)
            continue
        changed = {k: v for k, v in row.items() if old.get(k) != v}
        if changed:
            conn.execute(
                update(table).where(_key_match(table)).values(changed),
                _key_params(table, key),
            )
            tally.updated += 1
        else:
            tally.unchanged += 1
    _check_text(conn, table, fresh)
    _insert_rows(conn, table, fresh)
    tally.inserted = len(fresh)
    return tally


def refuse_foreign_checkpoints(source: WriteCore, target: WriteCore, size: int) -> None:
    """Raise :class:`CopyConflictError` when the target holds a checkpoint row (a
    checkpoint, a channel value, a pending write) whose key the source lacks.

    Run before anything is written. The target's sessions are the source's (checked
    first), so such a row is a checkpoint the source deleted since an earlier copy, or
    one LangGraph wrote into the target since: either way the copy cannot tell which, and
    deletes nothing. An empty target costs three one-row reads.
    """
    for name in CHECKPOINT_TABLES:
        table = _TABLES[name]
        # Keys only: the values are compared by the copy's own pass.
        for rows in _batches(target, table, size, keys_only=True):
            keys = [_key(table, r) for r in rows]
            present = source.read(partial(_lookup, table=table, keys=keys, narrow=True))
            gone = next((k for k in keys if k not in present), None)
            if gone is not None:
                thread = gone[0]
                raise CopyConflictError(
                    f"the target's {name} holds {dict(zip(_names(table), gone, strict=True))!r}, "
                    f"which the source does not have: the source deleted that checkpoint "
                    f"since an earlier copy (delete_thread, prune), or LangGraph wrote it "
                    f"into the target since. Nothing was written. If the target's "
                    f"checkpoints of session {thread!r} are not wanted, delete the thread "
                    f"there through the saver (HermesSaver(target).delete_thread) and run "
                    f"the copy again, or copy into an empty store"
                )


def _names(table: Table) -> list[str]:
    return [c.name for c in _pk(table)]


def copy_checkpoints(
    source: WriteCore,
    target: WriteCore,
    size: int,
    on_batch: Callable[[int], None],
) -> dict[str, TableTally]:
    """Every row of the three checkpoint tables, one transaction per batch."""
    tallies: dict[str, TableTally] = {}
    for name in CHECKPOINT_TABLES:
        table = _TABLES[name]
        tally = TableTally()
        for rows in _batches(source, table, size):
            tally.add(target.write(partial(_in_unit, partial(_write, table), rows)))
            on_batch(len(rows))
        tallies[name] = tally
    return tallies


def checkpoint_row_count(conn: Connection) -> int:
    """Rows of the three checkpoint tables together (for the copy's progress)."""
    return sum(
        int(conn.execute(select(func.count()).select_from(_TABLES[n])).scalar_one())
        for n in CHECKPOINT_TABLES
    )


def _int(value: Any) -> int:
    return 0 if value is None else int(value)


def checkpoint_checksums(conn: Connection) -> dict[str, dict[str, int]]:
    """Counts and byte totals of the checkpoint tables, the same on any dialect.

    ``length`` of a BLOB (SQLite) and of a BYTEA (PostgreSQL) is its size in bytes, so
    a value cut short or lost on the way shows in the sums.
    """
    ck, bl, wr = (_TABLES[n].c for n in CHECKPOINT_TABLES)
    checkpoints = conn.execute(
        select(
            func.count(),
            func.count(ck.parent_checkpoint_id),
            func.sum(func.length(ck.checkpoint)),
            func.sum(func.length(ck.metadata)),
        )
    ).one()
    blobs = conn.execute(
        select(func.count(), func.count(bl.blob), func.sum(func.length(bl.blob)))
    ).one()
    writes = conn.execute(
        select(func.count(), func.sum(wr.idx), func.sum(func.length(wr.blob)))
    ).one()
    return {
        "langgraph_checkpoints": dict(
            zip(
                ("count", "with_parent", "checkpoint_bytes", "metadata_bytes"),
                map(_int, checkpoints),
                strict=True,
            )
        ),
        "langgraph_blobs": dict(
            zip(("count", "with_value", "value_bytes"), map(_int, blobs), strict=True)
        ),
        "langgraph_writes": dict(
            zip(("count", "sum_idx", "value_bytes"), map(_int, writes), strict=True)
        ),
    }
