"""Search: words, CJK, substrings, filters, and hostile text that never breaks a query."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from hermes_repo import MAX_SEARCH_LIMIT, StateStore
from hermes_repo.repositories.search import (
    CANDIDATE_CAP,
    RANK_CUTOFF,
    SNIPPET_CLOSE,
    SNIPPET_OPEN,
    parse_query,
)
from hermes_repo.schema import fts


@pytest.fixture
def corpus(store: StateStore) -> dict[str, str]:
    with store.unit_of_work() as uow:
        a = uow.sessions.create(id="sess-a")
        b = uow.sessions.create(id="sess-b")
        uow.messages.append_many(
            a,
            [
                {"role": "user", "content": "How do I configure the zebracorn daemon?"},
                {"role": "assistant", "content": "Edit zebracorn.toml and restart it."},
                {"role": "user", "content": "今天天气很好，我们去公园散步吧"},
                {
                    "role": "tool",
                    "content": "100% done_with_underscores \\path\\x",
                    "tool_name": "sh",
                },
                {"role": "user", "content": "Café déjà vu"},
            ],
        )
        uow.messages.append_many(
            b,
            [
                {"role": "user", "content": "zebracorn in another session"},
                {"role": "assistant", "content": [{"type": "text", "text": "北京欢迎你"}]},
            ],
        )
        uow.commit()
    return {"a": a, "b": b}


def _ids(hits: list) -> list[str]:
    return [h.session_id + ":" + h.role for h in hits]


def test_english_word_finds_every_session_with_marked_snippets(
    store: StateStore, corpus: dict
) -> None:
    hits = store.search("zebracorn")
    assert sorted(_ids(hits)) == ["sess-a:assistant", "sess-a:user", "sess-b:user"]
    assert all(f"{SNIPPET_OPEN}zebracorn{SNIPPET_CLOSE}" in h.snippet.lower() for h in hits)


def test_words_ignore_case_and_diacritics(store: StateStore, corpus: dict) -> None:
    assert len(store.search("CAFE deja")) == 1


def test_chinese_three_or_more_characters_uses_the_trigram_index(
    store: StateStore, corpus: dict
) -> None:
    (hit,) = store.search("去公园")
    assert hit.session_id == "sess-a" and SNIPPET_OPEN in hit.snippet
    (hit,) = store.search("欢迎你")  # inside a multimodal text part
    assert hit.session_id == "sess-b"


@pytest.mark.parametrize(
    "query,expected", [("公园", ["sess-a:user"]), ("京", ["sess-b:assistant"])]
)
def test_one_and_two_character_chinese_queries_are_answered(
    store: StateStore, corpus: dict, query: str, expected: list[str]
) -> None:
    assert _ids(store.search(query)) == expected


def test_substring_falls_back_to_trigram(store: StateStore, corpus: dict) -> None:
    assert len(store.search("ebraco")) == 3


def test_filters_by_session_and_role(store: StateStore, corpus: dict) -> None:
    assert _ids(store.search("zebracorn", session_id="sess-b")) == ["sess-b:user"]
    assert _ids(store.search("zebracorn", role="assistant")) == ["sess-a:assistant"]


def test_inactive_rows_are_excluded_unless_asked(store: StateStore, corpus: dict) -> None:
    with store.unit_of_work() as uow:
        uow.orm.execute(text("UPDATE messages SET active = 0 WHERE session_id = 'sess-b'"))
        uow.commit()
    assert _ids(store.search("zebracorn", session_id="sess-b")) == []
    assert _ids(store.search("zebracorn", session_id="sess-b", include_inactive=True)) == [
        "sess-b:user"
    ]
    assert store.search("北京") == []


@pytest.mark.parametrize("query", ["%", "_", "\\", "100%", "done_with"])
def test_like_wildcards_are_literal(store: StateStore, corpus: dict, query: str) -> None:
    hits = store.search(query)
    assert [h.role for h in hits] == ["tool"]


def _index_is_live(store: StateStore) -> None:
    """No query may detach the index: any fts5 error counts as damage, so an escaping
    bug would degrade search quietly to the LIKE scan and still return rows."""
    # (The marker is what ``store.health().fts_stale`` reports; health() itself also
    # walks every object of the process for foreign SQLite connections, which a
    # 150-example property would pay on every example.)
    with store.engine.connect() as conn:
        assert fts.stale_marker(conn) is None
        assert fts.present_triggers(conn) == set(fts.TRIGGER_NAMES)


# The hostile session holds the planted text and a decoy that shares words with several
# queries; "decoy" says whether the decoy matches when every term is plain text (an
# operator that acted would change that answer, or fail and detach the index).
DECOY = "zebracorn decoy a b x content near"
HOSTILE = [
    ('"', False),
    ('"unbalanced', False),
    ("NEAR(", True),
    ("NEAR(a b)", False),
    ("*", False),
    ("a*", True),
    ("-", False),
    ("-zebracorn", True),
    (":", False),
    ("content:x", False),
    ("^", False),
    ("^zebracorn", True),
    ("AND", False),
    ("OR NOT", False),
    ("zebracorn AND", False),
    ("()", False),
    ("''", False),
    ("{}", False),
    ("[", False),
    ("+", False),
    ("'; DROP TABLE", False),
    ("%", False),
    ("_", False),
    ("\\", False),
]


@pytest.mark.parametrize(("query", "decoy"), HOSTILE, ids=[q for q, _ in HOSTILE])
def test_operator_characters_are_plain_text(
    store: StateStore, corpus: dict, query: str, decoy: bool
) -> None:
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="hostile")
        planted = uow.messages.append(sid, {"role": "user", "content": f"begin {query} end"})
        other = uow.messages.append(sid, {"role": "user", "content": DECOY})
        uow.commit()
    hits = store.search(query, session_id=sid)
    assert {h.message_id for h in hits} == ({planted, other} if decoy else {planted})
    _index_is_live(store)
    assert len(store.search(query, limit=50)) >= 1  # and across sessions
    _index_is_live(store)


def test_operators_do_not_act(store: StateStore, corpus: dict) -> None:
    # "-zebracorn" is not "NOT zebracorn", and OR is a word, not a disjunction.
    assert len(store.search("zebracorn OR nothingmatches")) == 0
    assert store.search("NEAR(") == []


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text(max_size=60))
def test_hostile_queries_never_raise(store: StateStore, corpus: dict, query: str) -> None:
    hits = store.search(query, limit=5)
    assert len(hits) <= 5
    _index_is_live(store)


_planted = iter(range(1_000_000))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40))
def test_hostile_text_finds_the_message_that_contains_it(
    store: StateStore, corpus: dict, query: str
) -> None:
    # Printable ASCII: every operator and wildcard character of FTS5 and LIKE.
    sid = f"planted-{next(_planted)}"
    with store.unit_of_work() as uow:
        uow.sessions.create(id=sid)
        planted = uow.messages.append(sid, {"role": "user", "content": f"begin {query} end"})
        uow.messages.append(sid, {"role": "assistant", "content": "nothing to see"})
        uow.commit()
    hits = store.search(query, session_id=sid)
    if parse_query(query):
        assert planted in {h.message_id for h in hits}
    else:
        assert hits == []
    _index_is_live(store)


def test_a_term_with_more_hits_than_the_rank_cutoff_comes_newest_first_and_complete(
    store: StateStore,
) -> None:
    """Past RANK_CUTOFF hits bm25 is skipped: every hit, newest first (not by score,
    and not capped to the ranked path's candidate set)."""
    n = RANK_CUTOFF + 301
    with store.unit_of_work() as uow:  # one executemany: the corpus costs well under a second
        sid = uow.sessions.create(id="bulk")
        uow.messages.append_many(
            sid,
            [
                # Every 7th row repeats the term: bm25 would rank those first.
                {"role": "user", "content": "omnipresent " * (6 if i % 7 == 0 else 1) + f"r{i}"}
                for i in range(n)
            ],
        )
        uow.messages.append(sid, {"role": "user", "content": "unrelated newest row"})
        uow.commit()
    with store.engine.connect() as conn:
        expected = [
            r[0]
            for r in conn.execute(
                text("SELECT id FROM messages WHERE content LIKE '%omnipresent%' ORDER BY id DESC")
            )
        ]
    assert len(expected) == n > RANK_CUTOFF > CANDIDATE_CAP

    first = store.search("omnipresent", limit=MAX_SEARCH_LIMIT)
    assert [h.message_id for h in first] == expected[:MAX_SEARCH_LIMIT]  # newest first
    every, cursor = [], None
    while True:
        page = store.search_page("omnipresent", limit=MAX_SEARCH_LIMIT, cursor=cursor)
        every += page.hits
        if page.cursor is None:
            break
        cursor = page.cursor
    assert [h.message_id for h in every] == expected  # complete, newest first
    top = store.search("omnipresent", limit=25)
    assert [h.message_id for h in top] == expected[:25]
    assert all(f"{SNIPPET_OPEN}omnipresent{SNIPPET_CLOSE}" in h.snippet for h in top)
    _index_is_live(store)


def test_a_term_under_the_rank_cutoff_is_ranked_by_bm25(store: StateStore) -> None:
    """The other side of the cutoff, on the same kind of corpus: most relevant first."""
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="small")
        uow.messages.append_many(
            sid,
            [
                {"role": "user", "content": "omnipresent " * (6 if i % 7 == 0 else 1) + f"r{i}"}
                for i in range(70)
            ],
        )
        uow.commit()
    top = store.search("omnipresent", limit=10)
    heavy = [h for h in top if h.snippet.count("omnipresent") > 1]
    assert len(heavy) == 10  # the rows repeating the term, not the newest rows


