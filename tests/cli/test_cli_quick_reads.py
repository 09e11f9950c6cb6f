"""The read commands' quick path answers as the store does, and leaves the rest to it.

`sessions list`, `sessions show`, `sessions export` and `search` read a SQLite store at head through
:class:`hermes_repo.cli._reads.QuickReader` (no ORM loaded). Each answer is compared
here with the store's own on the same file, on rows the store finds awkward too
(marked text, an unreadable `extra`, archived rows, CJK, phrases); and every condition
under which an open has more to do than read sends the command to the store's open.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.cli._reads import (
    HEAD_REVISION,
    NEEDS_OPEN,
    PENDING_SUFFIX,
    SESSIONS_DIR,
    STALE_KEY,
    STORE_ID_KEY,
    QuickReader,
    quick_read,
)
from hermes_repo.errors import NotFoundError
from hermes_repo.repositories.search.request import SearchQuery
from hermes_repo.schema import migrate
from hermes_repo.schema.fts import STALE_KEY as FTS_STALE_KEY
from hermes_repo.transcript import spool
from hermes_repo.transfer import EXPORT_FORMATS, read_export
from tests.cli.conftest import SAMPLES, Cli
from tests.support.transcripts import MALFORMED, seed


@pytest.fixture
def awkward_home(tmp_path: Path) -> Path:
    """The sample sessions, a malformed transcript repaired (archived rows), a title
    holding controls and a lone surrogate, an `extra` the store did not write."""
    home = tmp_path / "home"
    with StateStore.open(home) as store:
        store.import_jsonl(SAMPLES)
        sid, _ = seed(
            store,
            MALFORMED,
            source="tg\x1b]0;x\x07",
            title="odd \ud800 title\u202e",
            extra={"workspace": "w", "n": 1},
        )
        store.load_conversation(sid, repair=True)  # archives rows
        odd, _ = seed(store, [{"role": "user", "content": "checkpoint 京都 write lock"}])
    with sqlite3.connect(home / "state.db") as raw:
        raw.execute("UPDATE sessions SET extra = 'not json' WHERE id = ?", (odd,))
    return home


@pytest.fixture
def reader(awkward_home: Path) -> Iterator[QuickReader]:
    quick = QuickReader.open(awkward_home / "state.db")
    try:
        yield quick
    finally:
        quick.close()


def test_the_quick_listing_is_the_stores(awkward_home: Path, reader: QuickReader) -> None:
    with StateStore.open(awkward_home) as store:
        for source in (None, "cli", "telegram", "tg\x1b]0;x\x07", "none such"):
            for limit in (1, 3, 50):
                expected = [i.as_dict() for i in store.list_sessions(limit=limit, source=source)]
                assert reader.list_sessions(limit=limit, source=source) == expected
        ids = [i.id for i in store.list_sessions(limit=50)]
    assert len(ids) == 6


def test_the_quick_session_and_messages_are_the_stores(
    awkward_home: Path, reader: QuickReader
) -> None:
    with StateStore.open(awkward_home) as store:
        ids = [i.id for i in store.list_sessions(limit=50)]
        archived = 0
        for sid in ids:
            assert reader.get_session(sid) == store.get_session(sid)
            for inactive in (False, True):
                for last in (None, 1, 3, 1000):
                    expected = store.load_conversation(
                        sid, include_inactive=inactive, last=last
                    ).messages
                    got = reader.load_messages(sid, include_inactive=inactive, last=last)
                    assert got == expected, (sid, inactive, last)
                    archived += sum(1 for m in got if m.get("active") is False)
        with pytest.raises(NotFoundError) as by_store:
            store.get_session("no_such_session")
    assert archived > 0  # the audit view was compared on archived rows too
    with pytest.raises(NotFoundError) as quick:
        reader.get_session("no_such_session")
    assert str(quick.value) == str(by_store.value)


def test_the_quick_export_is_the_stores_in_both_formats(
    awkward_home: Path, reader: QuickReader
) -> None:
    with StateStore.open(awkward_home) as store:
        for info in store.list_sessions(limit=50):
            for fmt in EXPORT_FORMATS:
                expected = read_export(store, info.id, fmt)
                mine = reader.read_export(info.id, fmt)
                assert mine == expected
                assert mine.text() == expected.text()


@pytest.mark.parametrize(
    "text", ["checkpoint", "京都", '"write lock"', "the", "zebras", "-fsync", "zzz_nothing"]
)
def test_the_quick_search_and_its_pages_are_the_stores(
    awkward_home: Path, reader: QuickReader, text: str
) -> None:
    with StateStore.open(awkward_home) as store:
        for inactive in (False, True):
            for limit in (1, 2, 20):
                query = SearchQuery.checked(text, limit=limit, include_inactive=inactive)
                assert reader.search(query) == store.search(
                    text, limit=limit, include_inactive=inactive
                )
                cursor = None
                while True:
                    mine = reader.search_page(query, cursor)
                    theirs = store.search_page(
                        text, limit=limit, cursor=cursor, include_inactive=inactive
                    )
                    assert mine == theirs
                    if mine.cursor is None:
                        break
                    cursor = mine.cursor


def test_the_constants_the_quick_path_reads_are_the_stores() -> None:
    assert migrate.HEAD_REVISION == HEAD_REVISION
    assert (spool.SESSIONS_DIR, spool.PENDING_SUFFIX) == (SESSIONS_DIR, PENDING_SUFFIX)
    assert FTS_STALE_KEY == STALE_KEY
    from hermes_repo.repositories.meta import STORE_ID_KEY as META_STORE_ID_KEY

    assert META_STORE_ID_KEY == STORE_ID_KEY


def _stale(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute(
            "INSERT INTO state_meta (key, value, updated_at) VALUES (?, 'test', 0)", (STALE_KEY,)
        )


def _behind(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute("UPDATE alembic_version SET version_num = '0004_postgresql_search'")


def _no_store_id(db: Path) -> None:
    with sqlite3.connect(db) as raw:
        raw.execute("DELETE FROM state_meta WHERE key = ?", (STORE_ID_KEY,))


def _pending(db: Path) -> None:
    folder = db.parent / SESSIONS_DIR
    folder.mkdir(exist_ok=True)
    (folder / f"some_session{PENDING_SUFFIX}").write_text("")


@pytest.mark.parametrize(
    "change", [_stale, _behind, _no_store_id, _pending], ids=lambda f: f.__name__.strip("_")
)
def test_a_store_whose_open_has_more_to_do_is_left_to_the_open(
    awkward_home: Path, change: object
) -> None:
    assert callable(change)
    db = awkward_home / "state.db"
    change(db)
    assert quick_read(db, lambda reader: "read quickly") is NEEDS_OPEN
    assert quick_read(db, lambda reader: reader.list_sessions(limit=1, source=None)) is NEEDS_OPEN


def test_a_detached_index_is_rebuilt_by_the_search_command_as_before(
    awkward_home: Path, cli: Cli
) -> None:
    before = json.loads(cli("--home", awkward_home, "search", "checkpoint", "--json").stdout)
    _stale(awkward_home / "state.db")

    after = cli("--home", awkward_home, "search", "checkpoint", "--json")

    # The command went through the store's open, which rebuilt the index: the marker
    # is gone and the same hits come back.
    assert after.code == 0, after.stderr
    assert json.loads(after.stdout) == before
    with sqlite3.connect(awkward_home / "state.db") as raw:
        left = raw.execute("SELECT count(*) FROM state_meta WHERE key = ?", (STALE_KEY,))
        assert left.fetchone() == (0,)
    assert quick_read(awkward_home / "state.db", lambda reader: "read quickly") == "read quickly"


def test_a_store_behind_the_code_still_names_the_upgrade(awkward_home: Path, cli: Cli) -> None:
    _behind(awkward_home / "state.db")
    for args in (["sessions", "list"], ["search", "checkpoint"], ["sessions", "show", "x_1"]):
        result = cli("--home", awkward_home, *args)
        assert result.code == 1
        assert "db upgrade" in result.stderr, result.stderr
        assert "0004_postgresql_search" in result.stderr
