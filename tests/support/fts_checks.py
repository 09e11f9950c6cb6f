"""A searchable corpus and read-only checks for the FTS damage tests.

The corpus is built so that an FTS answer and a LIKE answer over the same rows must be
equal: the words are lower-case ASCII and none is a substring of another (so
``LIKE '%word%'`` matches exactly the rows that hold the token), tool rows carry no CJK
text (the trigram index leaves tool rows out), and every search term has fewer hits
than the word search's candidate cap.

Every check opens its own read-only connection (``mode=ro``) with the driver the store
uses, after the store under test is closed or between its calls: what is asserted is
what is on disk, not what a store object believes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.maintenance.fts_rebuild import MAX_AUTOMATIC_ATTEMPTS
from hermes_repo.repositories.search import CANDIDATE_CAP, fts_phrase, like_pattern
from hermes_repo.schema import fts
from hermes_repo.schema.fts import INDEXES, FtsIndex, text_projection
from tests.support import damage

__all__ = [
    "CJK_TERM",
    "MODULE",
    "SEED_ROWS",
    "SEED_SESSION",
    "TERMS",
    "WORDS",
    "DiskState",
    "canonical_like_ids",
    "corpus_message",
    "detach_index",
    "fts_match_ids",
    "give_up_rebuild",
    "like_search_ids",
    "read_state",
    "repair_originals",
    "ro_connect",
    "seed_store",
]

# The SQLite library the store uses: damage must be applied with the same one (two
# libraries in one process do not see each other's POSIX locks).
MODULE: ModuleType = select_driver().module

WORDS = (
    "amber",
    "basil",
    "cobalt",
    "dune",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "jasper",
    "kelp",
    "lumen",
)
CJK_TERM = "数据库"  # a 3-character CJK substring: the trigram index answers it
TERMS = ("amber", "cobalt", "fjord", "lumen", CJK_TERM)
SEED_ROWS = 320  # garbage leaf blocks only break writes once a merge reads them (>= 300)
SEED_SESSION = "seed"


def corpus_message(i: int) -> dict[str, Any]:
    """Message ``i`` of the corpus: three words, CJK text in every fifth non-tool row."""
    words = f"{WORDS[i % 12]} {WORDS[(i * 5 + 1) % 12]} {WORDS[(i * 7 + 3) % 12]} n{i}"
    if i % 9 == 8:
        return {
            "role": "tool",
            "content": f"output {words}",
            "tool_call_id": f"call_{i}",
            "name": "terminal",
            "timestamp": 1_700_000_000.0 + i,
        }
    return {
        "role": "user" if i % 2 == 0 else "assistant",
        "content": words + (" 检查数据库索引" if i % 5 == 0 else ""),
        "timestamp": 1_700_000_000.0 + i,
    }


def seed_store(home: Path, rows: int = SEED_ROWS) -> None:
    """Fill the (closed) store in ``home`` with the corpus, then checkpoint and close it.

    One transaction, so the index holds one large segment, as a store that was bulk
    imported would.
    """
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        uow.sessions.create("cli", id=SEED_SESSION, started_at=1_700_000_000.0)
        uow.messages.append_many(SEED_SESSION, [corpus_message(i) for i in range(rows)])
        uow.commit()
    damage.checkpoint_and_close(home / "state.db", module=MODULE)


@contextmanager
def ro_connect(db_path: Path) -> Iterator[Any]:
    """A read-only driver connection: it can never write to the store under test."""
    con = MODULE.connect(db_path.absolute().as_uri() + "?mode=ro", uri=True, isolation_level=None)
    try:
        yield con
    finally:
        con.close()


def repair_originals(db_path: Path) -> int:
    """How many archived copies of rewritten survivors a repair kept (the audit trail's
    ``repair_original of #id`` rows): a repair adds exactly these rows."""
    with ro_connect(db_path) as con:
        (n,) = con.execute(
            "SELECT count(*) FROM messages WHERE archive_reason LIKE 'repair_original of #%'"
        ).fetchone()
    return int(n)


@dataclass(frozen=True)
class DiskState:
    """What the file says about the index and the canonical rows."""

    marker: str | None  # the fts_stale value, None when FTS is live
    triggers: frozenset[str]
    sessions: int
    messages: int

    @property
    def detached(self) -> bool:
        """Marker set and every sync trigger gone (what a degrade commits)."""
        return self.marker is not None and not self.triggers

    @property
    def live(self) -> bool:
        """No marker and all six sync triggers present."""
        return self.marker is None and self.triggers == frozenset(fts.TRIGGER_NAMES)


def read_state(db_path: Path) -> DiskState:
    """Marker, sync triggers and canonical counts, read from the file."""
    with ro_connect(db_path) as con:
        row = con.execute("SELECT value FROM state_meta WHERE key = ?", (fts.STALE_KEY,)).fetchone()
        triggers = {
            r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        }
        sessions = con.execute("SELECT count(*) FROM sessions").fetchone()[0]
        messages = con.execute("SELECT count(*) FROM messages").fetchone()[0]
    return DiskState(
        marker=None if row is None else str(row[0]),
        triggers=frozenset(triggers & set(fts.TRIGGER_NAMES)),
        sessions=int(sessions),
        messages=int(messages),
    )


def detach_index(home: Path, recipe: Callable[[Path], object]) -> None:
    """Damage the index of the closed store with ``recipe(db)``, then write: the write
    detaches the index (marker set, triggers dropped), as in a running gateway."""
    recipe(home / "state.db")
    with StateStore.open(home) as store:
        store.append_message(SEED_SESSION, {"role": "user", "content": "written after the damage"})
    assert read_state(home / "state.db").detached


def give_up_rebuild(home: Path, recipe: Callable[[Path], object]) -> None:
    """A detached index whose automatic rebuild gave up: the attempt ledger at its limit.

    The ledger is what failed rebuilds at every start would have left; from now on an
    open leaves the index detached, so only the explicit repair can rebuild it.
    """
    detach_index(home, recipe)
    with ro_connect(home / "state.db") as con:
        (raw,) = con.execute("SELECT value FROM state_meta WHERE key = 'fts_stale'").fetchone()
    ledger = {
        "since": json.loads(raw)["since"],
        "attempts": MAX_AUTOMATIC_ATTEMPTS,
        "last_error": "simulated: the disk was full at every start",
    }
    (home / "state.db.fts-rebuild.json").write_text(json.dumps(ledger))
    with StateStore.open(home) as store:
        assert store.last_rebuild is None  # not even tried
    assert read_state(home / "state.db").detached


def canonical_like_ids(con: Any, index: FtsIndex, term: str) -> set[int]:
    """Rows of ``messages`` that ``index`` covers and whose text holds ``term`` (LIKE)."""
    where = index.row_filter.format(t="m") if index.row_filter else "1 = 1"
    sql = (
        f"SELECT m.id FROM messages AS m WHERE {where} "
        f"AND {text_projection('m')} LIKE ? ESCAPE '\\'"
    )
    return {int(r[0]) for r in con.execute(sql, (like_pattern(term),))}


def fts_match_ids(con: Any, index: FtsIndex, term: str) -> set[int]:
    """Rowids the index itself returns for ``term`` (a quoted phrase)."""
    sql = f"SELECT rowid FROM {index.name} WHERE {index.name} MATCH ?"
    return {int(r[0]) for r in con.execute(sql, (fts_phrase(term),))}


def like_search_ids(con: Any, term: str) -> list[int]:
    """What the LIKE fallback must answer for ``term``: every active row, newest first."""
    sql = (
        f"SELECT m.id FROM messages AS m WHERE m.active = 1 "
        f"AND {text_projection('m')} LIKE ? ESCAPE '\\' ORDER BY m.id DESC"
    )
    return [int(r[0]) for r in con.execute(sql, (like_pattern(term),))]


def index_for(name: str) -> FtsIndex:
    """The :class:`FtsIndex` called ``name``."""
    return next(ix for ix in INDEXES if ix.name == name)


# Word search ranks only the most recent CANDIDATE_CAP matches: a term with more hits
# could not be compared as a set. The corpus keeps every term well below it.
assert SEED_ROWS // 4 < CANDIDATE_CAP
