"""The shared invariant checks see an index that has fallen behind its rows.

FTS5's plain ``'integrity-check'`` verifies only the index's own structure: drop the
insert triggers, add a row, and it still passes although search can no longer find
that row. The checks every fault test ends with (``check_store``, and
``fts.integrity_errors`` where a test holds a store connection) run it with
``rank = 1``, which compares the index with its content rows.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.schema import fts
from tests.support.spooling import FTS_INDEXES, check_store, fts_integrity_errors, raw


def _index_left_behind(home: Path) -> None:
    """A row added while the insert triggers were missing: in the table, not the index."""
    with StateStore.open(home) as store:
        store.write(lambda uow: uow.sessions.create(id="s"))
        store.append_message("s", {"role": "user", "content": "indexed aardvark"})
    con = raw(home)
    try:
        for ix in FTS_INDEXES:
            con.execute(f"DROP TRIGGER {ix}_insert")
        con.execute(
            "INSERT INTO messages (session_id, uid, role, content, content_text, timestamp)"
            " VALUES ('s', 'u-behind', 'user', 'unindexed okapi', 'unindexed okapi', 2.0)"
        )
        con.execute("UPDATE sessions SET message_count = 2 WHERE id = 's'")
    finally:
        con.close()


def test_plain_integrity_check_misses_an_index_left_behind(home: Path) -> None:
    _index_left_behind(home)
    con = raw(home)
    try:
        for ix in FTS_INDEXES:  # passes: this is the check the invariant must not use
            con.execute(f"INSERT INTO {ix}({ix}) VALUES ('integrity-check')")
        hits = con.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'okapi'"
        ).fetchone()
    finally:
        con.close()
    assert hits == (0,)  # and yet the row cannot be found


def test_check_store_catches_an_index_left_behind(home: Path) -> None:
    _index_left_behind(home)
    con = raw(home)
    try:
        assert set(fts_integrity_errors(con)) == set(FTS_INDEXES)
    finally:
        con.close()
    with pytest.raises(AssertionError, match="out of step"):
        check_store(home)


def test_store_level_check_catches_an_index_left_behind(home: Path) -> None:
    _index_left_behind(home)
    with StateStore.open(home) as store, store.engine.connect() as conn:
        assert set(fts.integrity_errors(conn)) == set(FTS_INDEXES)


def test_check_store_passes_on_a_consistent_store(home: Path) -> None:
    with StateStore.open(home) as store:
        store.write(lambda uow: uow.sessions.create(id="s"))
        store.append_message("s", {"role": "user", "content": "indexed aardvark"})
    assert len(check_store(home)) == 1
