"""Every content shape the store accepts is found by its text, on both backends.

Content that is not a plain string used to be searchable only through the ``text`` of
multimodal parts: a refusal, a tool result, a list of strings, a mapping or a number was
stored and never found. Revision ``0005_searchable_content`` recomputes the searchable
text of the rows stored before it.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from hermes_repo import StateStore
from hermes_repo.schema import migrate

pytestmark = pytest.mark.usefixtures("backend")

SHAPES: dict[str, Any] = {
    "refusal": [{"type": "refusal", "refusal": "I cannot help with quokkarefusal"}],
    "tool_result": [
        {
            "type": "tool_result",
            "tool_use_id": "toolu_1",
            "content": [{"type": "text", "text": "exit status quokkaresult"}],
        }
    ],
    "tool_result_text": [{"type": "tool_result", "tool_use_id": "t2", "content": "quokkaplain"}],
    "strings": ["first line", "quokkalist second"],
    "mapping": {"error": "quokkamapping timeout", "url": "https://quokkaurl.example"},
    "number": 4815162342,
}
FOUND_BY = {
    "refusal": "quokkarefusal",
    "tool_result": "quokkaresult",
    "tool_result_text": "quokkaplain",
    "strings": "quokkalist",
    "mapping": "quokkamapping",
    "number": "4815162342",
}


def _store_shapes(store: StateStore) -> dict[str, int]:
    ids = {}
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="shapes")
        for name, content in SHAPES.items():
            ids[name] = uow.messages.append(sid, {"role": "user", "content": content})
            uow.messages.append(sid, {"role": "assistant", "content": "noted"})
        uow.commit()
    return ids


def _found(store: StateStore) -> dict[str, list[int]]:
    return {name: [h.message_id for h in store.search(term)] for name, term in FOUND_BY.items()}


def test_each_content_shape_is_found_by_its_text_and_comes_back_exactly(
    store: StateStore,
) -> None:
    ids = _store_shapes(store)
    assert _found(store) == {name: [ids[name]] for name in SHAPES}
    # Addresses and base64 payloads are not text: not indexed.
    assert store.search("quokkaurl") == []
    replay = [m["content"] for m in store.load_conversation("shapes").messages[::2]]
    assert replay == list(SHAPES.values())


def test_the_upgrade_makes_rows_stored_before_it_searchable(store: StateStore) -> None:
    ids = _store_shapes(store)
    engine = store.engine
    migrate.downgrade(engine, "0004_postgresql_search")
    # The old rule: only the text of multimodal parts was searchable. (Read from the
    # column: this code's search reads columns of later revisions.)
    with engine.connect() as conn:
        old = dict(conn.execute(text("SELECT id, content_text FROM messages")).all())
    assert [old[ids[n]] for n in ("tool_result", "refusal", "number")] == [None] * 3
    migrate.upgrade(engine)
    assert _found(store) == {name: [ids[name]] for name in SHAPES}
