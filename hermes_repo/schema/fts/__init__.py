"""The full-text indexes as data: one definition for the migrations and the runtime.

Two external-content FTS5 indexes sit over ``messages``:

* ``messages_fts`` (unicode61, diacritics removed): word search with bm25, over every
  row's text (with the text of its tool calls) and tool name.
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
(stored in ``content_text`` when the row is written), followed by its tool calls'
function names and arguments (``calls_text``, also written with the row), cut at the
index's cap. The triggers write the same projection from ``new.*`` / ``old.*``; all
three are rendered from one template (:mod:`.ddl`), so ``'rebuild'``, ``'delete'`` and
the triggers can never see different text (which would make the index drift and its
integrity check fail).

One module per job:

* :mod:`.projection`: what an index reads from a row (caps, CJK);
* :mod:`.ddl`: the indexes as data and their CREATE/DROP statements;
* :mod:`.stale`: the stale marker and detaching the sync triggers;
* :mod:`.integrity`: integrity checks and recreating the indexes (the guarded rebuild
  that decides when is :mod:`hermes_repo.maintenance.fts_rebuild`);
* :mod:`.coverage`: read-only checks that each index finds what the rows hold.
"""

from __future__ import annotations

from .coverage import PROBE_ROWS, CoverageProblem, RowReader, coverage_check, reader_for
from .ddl import (
    DERIVED_NAMES,
    INDEXES,
    LONG_ROW_INDEXES,
    TRIGGER_NAMES,
    FtsIndex,
    create_statements,
    drop_statements,
    trigger_statements,
)
from .integrity import integrity_errors, recreate, reset_shadow_tables
from .projection import (
    CJK_RANGES,
    TRIGRAM_CAP,
    WORD_CAP,
    has_cjk,
    indexed_projection,
    long_row_condition,
    text_projection,
)
from .stale import STALE_KEY, detach, index_named_in, present_triggers, stale_marker

__all__ = [
    "CJK_RANGES",
    "DERIVED_NAMES",
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
