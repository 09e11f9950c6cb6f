"""Keeping the FTS5 indexes compact as the store is written: a bounded merge after writes.

Every write transaction that fires the sync triggers leaves FTS5 a new small segment
(b-tree) per index. FTS5's automerge merges them back only by as much work as each
write itself did, so a store written one message (or one flush) per transaction carries
many small segments, and every MATCH probes each of them: on a store written like an
agent writes, a bounded-count probe cost 5x what it cost on the same index merged.

So after every :data:`MERGE_EVERY` messages a store commits, the write core runs
``INSERT INTO ix(ix, rank) VALUES('merge', MERGE_PAGES)`` on each index, in a short
transaction of its own after the caller's write committed (:meth:`run` on the core's
cursor; the core decides when and what a failure means). ``'merge'`` with a positive
page count does at most about that many pages of merging and nothing at all when no
level of the index has enough segments to merge, so it is bounded, never a rebuild.
Hermes Agent's own store runs a full ``'optimize'`` every 1,000 writes instead, whose
cost grows with the index (a 112 ms worst insert on 20,000 documents).
"""

from __future__ import annotations

from typing import Any

from .ddl import INDEXES
from .stale import STALE_KEY

__all__ = [
    "MERGE_EVERY",
    "MERGE_PAGES",
    "MERGE_STATEMENTS",
    "MergeCadence",
    "merge_statements",
    "run",
]

#: Messages committed between two merges. Measured on a 10,000-message store written
#: one message per transaction: 50 messages and 8 pages left the word index 10 segments
#: where FTS5 alone left 17, for 0.5-2 ms of CPU a merge (an append's CPU the same
#: within the noise); 100 / 16 and 100 / 64 left the same segments with pauses up to
#: twice as long (docs/performance.md, "Race").
MERGE_EVERY = 50
#: Pages (of FTS5's 4 KB) one merge of one index may write at most. A positive count
#: only finishes merges FTS5 has started and merges a level holding 4 segments or more
#: (its ``usermerge``): after a batch of 1,000 messages in one transaction, whose
#: automerge left at most 3 a level, 128 pages did no more than 8.
MERGE_PAGES = 8


def merge_statements(pages: int) -> tuple[str, ...]:
    """The merge of each index, at most ``pages`` pages each, in the order they run.

    Each runs only while the index is live: a detached index (the stale marker set with
    the triggers dropped, see :mod:`.stale`) may be damaged and is left alone until a
    rebuild. The marker is read in the merge's own statement, so the check and the
    merge see the same transaction.
    """
    return tuple(
        f"INSERT INTO {ix.name}({ix.name}, rank) SELECT 'merge', {int(pages)} "
        f"WHERE NOT EXISTS (SELECT 1 FROM state_meta WHERE key = '{STALE_KEY}')"
        for ix in INDEXES
    )


#: The merge the write core runs.
MERGE_STATEMENTS: tuple[str, ...] = merge_statements(MERGE_PAGES)


class MergeCadence:
    """One store's count of messages written and when its next merge is due.

    A merge that could not run (another writer held the lock) stays due: the next
    committed write that adds messages tries again.
    """

    __slots__ = ("_due_at", "_written")

    def __init__(self) -> None:
        self._written = 0
        self._due_at = MERGE_EVERY

    @property
    def written(self) -> int:
        """Messages this store committed since it was opened."""
        return self._written

    def add(self, messages: int) -> bool:
        """Count ``messages`` committed; True when a merge is due. A write of many
        messages owes one merge, not one per :data:`MERGE_EVERY` of them: a 'merge'
        finds nothing more to do after a large batch (see :data:`MERGE_PAGES`)."""
        self._written += messages
        return self._written >= self._due_at

    def merged(self) -> None:
        """The due merge ran (or met damage): the next is due after
        :data:`MERGE_EVERY` more messages."""
        self._due_at = self._written + MERGE_EVERY


def run(cursor: Any) -> None:
    """The bounded merge of every index on ``cursor``, inside the caller's transaction."""
    for statement in MERGE_STATEMENTS:
        cursor.execute(statement)
