"""The full-text indexes as data: one definition for the migrations and the runtime.

Two external-content FTS5 indexes sit over ``messages``:

* ``messages_fts`` (unicode61, diacritics removed): word search with bm25, over every
  row's text and tool name.
* ``messages_fts_trigram`` (trigram): substring and CJK search. It covers the text of
  system, user and assistant rows, and of tool rows that hold CJK text. Tool output is
  the bulk of an agent's transcript and a trigram index costs ~2.4x the text it covers,
  so tool rows without CJK are left to the word index (which finds their words); a tool
  row with CJK needs the trigram index, because unicode61 makes one token of a whole CJK
  run and no word query finds a part of it.

Each index takes at most a fixed number of characters from one row (:data:`WORD_CAP`,
:data:`TRIGRAM_CAP`): indexing is linear at best (trigram on varied text is superlinear)
and runs inside the writer's transaction, so an uncapped 50 MB message held the write
lock for over a minute. Text beyond a cap stays findable: a partial b-tree index lists
the rows longer than each cap, and search scans just those rows with LIKE.

Each index reads its rows through a view (``*_src``) that projects a message to the
indexed text: its text content, or for multimodal content the joined ``text`` parts
(stored in ``content_text`` when the row is written), cut at the index's cap. The
triggers write the
same projection from ``new.*`` / ``old.*``; all three are rendered from one template
below, so ``'rebuild'``, ``'delete'`` and the triggers can never see different text
(which would make the index drift and its integrity check fail).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

__all__ = [
    "CJK_RANGES",
    "INDEXES",
    "LONG_ROW_INDEXES",
    "PROBE_ROWS",
    "STALE_KEY",
    "TRIGGER_NAMES",
    "TRIGRAM_CAP",
    "WORD_CAP",
    "CoverageProblem",
    "FtsIndex",
    "RowReader",
    "coverage_check",
    "create_statements",
    "detach",
    "drop_statements",
    "has_cjk",
    "index_named_in",
    "indexed_projection",
    "integrity_errors",
    "long_row_condition",
    "present_triggers",
    "reader_for",
    "recreate",
    "reset_shadow_tables",
    "stale_marker",
    "text_projection",
    "trigger_statements",
]


def text_projection(t: str) -> str:
    """The searchable text of a row ``t``: its text content, or its multimodal text parts."""
    return f"coalesce({t}.content, {t}.content_text)"


def indexed_projection(t: str, cap: int) -> str:
    """What an index with ``cap`` takes from row ``t``: the first ``cap`` characters."""
    return f"substr({text_projection(t)}, 1, {int(cap)})"


def long_row_condition(t: str, cap: int) -> str:
    """True for a row of ``t`` whose text is longer than ``cap``: the rows a search must
    also scan, as an index with that cap holds only their beginning.

    The text is that of the partial index over those rows: a query must repeat it
    verbatim for SQLite to use the index.
    """
    return f"length({text_projection(t)}) > {int(cap)}"


# Measured on the benchmark corpus (benchmarks/bench_big_message.py, docs/performance.md):
# unicode61 indexes 15-30 M characters/s whatever the text, trigram 0.3-0.6 M/s on varied
# text (random CJK, base64) and ~10 M/s on prose. These caps bound the index work of one
# row to well under a second on the worst text we tried.
WORD_CAP = 1_048_576
TRIGRAM_CAP = 131_072

#: Code point ranges of the scripts unicode61 cannot split into words (ideographs,
#: kana, hangul): the trigram index covers tool rows that hold any of them, and search
#: routes a query holding any of them to the trigram index.
CJK_RANGES: tuple[tuple[int, int], ...] = (
    (0x3040, 0x30FF),  # hiragana, katakana
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xAC00, 0xD7AF),  # hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width katakana
    (0x20000, 0x2FA1F),  # CJK extensions B-F, compatibility supplement
)
_CJK_RE = re.compile("[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]")
# The same set as a GLOB pattern: SQLite compares GLOB ranges by code point.
_CJK_GLOB = "*[" + "".join(f"{chr(a)}-{chr(b)}" for a, b in CJK_RANGES) + "]*"


def has_cjk(value: str) -> bool:
    """True when ``value`` holds a character of :data:`CJK_RANGES`."""
    return _CJK_RE.search(value) is not None


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


INDEXES: tuple[FtsIndex, ...] = (
    FtsIndex(
        name="messages_fts",
        tokenize="unicode61 remove_diacritics 2",
        columns=("content", "tool_name"),
        row_filter=None,
        watched=("content", "content_text", "tool_name"),
        cap=WORD_CAP,
    ),
    FtsIndex(
        name="messages_fts_trigram",
        tokenize="trigram",
        columns=("content",),
        # The GLOB reads the capped text: a tool row is in the index exactly when the
        # part of it the index would hold has CJK.
        row_filter=(
            "({t}.role <> 'tool' OR "
            + indexed_projection("{t}", TRIGRAM_CAP)
            + f" GLOB '{_CJK_GLOB}')"
        ),
        watched=("content", "content_text", "role"),
        cap=TRIGRAM_CAP,
    ),
)

#: CREATE INDEX statements of the partial indexes over rows longer than a cap.
LONG_ROW_INDEXES: tuple[str, ...] = tuple(ix.long_rows_ddl() for ix in INDEXES)

TRIGGER_NAMES: tuple[str, ...] = tuple(n for ix in INDEXES for n in ix.trigger_names)

# Names that belong to the derived indexes: kept out of MetaData and autogenerate.
DERIVED_NAMES: frozenset[str] = frozenset(
    n for ix in INDEXES for n in (ix.name, ix.source_view, ix.long_rows_index, *ix.shadow_tables)
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


# -- coverage: does the index find what the table holds? ---------------------------------
# FTS5's 'integrity-check' (even with rank 1) and PRAGMA integrity_check pass when rows
# of an index's `_idx` table are gone: the b-tree that leads a term lookup to its leaf
# page. Every query for a term on such a page then finds nothing, silently (a word in
# 3,380 messages was found in 131). These checks only read; the doctor runs them on a
# read-only connection.

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
    read = reader_for(rows) if isinstance(rows, Connection) else rows
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
            value = read(f"SELECT content FROM {ix.source_view} WHERE id = ?", (rowid,))
            if not value or not isinstance(value[0][0], str):
                continue
            for term in _probe_terms(ix, value[0][0]):
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
