"""Long queries: a pasted traceback finds its message; a query past the limit is refused whole.

A query used to be cut at its 1,000th character, mid-word: the cut term matched nothing
and so, every term being required, the whole search found nothing.
"""

from __future__ import annotations

import pytest

from hermes_repo import SearchQueryError, StateStore
from hermes_repo.repositories.search_query import MAX_QUERY_CHARS, parse_query

pytestmark = pytest.mark.usefixtures("backend")


def _traceback(frames: int) -> str:
    lines = ["Traceback (most recent call last):"]
    for i in range(frames):
        lines.append(f'  File "/srv/agent/pipeline/stage_{i}.py", line {10 + i}, in run_stage_{i}')
        lines.append(f"    result = handler_{i}(payload, retries=3)")
    lines.append("ValueError: zebracorn checksum mismatch in shard 42")
    return "\n".join(lines)


def test_a_pasted_traceback_longer_than_a_thousand_characters_finds_its_message(
    store: StateStore,
) -> None:
    tb = _traceback(40)
    assert 3_000 < len(tb) <= MAX_QUERY_CHARS
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="tb-1")
        uow.messages.append(sid, {"role": "tool", "content": tb, "tool_name": "sh"})
        uow.messages.append(sid, {"role": "user", "content": _traceback(39)})
        uow.commit()
    hits = store.search(tb)
    assert [(h.session_id, h.role) for h in hits] == [("tb-1", "tool")]


def test_a_query_over_the_limit_is_refused_with_the_limit_named(store: StateStore) -> None:
    with pytest.raises(SearchQueryError, match="10,000"):
        store.search("x" * (MAX_QUERY_CHARS + 1))
    with pytest.raises(SearchQueryError, match="10,000"):
        store.search_page("word " * 2_001)


def test_a_query_at_the_limit_is_searched(store: StateStore) -> None:
    assert store.search("a" * MAX_QUERY_CHARS) == []


def test_a_repeated_term_is_searched_once() -> None:
    assert parse_query('error at x error "at x" Error') == ["error", "at", "x", "at x", "Error"]


@pytest.mark.parametrize("query", [5, None, b"bytes", ["a"]])
def test_a_query_that_is_not_text_is_a_library_error(store: StateStore, query: object) -> None:
    with pytest.raises(SearchQueryError, match="must be text"):
        store.search(query)  # type: ignore[arg-type]
