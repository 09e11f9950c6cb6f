"""The words of tool calls through the index's damage paths: while the index is detached
the canonical-row search finds them, the rebuild indexes them, and the doctor's
coverage and integrity checks agree with the projection that holds them."""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.schema import fts
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
