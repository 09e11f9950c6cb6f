"""Search never silently misses: CJK inside tool output, and text beyond an index's cap.

The trigram index holds tool rows only when they carry CJK, and each index takes at most
a fixed number of characters from one row (``fts.WORD_CAP``, ``fts.TRIGRAM_CAP``); the
rest of a longer row is found by a LIKE scan of just the rows longer than the cap.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, text

from hermes_repo import StateStore
from hermes_repo.repositories.search import SNIPPET_CLOSE, SNIPPET_OPEN
from hermes_repo.schema import fts
from tests.support.stores import new_session

ROLES = ("system", "user", "assistant", "tool")
CJK_TEXT = "错误：连接超时，请检查数据库设置"


def _message(role: str, content: str, n: int = 0) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": role, "content": content}
    if role == "tool":
        msg["tool_call_id"] = f"call_{n}"
        msg["tool_name"] = "terminal"
    return msg


def _substrings(value: str) -> set[str]:
    return {value[i:j] for i in range(len(value)) for j in range(i + 1, len(value) + 1)}


@pytest.mark.parametrize("role", ROLES)
def test_every_cjk_substring_is_found_whatever_the_role(store: StateStore, role: str) -> None:
    sid = new_session(store)
    ids = [store.append_message(sid, _message(role, CJK_TEXT))]
    # Another role holding other CJK, so a query cannot pass by matching everything.
    store.append_message(sid, _message("user" if role != "user" else "assistant", "今天天气很好"))
    for sub in sorted(_substrings(CJK_TEXT)):
        assert [h.message_id for h in store.search(sub)] == ids, sub
        assert [h.message_id for h in store.search(sub, role=role)] == ids, sub


def test_the_issue_case_tool_output_connection_timeout(store: StateStore) -> None:
    sid = new_session(store)
    store.append_message(sid, _message("assistant", "running the query"))
    tool_id = store.append_message(sid, _message("tool", "psql: 错误: 连接超时 (timeout)"))
    hits = store.search("连接超时")
    assert [(h.message_id, h.role) for h in hits] == [(tool_id, "tool")]
    assert f"{SNIPPET_OPEN}连接超时{SNIPPET_CLOSE}" in hits[0].snippet


def test_tool_rows_without_cjk_stay_out_of_the_trigram_index(store: StateStore) -> None:
    sid = new_session(store)
    plain = store.append_message(sid, _message("tool", "total 12 drwxr-xr-x"))
    cjk = store.append_message(sid, _message("tool", "总计 12 个文件"))
    with store.engine.connect() as conn:
        indexed = {r[0] for r in conn.execute(text("SELECT id FROM messages_fts_trigram_docsize"))}
    assert cjk in indexed and plain not in indexed
    # ... and their words are still found by the word index.
    assert [h.message_id for h in store.search("drwxr")] == [plain]


def test_editing_rows_in_and_out_of_the_trigram_index_keeps_both_indexes_sound(
    store: StateStore,
) -> None:
    sid = new_session(store)
    ids = [store.append_message(sid, _message("tool", f"plain output {i}", i)) for i in range(4)]
    long_id = store.append_message(sid, _message("user", "长" * (fts.TRIGRAM_CAP + 10)))
    with store.engine.begin() as conn:
        # Into the index (gains CJK), out of it (loses CJK), a role change, a long row
        # shortened, a delete: each goes through the triggers' 'delete' + insert.
        conn.execute(
            text("UPDATE messages SET content = '现在有中文' WHERE id = :i"), {"i": ids[0]}
        )
        conn.execute(text("UPDATE messages SET content = '中文' WHERE id = :i"), {"i": ids[1]})
        conn.execute(text("UPDATE messages SET content = 'no more' WHERE id = :i"), {"i": ids[1]})
        conn.execute(text("UPDATE messages SET role = 'assistant' WHERE id = :i"), {"i": ids[2]})
        conn.execute(text("UPDATE messages SET content = 'short' WHERE id = :i"), {"i": long_id})
        conn.execute(text("DELETE FROM messages WHERE id = :i"), {"i": ids[3]})
    with store.engine.connect() as conn:
        assert fts.integrity_errors(conn) == {}
        assert fts.coverage_check(conn) == []
    assert [h.message_id for h in store.search("现在有")] == [ids[0]]


@contextmanager
def _statements(store: StateStore) -> Iterator[list[str]]:
    """Every statement SQLite runs for the store's connections (driver trace)."""
    seen: list[str] = []
    traced: list[Any] = []

    def on_checkout(dbapi_conn: Any, _record: Any, _proxy: Any) -> None:
        dbapi_conn.set_trace_callback(seen.append)
        traced.append(dbapi_conn)

    event.listen(store.engine.pool, "checkout", on_checkout)
    try:
        yield seen
    finally:
        event.remove(store.engine.pool, "checkout", on_checkout)
        for conn in traced:
            conn.set_trace_callback(None)


