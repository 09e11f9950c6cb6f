"""Any nesting depth at every door a message enters by: stored and read back exactly, or
refused with an IntegrityViolation before anything of the call is written."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_repo import StateStore
from hermes_repo.codec import MAX_DEPTH
from hermes_repo.errors import IntegrityViolation
from hermes_repo.transcript import spool
from tests.support.odd_values import nested

_ids = itertools.count()


def new_session(store: StateStore) -> str:
    sid = f"d{next(_ids)}"
    with store.unit_of_work() as uow:
        uow.sessions.create(id=sid)
        uow.commit()
    return sid


def counts(store: StateStore, sid: str) -> tuple[int, int]:
    with store.unit_of_work() as uow:
        return uow.messages.count(sid), uow.sessions.require(sid).message_count


def stored(store: StateStore, sid: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in m.items() if k not in ("uid", "timestamp")}
        for m in store.load_conversation(sid).messages
    ]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    depth=st.integers(0, 2000) | st.sampled_from([MAX_DEPTH, MAX_DEPTH + 1, 1000, 100_000]),
    dicts=st.booleans(),
    field=st.sampled_from(["content", "tool_calls", "reasoning_details", "meta"]),
)
def test_append_stores_and_round_trips_or_refuses_with_nothing_written(
    backend: str, store: StateStore, depth: int, dicts: bool, field: str
) -> None:
    sid = new_session(store)
    message = {"role": "assistant", "content": "x", field: nested(depth, dicts=dicts)}
    if depth <= MAX_DEPTH:
        store.append_message(sid, message)
        assert stored(store, sid) == [message]
        return
    with pytest.raises(IntegrityViolation, match=f"nested {depth} levels deep"):
        store.append_message(sid, message)
    assert counts(store, sid) == (0, 0)


def test_a_deep_message_in_a_batch_or_unit_refuses_the_whole_call(
    backend: str, store: StateStore
) -> None:
    sid = new_session(store)
    good = {"role": "user", "content": "fine"}
    deep = {"role": "assistant", "content": nested(100_000)}
    with pytest.raises(IntegrityViolation, match="'content' is nested 100000 levels"):
        store.append_messages(sid, [good, deep])
    with (
        pytest.raises(IntegrityViolation, match="nested 100000 levels"),
        store.unit_of_work() as uow,
    ):
        uow.messages.append(sid, deep)
        uow.commit()
    assert counts(store, sid) == (0, 0)
    store.append_messages(sid, [good])
    assert stored(store, sid) == [good]


def test_flush_sets_a_deep_message_aside_and_every_later_flush_goes_on(
    backend: str, store: StateStore, home: Path
) -> None:
    sid = new_session(store)
    writer = store.transcript_writer(sid)
    deep = {"role": "user", "content": nested(100_000, dicts=True)}
    first = writer.flush([{"role": "user", "content": "before"}, deep])
    assert (first.written, first.rejected) == (1, 1)
    assert "nested 100000 levels deep" in first.rejections[0].reason
    later = writer.flush([{"role": "assistant", "content": "after"}])
    assert later.written == 1 and later.error is None
    assert [m["content"] for m in store.load_conversation(sid).messages] == ["before", "after"]
    rejected = spool.sessions_dir(home) / spool.pending_name(sid, spool.REJECTED_SUFFIX)
    assert "nested 100000 levels deep" in rejected.read_text(encoding="utf-8")


def test_a_huge_value_is_stored_and_read_back(backend: str, store: StateStore) -> None:
    sid = new_session(store)
    big = "x" * 5_000_000  # 50 MB takes 2 s to append and 0.4 s to load: same code path
    parts = [{"type": "text", "text": big}]
    store.append_messages(
        sid, [{"role": "user", "content": big}, {"role": "user", "content": parts}]
    )
    messages = store.load_conversation(sid).messages
    assert messages[0]["content"] == big and messages[1]["content"] == parts
