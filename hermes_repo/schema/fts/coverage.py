"""Coverage checks: does each index find what the canonical rows hold?

FTS5's 'integrity-check' (even with rank 1) and PRAGMA integrity_check pass when rows
of an index's `_idx` table are gone: the b-tree that leads a term lookup to its leaf
page. Every query for a term on such a page then finds nothing, silently (a word in
3,380 messages was found in 131). These checks only read; the doctor runs them on a
read-only connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .ddl import INDEXES, FtsIndex

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection

#: Rows probed per index by :func:`coverage_check` (spread evenly over the ids, plus the
#: newest ones, which sit in the newest, smallest segments).
PROBE_ROWS = 96
_PROBE_NEWEST = 8
_PROBE_TERMS_PER_ROW = 3
_PROBE_TERM_CHARS = 48
# FTS5 leaf page ids in the `_data` table: segid << 37 | height << 31 | pgno, height 0.
_SEGID_SHIFT = 37
_PGNO_MASK = (1 << 31) - 1
_TOMBSTONE_SEGID = 1 << 16  # ids of tombstone pages (contentless_delete) start here

RowReader = Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]]
"""Runs one read (qmark parameters) and returns its rows."""


@dataclass(frozen=True)
class CoverageProblem:
    """A way an index fails to find what the canonical rows hold."""

    index: str
    kind: str  # "documents", "term-btree" or "probe"
    detail: str

    def __str__(self) -> str:
        return f"{self.index}: {self.detail}"


def reader_for(conn: Connection) -> RowReader:
    """A :data:`RowReader` over a SQLAlchemy connection (in its current transaction)."""

    def rows(sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in conn.exec_driver_sql(sql, params).fetchall()]

    return rows


def _probe_terms(ix: FtsIndex, value: str) -> list[str]:
    """Phrases taken from a row's own indexed text that the index must find in it."""
    if "\x00" in value:
        value = value.split("\x00", 1)[0]
    if ix.tokenize.startswith("trigram"):
        # Any 3 characters of the text are one of its trigrams: one term lookup each
        # (a longer phrase costs a position-list merge per extra trigram).
        n = len(value)
        if n < 3:
            return []
        starts = sorted({0, (n - 3) // 2, n - 3})
        return [value[s : s + 3] for s in starts]
    # unicode61: a whitespace-separated word is a run of whole tokens (whitespace always
    # separates), so the phrase of its tokens appears in the row; it needs one letter
    # or digit to hold a token at all.
    words = [
        w for w in value.split() if len(w) <= _PROBE_TERM_CHARS and any(ch.isalnum() for ch in w)
    ]
    if not words:
        return []
    picks = sorted({0, len(words) // 2, len(words) - 1})
    return [words[i] for i in picks][:_PROBE_TERMS_PER_ROW]


def _sample_ids(rows: RowReader, ix: FtsIndex, sample: int) -> list[int]:
    bounds = rows(f"SELECT min(id), max(id) FROM {ix.source_view}", ())
    lo, hi = bounds[0] if bounds else (None, None)
    if lo is None or hi is None:
        return []
    spread = max(1, sample - _PROBE_NEWEST)
    targets = {lo + (hi - lo) * k // spread for k in range(spread + 1)}
    ids: set[int] = set()
    for target in sorted(targets):
        found = rows(
            f"SELECT id FROM {ix.source_view} WHERE id >= ? ORDER BY id LIMIT 1", (target,)
        )
        if found:
            ids.add(int(found[0][0]))
    newest = rows(f"SELECT id FROM {ix.source_view} ORDER BY id DESC LIMIT ?", (_PROBE_NEWEST,))
    ids.update(int(r[0]) for r in newest)
    return sorted(ids)


def _term_btree_gaps(rows: RowReader, ix: FtsIndex) -> list[tuple[int, int]]:
    """Leaf pages that hold terms but have no entry in the index's ``_idx`` b-tree.

    FTS5 writes one ``_idx`` row (segid, first term, pgno << 1 | dlidx flag) for every
    leaf page on which a term starts, and looks terms up only through those rows; a page
    that starts a term (its page-index offset, header bytes 2-3, is before its end) and
    has no row is unreachable.
    """
    data, idx, _docsize, _config = ix.shadow_tables
    indexed = {
        (int(segid), int(pgno) >> 1) for segid, pgno in rows(f"SELECT segid, pgno FROM {idx}", ())
    }
    first_leaf = 1 << _SEGID_SHIFT
    gaps: list[tuple[int, int]] = []
    for rowid, head, size in rows(
        f"SELECT id, substr(block, 1, 4), length(block) FROM {data} WHERE id >= ?",
        (first_leaf,),
    ):
        segid, rest = int(rowid) >> _SEGID_SHIFT, int(rowid) & ((1 << _SEGID_SHIFT) - 1)
        if segid >= _TOMBSTONE_SEGID or rest > _PGNO_MASK:
            continue  # a doclist-index or tombstone page, not a leaf
        head = bytes(head)
        if len(head) < 4:
            continue  # too short to be a leaf: integrity-check reports it
        page_index_at = (head[2] << 8) | head[3]
        if page_index_at < int(size) and (segid, rest) not in indexed:
            gaps.append((segid, rest))
    return gaps


def coverage_check(
    rows: RowReader | Connection,
    *,
    indexes: Iterable[FtsIndex] = INDEXES,
    sample: int = PROBE_ROWS,
) -> list[CoverageProblem]:
    """Check that each index finds what the canonical rows hold; [] when it does.

    Three read-only checks per index, for damage FTS5's own checks do not see:

    * documents: the index holds as many documents as its view has rows;
    * term b-tree: every leaf page on which a term starts is reachable from ``_idx``;
    * probe: a deterministic sample of rows (spread over the ids, and the newest) is
      each found, by rowid, by phrases taken from the row's own indexed text.

    ``rows`` runs one read and returns its rows (the doctor passes its read-only
    connection's); a SQLAlchemy connection is also accepted. A driver error while
    probing propagates: the caller decides what an unreadable index means.
    """
    # A reader is callable, a connection is not: no SQLAlchemy needed to tell them apart.
    read = rows if callable(rows) else reader_for(rows)
    problems: list[CoverageProblem] = []
    for ix in indexes:
        docsize = ix.shadow_tables[2]
        indexed = int(read(f"SELECT count(*) FROM {docsize}", ())[0][0])
        covered = int(read(f"SELECT count(*) FROM {ix.source_view}", ())[0][0])
        if indexed != covered:
            problems.append(
                CoverageProblem(
                    ix.name,
                    "documents",
                    f"holds {indexed} documents for the {covered} rows it covers",
                )
            )
        gaps = _term_btree_gaps(read, ix)
        if gaps:
            shown = ", ".join(f"segment {s} page {p}" for s, p in gaps[:3])
            problems.append(
                CoverageProblem(
                    ix.name,
                    "term-btree",
                    f"{len(gaps)} leaf page(s) holding terms are missing from "
                    f"{ix.shadow_tables[1]} ({shown}): every term on them is unfindable",
                )
            )
        missed: list[int] = []
        probed = 0
        for rowid in _sample_ids(read, ix, sample):
            # As bytes: text another tool wrote in another encoding would fail the read
            # (the values check names it), and it cannot be asked for anyway.
            value = read(
                f"SELECT CAST(content AS BLOB) FROM {ix.source_view} WHERE id = ?", (rowid,)
            )
            if not value or not isinstance(value[0][0], bytes):
                continue
            try:
                content = value[0][0].decode("utf-8")
            except UnicodeDecodeError:
                continue
            for term in _probe_terms(ix, content):
                probed += 1
                found = read(
                    f"SELECT count(*) FROM {ix.name} WHERE {ix.name} MATCH ? AND rowid = ?",
                    ('"' + term.replace('"', '""') + '"', rowid),
                )
                if int(found[0][0]) != 1:
                    missed.append(rowid)
                    break
        if missed:
            problems.append(
                CoverageProblem(
                    ix.name,
                    "probe",
                    f"{len(missed)} of the sampled messages are not found by their own text "
                    f"(message ids {', '.join(map(str, missed[:5]))})",
                )
            )
    return problems