@pytest.fixture
def signs(store: StateStore) -> dict[str, int]:
    """The same text in a user and a tool row (tool rows without CJK are not in the
    trigram index), and tool rows holding signs: tokens without letters or digits."""
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="signs")
        ids = {
            "user": uow.messages.append(sid, {"role": "user", "content": "deploy 🚀 done"}),
            "tool": uow.messages.append(
                sid, {"role": "tool", "content": "deploy 🚀 done", "tool_name": "sh"}
            ),
            "deploy-only": uow.messages.append(
                sid, {"role": "tool", "content": "deploy done", "tool_name": "sh"}
            ),
            # Stored exactly; its searchable text holds U+FFFD for the lone surrogate.
            "surrogate": uow.messages.append(
                sid, {"role": "tool", "content": "build \ud83d failed", "tool_name": "sh"}
            ),
            "build-only": uow.messages.append(
                sid, {"role": "tool", "content": "build passed", "tool_name": "sh"}
            ),
            "question": uow.messages.append(
                sid, {"role": "tool", "content": "delta ??? 100% x", "tool_name": "sh"}
            ),
            "assistant": uow.messages.append(
                sid, {"role": "assistant", "content": "delta without a question"}
            ),
        }
        uow.commit()
    return ids


def _found(store: StateStore, query: str, role: str | None = None) -> set[int]:
    return {h.message_id for h in store.search(query, session_id="signs", role=role)}


