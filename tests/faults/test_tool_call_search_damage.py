"""The words of tool calls through the index's damage paths: while the index is detached
the canonical-row search finds them, the rebuild indexes them, the doctor's coverage and
integrity checks agree with the projection that holds them, and a salvage of an older
file derives the text the index reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.pool import NullPool

from hermes_repo import StateStore
from hermes_repo.engine import WRITE_OPTION, create_store_engine
from hermes_repo.salvage import salvage
from hermes_repo.schema import fts, migrate
from tests.support import damage
from tests.support.fts_checks import (
    MODULE,
    SEED_SESSION,
    canonical_like_ids,
    fts_match_ids,
    index_for,
    like_search_ids,
    ro_connect,
)

WORD = "frobnicator"  # only in the arguments of the calls written below
CJK = "配置文件路径"


def _turn(k: int) -> dict[str, object]:
    return {
        "role": "assistant",
        "content": f"checking step {k}" if k % 2 else None,
        "tool_calls": [
            {
                "id": f"call_{k}",
                "type": "function",
                "function": {
                    "name": "read_file",
                    "arguments": f'{{"path": "/etc/{WORD}/{CJK}/{k}"}}',
                },
            }
        ],
    }


@pytest.mark.parametrize("index", [ix.name for ix in fts.INDEXES])
def test_words_of_tool_calls_are_found_while_detached_and_after_the_rebuild(
    seeded_home: Path, index: str
) -> None:
    db = seeded_home / "state.db"
    with StateStore.open(seeded_home) as store:
        before = [store.append_message(SEED_SESSION, _turn(k)) for k in range(2)]
    damage.fts_delete_structure(db, index, module=MODULE)

    with StateStore.open(seeded_home) as store:
        during = [store.append_message(SEED_SESSION, _turn(k)) for k in range(2, 4)]
        assert store.health().fts_stale
        with ro_connect(db) as con:
            # The canonical-row search reads the same projection as the index.
            assert like_search_ids(con, WORD) == sorted(before + during, reverse=True)
        assert {h.message_id for h in store.search(WORD, limit=100)} == set(before + during)
        assert {h.message_id for h in store.search(CJK, limit=100)} == set(before + during)

    with StateStore.open(seeded_home) as store:
        outcome = store.last_rebuild
        assert outcome is not None and outcome.ran and outcome.ok, outcome
        assert not store.health().fts_stale
        assert {h.message_id for h in store.search(WORD, limit=100)} == set(before + during)
        with store.engine.connect() as conn:
            assert fts.integrity_errors(conn) == {}
            assert fts.coverage_check(conn) == []
            conn.rollback()
    with ro_connect(db) as con:
        for ix in fts.INDEXES:
            term = WORD if ix.name == "messages_fts" else CJK
            expected = canonical_like_ids(con, index_for(ix.name), term)
            assert expected == set(before + during)
            assert fts_match_ids(con, index_for(ix.name), term) == expected, ix.name


def test_a_store_salvaged_from_a_file_older_than_the_tool_calls_text_finds_their_words(
    tmp_path: Path,
) -> None:
    source = tmp_path / "old" / "state.db"
    source.parent.mkdir()
    engine = create_store_engine(source, poolclass=NullPool)
    migrate.upgrade(engine, "0005_searchable_content")  # no calls_text column yet
    calls = json.dumps([_turn(1)["tool_calls"][0]])  # type: ignore[index]
    with engine.execution_options(**{WRITE_OPTION: True}).begin() as conn:
        conn.execute(text("INSERT INTO sessions (id, source, started_at) VALUES ('s', 'cli', 1)"))
        conn.execute(
            text(
                "INSERT INTO messages (session_id, uid, role, content, tool_calls, timestamp)"
                " VALUES ('s', 'u1', 'assistant', 'checking', :calls, 1)"
            ),
            {"calls": calls},
        )
    engine.dispose()

    output = tmp_path / "recovered" / "state.db"
    assert salvage(source, output).integrity == "ok"

    with StateStore.open(output.parent) as store:
        (hit,) = store.search(WORD)
        assert hit.role == "assistant"
        with store.engine.connect() as conn:
            assert fts.coverage_check(conn) == []
            conn.rollback()
