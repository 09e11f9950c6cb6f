"""Every hit is reachable: limits honoured up to the maximum, and keyset pages that walk
every hit once, newest first, equal to a brute-force scan of the rows."""

from __future__ import annotations

from random import Random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from hermes_repo import (
    MAX_SEARCH_LIMIT,
    SearchCursorError,
    SearchLimitError,
    SearchQueryError,
    StateStore,
)
from hermes_repo.repositories.search import CANDIDATE_CAP, SearchHit, SearchQuery, parse_query
from hermes_repo.schema import fts

_FILLER = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf"]
SESSIONS = ("s-one", "s-two", "s-three")
ROLES = ("user", "assistant", "tool")
# Word terms, words with a sign, CJK for the trigram index, a 2-character CJK term and a
# sign alone (LIKE paths), a word prefix (no token hit: the substring fallback) and a
# word nothing holds.
QUERIES = ("kiwi", "mango", "kiwi mango", "kiwi 🚀", "数据库", "数据", "🚀", "kiw", "zzznothing")


# The same paging contract on both backends.
pytestmark = pytest.mark.usefixtures("backend")


@pytest.fixture
def mixed(store: StateStore) -> StateStore:
    rng = Random(14)
    with store.unit_of_work() as uow:
        for sid in SESSIONS:
            uow.sessions.create(id=sid)
        for i in range(700):
            words = rng.sample(_FILLER, 4)
            if rng.random() < 0.45:
                words.insert(rng.randint(0, 4), "kiwi")
            if rng.random() < 0.3:
                words.insert(rng.randint(0, 4), "mango" * rng.choice((1, 1, 2)))
            if rng.random() < 0.12:
                words.append("🚀")
            if rng.random() < 0.1:
                words.append(rng.choice(("数据库连接", "旧数据", "数据")))
            role = ROLES[i % 3]
            msg = {"role": role, "content": " ".join(words)}
            if role == "tool":
                msg["tool_name"] = "sh"
            uow.messages.append(SESSIONS[rng.randrange(3)], msg)
        uow.commit()
    return store


def _reference(
    store: StateStore, query: str, session_id: str | None, role: str | None
) -> list[int]:
    """The hits by brute force: rows whose text holds every term, newest first.

    Word terms are whole tokens of the corpus, so a substring test equals the word
    index's. A word query without a token hit falls back to substring search, which
    (as documented) reads tool rows only when they hold CJK text or the search is
    limited to tool rows.
    """
    terms = parse_query(query)
    with store.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, session_id, role, content FROM messages WHERE active = 1")
        ).all()
    rows = [r for r in rows if session_id in (None, r[1]) and role in (None, r[2])]

    def holds(content: str) -> bool:
        return all(t.lower() in content.lower() for t in terms)

    def token(content: str, term: str) -> bool:
        return term in content.split() or not any(ch.isalnum() for ch in term)

    words = [t for t in terms if any(ch.isalnum() for ch in t) and not fts.has_cjk(t)]
    hits = [r for r in rows if holds(r[3])]
    if words and not any(fts.has_cjk(t) for t in terms):
        exact = [r for r in hits if all(token(r[3], t) for t in words)]
        if exact or any(len(t) < 3 for t in words):
            return sorted((r[0] for r in exact), reverse=True)
        if role != "tool":
            hits = [r for r in hits if r[2] != "tool" or fts.has_cjk(r[3])]
    return sorted((r[0] for r in hits), reverse=True)


def _walk(store: StateStore, query: str, limit: int, **filters: str | None) -> list[int]:
    ids: list[int] = []
    cursor = None
    while True:
        page = store.search_page(query, limit=limit, cursor=cursor, **filters)  # type: ignore[arg-type]
        assert len(page.hits) <= limit
        assert page.hits or cursor is None  # a cursor is never handed out for an empty page
        # Every page starts below the last one: a walk always ends.
        assert not ids or not page.hits or page.hits[0].message_id < ids[-1]
        ids += [h.message_id for h in page.hits]
        if page.cursor is None:
            return ids
        assert len(page.hits) == limit
        cursor = page.cursor


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    query=st.sampled_from(QUERIES),
    limit=st.integers(min_value=1, max_value=120),
    session_id=st.sampled_from((None, *SESSIONS)),
    role=st.sampled_from((None, *ROLES)),
)
def test_paging_yields_every_hit_once_newest_first_as_a_scan_finds_them(
    mixed: StateStore, query: str, limit: int, session_id: str | None, role: str | None
) -> None:
    expected = _reference(mixed, query, session_id, role)
    walked = _walk(mixed, query, limit, session_id=session_id, role=role)
    assert walked == expected
    # The relevance order returns the same hits when they fit in one call.
    ranked = mixed.search(query, limit=MAX_SEARCH_LIMIT, session_id=session_id, role=role)
    assert sorted((h.message_id for h in ranked), reverse=True) == expected