def test_a_word_with_an_emoji_finds_every_role_that_holds_both(
    store: StateStore, signs: dict[str, int]
) -> None:
    assert _found(store, "deploy 🚀") == {signs["user"], signs["tool"]}
    assert _found(store, "🚀 deploy", role="tool") == {signs["tool"]}
    # The emoji still narrows: a row with the word alone is no hit.
    assert signs["deploy-only"] in _found(store, "deploy")
    _index_is_live(store)


def test_a_lone_surrogate_in_the_query_finds_the_tool_row_that_holds_it(
    store: StateStore, signs: dict[str, int]
) -> None:
    assert _found(store, "build \ud83d") == {signs["surrogate"]}
    assert _found(store, "build \ufffd") == {signs["surrogate"]}
    _index_is_live(store)


@pytest.mark.parametrize("query", ["delta ?", "delta ???", "??? delta", "delta %", "delta 100%"])
def test_a_word_with_punctuation_finds_the_tool_row_and_wildcards_stay_literal(
    store: StateStore, signs: dict[str, int], query: str
) -> None:
    assert _found(store, query) == {signs["question"]}
    _index_is_live(store)


@pytest.mark.parametrize("query", ["???", "🚀"])
def test_a_query_of_signs_alone_finds_every_role(
    store: StateStore, signs: dict[str, int], query: str
) -> None:
    expected = {"???": {signs["question"]}, "🚀": {signs["user"], signs["tool"]}}[query]
    assert _found(store, query) == expected


def test_a_word_with_an_emoji_is_ranked_by_bm25_among_rows_holding_both(
    store: StateStore,
) -> None:
    """The word path's ranking policy holds for such queries: most relevant first,
    and every candidate holds the emoji."""
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="signs")
        uow.messages.append_many(
            sid,
            [
                {
                    "role": "tool" if i % 2 else "user",
                    "content": "ship " * (6 if i % 7 == 0 else 1)
                    + ("🚀" if i % 3 else "")
                    + f" r{i}",
                    "tool_name": "sh" if i % 2 else None,
                }
                for i in range(70)
            ],
        )
        uow.commit()
    # Rows 7, 14, 28, 35, 49, 56 repeat the word and hold the emoji (0, 21, 42, 63 lack it).
    top = store.search("ship 🚀", session_id="signs", limit=6)
    assert all(h.snippet.count("ship") > 1 for h in top)
    assert {h.role for h in top} == {"user", "tool"}
    every = store.search("ship 🚀", session_id="signs", limit=100)
    assert len(every) == len([i for i in range(70) if i % 3]) == 46
    assert all("🚀" in h.snippet for h in every)