@pytest.mark.parametrize(
    ("index", "needle"),
    [(fts.INDEXES[0], "tailneedle"), (fts.INDEXES[1], "尾部关键词")],
    ids=["words", "trigram"],
)
def test_text_beyond_the_cap_is_found_by_a_scan_of_the_long_rows_only(
    store: StateStore, index: fts.FtsIndex, needle: str
) -> None:
    sid = new_session(store)
    store.append_message(sid, _message("user", "short message"))
    filler = "lorem ipsum " * (index.cap // 12 + 1)
    long_id = store.append_message(sid, _message("assistant", filler + needle + " end"))
    with store.engine.connect() as conn:
        # The index itself holds only the first `cap` characters of the row...
        direct = conn.execute(
            text(f"SELECT count(*) FROM {index.name} WHERE {index.name} MATCH :q"),
            {"q": f'"{needle}"'},
        ).scalar_one()
    assert direct == 0
    # ... and search still finds the rest.
    with _statements(store) as seen:
        hits = store.search(needle)
    assert [h.message_id for h in hits] == [long_id]
    assert f"{SNIPPET_OPEN}{needle}{SNIPPET_CLOSE}" in hits[0].snippet
    assert hits[0].snippet.startswith("…")
    # The scan reads only the rows longer than the cap: SQLite plans it on the partial index.
    scans = [s for s in seen if fts.long_row_condition("m", index.cap) in s]
    assert scans
    with store.engine.connect() as conn:
        plan = " ".join(
            str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + scans[0]).fetchall()
        )
    assert index.long_rows_index in plan


def test_a_row_found_within_the_cap_is_not_returned_twice(store: StateStore) -> None:
    sid = new_session(store)
    content = "zebracorn " + "filler " * (fts.WORD_CAP // 7 + 1) + "zebracorn"
    long_id = store.append_message(sid, _message("user", content))
    assert [h.message_id for h in store.search("zebracorn")] == [long_id]


def _varint(blob: bytes) -> int:
    """The first value of an FTS5 docsize record (SQLite varint: high bits first)."""
    value = 0
    for byte in blob[:8]:
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            break
    return value


def test_an_index_takes_at_most_its_cap_from_one_row(store: StateStore) -> None:
    # What bounds the time a huge append holds the write lock: the tokens indexed.
    sid = new_session(store)
    chars = 2 * fts.WORD_CAP
    row = store.append_message(sid, _message("assistant", ("ab " * chars)[:chars]))
    with store.engine.connect() as conn:
        sizes = {
            ix.name: _varint(
                conn.execute(
                    text(f"SELECT sz FROM {ix.name}_docsize WHERE id = :i"), {"i": row}
                ).scalar_one()
            )
            for ix in fts.INDEXES
        }
    # unicode61: one token per "ab "; trigram: one token per character but the last two.
    assert sizes["messages_fts"] == fts.WORD_CAP // 3 + (fts.WORD_CAP % 3 > 0)
    assert sizes["messages_fts_trigram"] == fts.TRIGRAM_CAP - 2


def test_text_beyond_the_cap_is_matched_literally_never_as_a_pattern(store: StateStore) -> None:
    sid = new_session(store)
    filler = "lorem ipsum " * (fts.TRIGRAM_CAP // 12 + 1)
    store.append_message(sid, _message("user", filler + "load 100x done"))
    literal = store.append_message(sid, _message("user", filler + "load 100% done"))
    assert [h.message_id for h in store.search("100%")] == [literal]
    assert [h.message_id for h in store.search("d 1_0")] == []


def _own(seen: list[str]) -> list[str]:
    # The library's statements: not SQLite's trigger steps ("-- ...") nor FTS5's reads of
    # its own shadow tables ("... FROM 'main'.'messages_fts_config'").
    return [s for s in seen if not s.startswith("--") and "'main'." not in s]


def test_long_rows_are_scanned_only_once_a_row_exceeds_a_cap_and_then_at_once(
    store: StateStore,
) -> None:
    sid = new_session(store)
    older = [store.append_message(sid, _message("user", f"tailneedle {n}")) for n in range(30)]
    store.search("tailneedle")  # warm-up: the index state is read once per schema cookie
    long_condition = fts.long_row_condition("m", fts.WORD_CAP)
    with _statements(store) as seen:
        ranked = store.search("tailneedle")
        page = store.search_page("tailneedle")
    assert {h.message_id for h in ranked} <= set(older) and len(ranked) == 20
    assert [h.message_id for h in page.hits] == older[::-1][:20]
    # No row exceeds a cap: a ranked word search is the facts statement and the ranking,
    # a page the facts statement and the page; no LIKE scan of the long rows.
    own = _own(seen)
    assert len(own) == 4, own
    assert not [s for s in own if long_condition in s and " LIKE " in s]
    # A long row written since (this process, no schema change) is scanned at once.
    filler = "lorem ipsum " * (fts.WORD_CAP // 12 + 1)
    long_id = store.append_message(sid, _message("assistant", filler + "tailneedle end"))
    hits = store.search("tailneedle", limit=100)
    assert long_id in [h.message_id for h in hits]
    assert [h.message_id for h in store.search_page("tailneedle", limit=1).hits] == [long_id]
