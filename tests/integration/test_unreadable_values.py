"""Rows the store did not write (another tool, an old version, a hand edit) never make a
session unreadable: each odd value is kept under ``$invalid``, exactly as stored, and
load, export, search, listing and repair keep working."""

from __future__ import annotations

import json
from typing import Any

from hermes_repo import StateStore
from hermes_repo.codec import INVALID_KEY
from hermes_repo.transfer import export_session, finite
from tests.support.odd_values import damaged_session


def jsonl_text(messages: list[dict[str, Any]]) -> str:
    """The messages as JSON, a non-finite time as its repr (as the export writes it)."""
    return json.dumps(finite(messages))


def test_load_keeps_each_unreadable_value_under_invalid_and_the_rest_as_stored(
    backend: str, store: StateStore
) -> None:
    sid, damaged, odd = damaged_session(store, backend)
    messages = store.load_conversation(sid, with_ids=True).messages
    by_id = {m["id"]: m for m in messages}
    assert len(messages) == len(damaged) + len(odd) + 2
    assert all(INVALID_KEY not in by_id[mid] and "timestamp" in by_id[mid] for mid in odd)
    for mid, field, raw in damaged:
        kept = by_id[mid][INVALID_KEY][field]
        assert kept["raw"] == raw, (field, kept)
        assert kept["reason"]
        if field not in ("content", "extra"):
            assert field not in by_id[mid]
    assert sum(INVALID_KEY in m for m in messages) == len(damaged)
    assert all(m["content"] == f"alpha {i}" for i, m in enumerate(messages) if INVALID_KEY not in m)


def test_export_search_listing_and_repair_keep_working(backend: str, store: StateStore) -> None:
    sid, damaged, _ = damaged_session(store, backend)
    loaded = store.load_conversation(sid).messages
    lines = export_session(store, sid, "jsonl").splitlines()
    assert [json.loads(line) for line in lines] == json.loads(jsonl_text(loaded))
    markdown = export_session(store, sid, "markdown")
    assert "Unreadable stored tool_calls" in markdown and "[{bad" in markdown

    hits = store.search("alpha", limit=100)
    assert len(hits) >= len(loaded) - 1  # a blob written over the content is not text
    texts = [h.timestamp for h in hits if h.timestamp is None]
    assert len(texts) == (2 if backend == "sqlite" else 0)  # '2024-01-01' and 'abc'

    (info,) = store.list_sessions()
    assert info.extra is not None and info.extra[INVALID_KEY]["extra"]["raw"] == "{bad"

    first = store.load_conversation(sid, repair=True)
    again = store.load_conversation(sid, repair=True)
    assert again.repairs == 0 and jsonl_text(again.messages) == jsonl_text(first.messages)
    assert sum(INVALID_KEY in m for m in again.messages) == len(damaged)


def test_text_that_is_not_utf8_is_read_with_each_bad_byte_kept(store: StateStore) -> None:
    # SQLite stores whatever bytes another tool binds as TEXT; the driver refused to
    # decode the whole fetch, so one such row made its session unreadable.
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="latin1")
        uow.messages.append(sid, {"role": "user", "content": "placeholder"})
        uow.messages.append(sid, {"role": "assistant", "content": "caf\u00e9 ok"})
        uow.commit()
    with store.engine.begin() as conn:
        # "hello \xffbad": a Latin-1 byte where UTF-8 belongs.
        conn.exec_driver_sql(
            "UPDATE messages SET content = CAST(X'68656c6c6f20ff626164' AS TEXT) "
            "WHERE content = 'placeholder'"
        )
    messages = store.load_conversation("latin1").messages
    assert [m["content"] for m in messages] == ["hello \udcffbad", "caf\u00e9 ok"]
    # The byte comes back as Python's surrogateescape keeps it: the stored bytes exactly.
    assert messages[0]["content"].encode("utf-8", "surrogateescape") == b"hello \xffbad"
    assert [h.snippet for h in store.search("hello")] == [">>>hello<<< \udcffbad"]
    exported = [json.loads(line) for line in store.export_session("latin1").splitlines()]
    assert exported[0]["content"] == "hello \udcffbad"
