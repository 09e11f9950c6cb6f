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
cost grows with the index (a 100 ms pause on a 20k-message store).
"""

from __future__ import annotations

from typing import Any

from .ddl import INDEXES
from .stale import STALE_KEY

__all__ = ["MERGE_EVERY", "MERGE_PAGES", "MERGE_STATEMENTS", "MergeCadence", "run"]

#: Messages committed between two merges. At 50 messages and 8 pages the merge kept
#: the index as compact as a full optimize every 1,000 writes, for the insert cost of
#: no merge at all (see docs/performance.md, "Race").
MERGE_EVERY = 50
#: Pages (of FTS5's 4 KB) one merge of one index may write at most.
MERGE_PAGES = 8
#: The merge of each index, in the order they run. Each runs only while the index is
#: live: a detached index (the stale marker set with the triggers dropped, see
#: :mod:`.stale`) may be damaged and is left alone until a rebuild. The marker is read
#: in the merge's own statement, so the check and the merge see the same transaction.
MERGE_STATEMENTS: tuple[str, ...] = tuple(
    f"INSERT INTO {ix.name}({ix.name}, rank) SELECT 'merge', {MERGE_PAGES} "
    f"WHERE NOT EXISTS (SELECT 1 FROM state_meta WHERE key = '{STALE_KEY}')"
    for ix in INDEXES
)


class MergeCadence:
    """One store's count of messages written and when its next merge is due.

    A merge that could not run (another writer held the lock) stays due: the next
    committed write that adds messages tries again.
    """

    __slots__ = ("_due_at", "_written")

    def __init__(self, every: int = MERGE_EVERY) -> None:
        self._written = 0
        self._due_at = every

    @property
    def written(self) -> int:
        """Messages this store committed since it was opened."""
        return self._written

    def add(self, messages: int) -> bool:
        """Count ``messages`` committed; True when a merge is due."""
        self._written += messages
        return self._written >= self._due_at

    def merged(self, every: int = MERGE_EVERY) -> None:
        """The due merge ran (or was found needless): the next is due after ``every``
        more messages."""
        self._due_at = self._written + every


def run(cursor: Any) -> None:
    """The bounded merge of every index on ``cursor``, inside the caller's transaction."""
    for statement in MERGE_STATEMENTS:
        cursor.execute(statement)