def test_a_limit_above_the_candidate_cap_is_honoured_ranked_first_then_newest(
    store: StateStore,
) -> None:
    n = CANDIDATE_CAP + 250
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="many")
        uow.messages.append_many(
            sid,
            [
                {"role": "user", "content": "papaya " * (5 if i % 9 == 0 else 1) + f"n{i}"}
                for i in range(n)
            ],
        )
        uow.commit()
    newest_first = [h.message_id for h in store.search_page("papaya", limit=n).hits]
    assert len(newest_first) == n

    hits = store.search("papaya", limit=n)
    ids = [h.message_id for h in hits]
    assert len(ids) == n == len(set(ids))  # no longer capped at CANDIDATE_CAP
    # The ranked part is the CANDIDATE_CAP newest hits, most relevant first...
    assert set(ids[:CANDIDATE_CAP]) == set(newest_first[:CANDIDATE_CAP])
    assert hits[0].snippet.count("papaya") > 1
    # ...then every older hit, newest first.
    assert ids[CANDIDATE_CAP:] == newest_first[CANDIDATE_CAP:]
    assert len(store.search("papaya", limit=30)) == 30


def test_a_limit_above_the_maximum_is_refused_naming_the_maximum_and_paging(
    store: StateStore,
) -> None:
    for call in (store.search, store.search_page):
        with pytest.raises(SearchLimitError) as caught:
            call("anything", limit=MAX_SEARCH_LIMIT + 1)
        assert isinstance(caught.value, SearchQueryError)
        assert str(MAX_SEARCH_LIMIT) in str(caught.value)
        assert "search_page" in str(caught.value) and "--page" in str(caught.value)
    assert store.search("anything", limit=MAX_SEARCH_LIMIT) == []


@pytest.fixture
def paged(mixed: StateStore) -> str:
    page = mixed.search_page("kiwi", limit=5)
    assert page.cursor is not None
    return page.cursor


@pytest.mark.parametrize(
    "bad",
    ["garbage", "", "czEuMTIz", "!!!", "czIuMTIzLmFiYw", "czEuLTUuYWJj", "a" * 5000, "数据"],
)
def test_a_malformed_cursor_is_refused_with_the_fix(mixed: StateStore, bad: str) -> None:
    with pytest.raises(SearchCursorError, match="cursor returned with the previous page"):
        mixed.search_page("kiwi", limit=5, cursor=bad)


def test_a_cursor_of_another_search_is_refused(mixed: StateStore, paged: str) -> None:
    for other in (
        {"query": "mango"},
        {"query": "kiwi", "session_id": "s-one"},
        {"query": "kiwi", "role": "tool"},
        {"query": "kiwi", "include_inactive": True},
    ):
        with pytest.raises(SearchCursorError, match="another query or other filters"):
            mixed.search_page(limit=5, cursor=paged, **other)  # type: ignore[arg-type]
    # The same terms typed differently are the same search.
    assert mixed.search_page("  kiwi ", limit=5, cursor=paged).hits


def test_pages_stay_stable_while_new_messages_arrive(mixed: StateStore) -> None:
    first = mixed.search_page("kiwi", limit=10)
    assert first.cursor is not None
    mixed.append_message("s-one", {"role": "user", "content": "kiwi arrives later"})
    second = mixed.search_page("kiwi", limit=10, cursor=first.cursor)
    walked = [h.message_id for h in first.hits + second.hits]
    assert walked == _reference(mixed, "kiwi", None, None)[1:21]  # the new row is above page 1


def test_a_word_query_past_its_last_hit_pages_nothing_rather_than_substrings(
    store: StateStore,
) -> None:
    """The substring fallback is decided for the whole query: a page below a word's
    oldest hit is empty, never the substring hits of the fallback."""
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="fallback")
        older = uow.messages.append(sid, {"role": "user", "content": "guavaguava older"})
        word = uow.messages.append(sid, {"role": "user", "content": "guava newer"})
        uow.commit()

    def search(query: str, *, before_id: int) -> list[SearchHit]:
        # The write core's search (the router over the store's dialect), paged.
        return store.database.search(SearchQuery(query, before_id=before_id))

    assert [h.message_id for h in search("guava", before_id=word + 1)] == [word]
    assert search("guava", before_id=word) == []
    # Without a token hit at all, the fallback finds the substring.
    assert [h.message_id for h in search("guav", before_id=word + 1)] == [word, older]
