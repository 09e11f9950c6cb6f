"""One class per backend answers every dialect question, and a search's arguments are one
value whose fingerprint keeps the page cursors of earlier releases valid."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

import hermes_repo
from hermes_repo.backend import POSTGRESQL, SQLITE, PostgresBackend, SqliteBackend, backend_of
from hermes_repo.errors import InvalidArgumentError
from hermes_repo.repositories.search import SearchQuery
from hermes_repo.repositories.search.paging import (
    SearchCursorError,
    SearchLimitError,
    decode_cursor,
    encode_cursor,
)

ROOT = Path(hermes_repo.__file__).parent


def test_no_module_but_the_backend_reads_a_dialects_name() -> None:
    readers = sorted(
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*.py")
        if re.search(r"dialect\.name\b", path.read_text(encoding="utf-8"))
    )
    assert readers == ["backend.py"]


def test_a_connection_a_session_and_a_dialect_map_to_the_same_backend(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    try:
        with engine.connect() as conn, Session(engine) as session:
            assert backend_of(conn) is SQLITE
            assert backend_of(session) is SQLITE
            assert backend_of(engine.dialect) is SQLITE
    finally:
        engine.dispose()


def test_each_backend_states_its_own_flags() -> None:
    assert isinstance(SQLITE, SqliteBackend) and isinstance(POSTGRESQL, PostgresBackend)
    file_only = ("is_file", "may_quarantine", "has_fts_triggers", "cursor_fast_path")
    for flag in (*file_only, "refuses_stale_writes", "has_lastrowid"):
        assert getattr(SQLITE, flag) is True and getattr(POSTGRESQL, flag) is False, flag
    assert (SQLITE.refuses_nul_text, POSTGRESQL.refuses_nul_text) == (False, True)
    assert (SQLITE.search_dialect, POSTGRESQL.search_dialect) == ("fts5", "postgresql")


def test_a_cursor_handed_out_by_an_earlier_release_still_pages() -> None:
    # Minted by the release before SearchQuery: the fingerprint's bytes did not change.
    query = SearchQuery("kiwi  mango", session_id="s-one")
    assert decode_cursor("czEuMTIzLmZiYzJlMDNmYTNhOA", query) == 123
    other = SearchQuery("数据库", role="tool", include_inactive=True)
    assert encode_cursor(7, other) == "czEuNy5iNzNiZTcyMjFlZGU"


def test_the_fingerprint_is_the_terms_and_filters_never_the_limit_or_position() -> None:
    query = SearchQuery("kiwi mango", limit=5)
    assert query.fingerprint == SearchQuery("kiwi  mango", limit=50, before_id=9).fingerprint
    assert query.fingerprint != SearchQuery("kiwi mango", role="user").fingerprint
    with pytest.raises(SearchCursorError, match="another query or other filters"):
        decode_cursor(encode_cursor(3, query), SearchQuery("kiwi"))


def test_a_checked_query_names_the_wrong_argument() -> None:
    with pytest.raises(InvalidArgumentError, match="role"):
        SearchQuery.checked("kiwi", role=5)
    with pytest.raises(SearchLimitError, match="search_page"):
        SearchQuery.checked("kiwi", limit=1001)
    assert SearchQuery.checked("kiwi", limit=3).page(10, 4) == SearchQuery("kiwi", 4, before_id=10)
