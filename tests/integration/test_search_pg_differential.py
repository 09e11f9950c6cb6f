"""One corpus in SQLite and in PostgreSQL: the one search router finds the same messages
through either dialect.

The corpus is written through the store (SQLite, migrations, triggers) and its rows are
copied to PostgreSQL with their ids, so both backends hold exactly the same messages.
Each query runs through :class:`SearchRouter` over :class:`Fts5Dialect` and over
:class:`PostgresDialect` with several filters, and as a page below a message id; the
sets of message ids must be equal (ranking aside: the limit is above every query's hit
count, so the sets are all hits).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from hermes_repo import StateStore
from hermes_repo.repositories.search import (
    Fts5Dialect,
    PostgresDialect,
    SearchHit,
    SearchQuery,
    SearchRouter,
)
from tests.support.pg_search_db import MESSAGE_COLUMNS, copy_rows, pg_database

LIMIT = 1000

# (session, role, content, tool_name, active)
CORPUS: list[tuple[str, str, Any, str | None, bool]] = [
    ("s-en", "system", "You are a careful deployment assistant.", None, True),
    ("s-en", "user", "How do I configure the zebracorn daemon?", None, True),
    ("s-en", "assistant", "Edit zebracorn.toml and restart it with systemctl.", None, True),
    ("s-en", "user", "The deploy failed again on staging-2 at 10:42", None, True),
    ("s-en", "assistant", "Check the e-mail from O'Brien about the rollback.", None, True),
    ("s-en", "tool", "Traceback: ValueError: invalid literal for int()", "python_exec", True),
    ("s-en", "tool", "100% done_with_underscores \\path\\x and 50%_off", "sh", True),
    ("s-en", "user", "Visit https://example.com/docs/install.html for the guide", None, True),
    ("s-en", "assistant", "The quick brown fox jumps over the lazy dog", None, True),
    ("s-en", "user", "old deploy notes that were archived", None, False),
    ("s-en", "assistant", "Version 3.14 of the API; see v2 and 1e5 and abc123", None, True),
    ("s-zh", "user", "服务器部署失败，请检查日志", None, True),
    ("s-zh", "assistant", "今天天气很好，我们去公园散步吧", None, True),
    ("s-zh", "tool", "错误：连接超时，请稍后重试", "http_get", True),
    ("s-zh", "tool", "connection refused on port 5432", "http_get", True),
    ("s-zh", "user", [{"type": "text", "text": "北京欢迎你"}, {"type": "image_url"}], None, True),
    ("s-zh", "assistant", "部署 deploy 混合 text 中文 English", None, True),
    ("s-zh", "user", "旧的部署记录", None, False),
    ("s-ja", "user", "サーバーの再起動が必要です", None, True),
    ("s-ja", "assistant", "東京の天気は晴れです。ひらがなとカタカナ", None, True),
    ("s-ja", "tool", "ログファイルが見つかりません: /var/log/app.log", "read_file", True),
    ("s-ja", "user", "한국어 텍스트도 있습니다 서버", None, True),
    ("s-mix", "user", "Café déjà vu, naïve résumé", None, True),
    ("s-mix", "assistant", "cafe deja vu without accents", None, True),
    ("s-mix", "user", "NEAR( \" * - % _ '; drop table messages; --", None, True),
    ("s-mix", "assistant", "Party time 🎉🎉 with emoji 🚀 and a rocket", None, True),
    ("s-mix", "tool", "🚀 launched; status=OK (exit 0)", "launcher", True),
    ("s-mix", "user", "What? Really?? Yes!!!", None, True),
    ("s-mix", "assistant", "AND OR NOT are just words here: NOT a problem", None, True),
    ("s-mix", "user", "col:value ^caret {braces} [brackets] back\\slash", None, True),
    ("s-mix", "tool", "SELECT * FROM users WHERE name LIKE '%bob%'", "sql", True),
    ("s-mix", "user", "email me at dev@hermes.example or call +1-555-0100", None, True),
    ("s-mix", "assistant", "Temperature: -5°C, 23°F; 50 µs latency", None, True),
    ("s-mix", "user", "Ünïcödé ÜPPER lower MiXeD case", None, True),
    ("s-mix", "tool", "deploy log: step 1 ok, step 2 ok, step 3 FAILED", "deployer", True),
    ("s-mix", "tool", "混合 tool 输出 with deploy", "deployer", True),
    ("s-mix", "user", "archived emoji 🎉 message", None, False),
    ("s-mix", "assistant", "tabs\tand\nnewlines\r\nin text", None, True),
    # Turns that call tools, with and without text: CALLS holds their calls.
    ("s-call", "assistant", "Let me read the frontend config first.", None, True),
    ("s-call", "assistant", None, None, True),
    ("s-call", "assistant", "检查配置", None, True),
    ("s-call", "assistant", "an archived call", None, False),
]

# Tool calls of the CORPUS rows at these positions (the last rows above).
_CALL_ROWS = len(CORPUS) - 4
CALLS: dict[int, list[dict[str, Any]]] = {
    _CALL_ROWS + k: [
        {"id": f"call_{k}", "type": "function", "function": {"name": name, "arguments": args}}
    ]
    for k, (name, args) in enumerate(
        [
            ("read_file", '{"path": "/etc/nginx/frobnicator.conf", "offset": 40}'),
            ("grep_logs", '{"pattern": "quokka timeout", "dir": "/var/log/app"}'),
            ("search_docs", '{"query": "服务器配置文件路径 nginx"}'),
            ("terminal", '{"command": "archivedcall --now"}'),
        ]
    )
}

QUERIES = [
    # words, case, accents
    "deploy",
    "Deploy",
    "DEPLOY",
    "zebracorn",
    "zebracorn daemon",
    "configure zebracorn",
    "cafe",
    "café",
    "CAFÉ",
    "deja",
    "resume",
    "naive",
    "unicode",
    "upper",
    "mixed",
    "nonexistentword",
    # phrases
    '"quick brown"',
    '"brown quick"',
    '"deja vu"',
    '"lazy dog"',
    '"the deploy failed"',
    # punctuation inside words
    "e-mail",
    "O'Brien",
    "zebracorn.toml",
    "example.com",
    "install.html",
    "staging-2",
    "10:42",
    "3.14",
    "v2",
    "1e5",
    "abc123",
    "dev@hermes.example",
    "+1-555-0100",
    "done_with_underscores",
    "python_exec",
    "read_file",
    "int()",
    # substrings and prefixes (fallback when no word matches)
    "deplo",
    "zebra",
    "corn",
    "ployment",
    "ep",
    "ab",
    "DEPLO",
    "ZEBRA",
    "部署 DEPLOY",
    "混合 TO",
    # CJK of every length
    "部",
    "部署",
    "服务器",
    "部署失败",
    "服务器部署失败",
    "超时",
    "连接超时",
    "北京",
    "欢迎你",
    "再起動",
    "サーバー",
    "ひらがな",
    "天気",
    "ログファイル",
    "서버",
    "한국어",
    "部署 deploy",
    "混合 deploy",
    "失败 zz",
    # emoji, signs, hostile text
    "🎉",
    "🚀",
    "🎉🎉",
    "?",
    "??",
    "!!!",
    "%",
    "_",
    "%bob%",
    "50%_off",
    "\\path",
    "back\\slash",
    "'",
    "--",
    "NEAR(",
    "NEAR( \" * - % _ '; drop",
    "*",
    "-",
    '"',
    'say "unbalanced',
    "AND",
    "NOT a",
    "OR",
    "col:value",
    "^caret",
    "{braces}",
    "[brackets]",
    "°C",
    "µs",
    "deploy 🎉",
    "rocket 🚀",
    "\x00deploy",
    "   ",
    "tool",
    "launcher",
    "deployer",
    # words only in tool calls' names and arguments
    "frobnicator",
    "frobnicator.conf",
    "nginx",
    "quokka",
    "quokka timeout",
    "grep_logs",
    "search_docs",
    "配置文件",
    "配置文件路径",
    "archivedcall",
    "frontend nginx",
]

FILTERS: list[dict[str, Any]] = [
    {},
    {"include_inactive": True},
    {"role": "tool"},
    {"role": "user"},
    {"session_id": "s-mix"},
    {"session_id": "s-zh", "include_inactive": True},
    # A page of a walk: the hits below the corpus's middle message, newest first.
    {"before_id": len(CORPUS) // 2},
    {"before_id": len(CORPUS) // 2, "include_inactive": True},
]


def _message(role: str, content: Any, tool_name: str | None, i: int) -> dict[str, Any]:
    out: dict[str, Any] = {"role": role, "content": content, "uid": f"u{i}"}
    if i in CALLS:
        out["tool_calls"] = CALLS[i]
    if tool_name:
        out["tool_name"] = tool_name
        out["tool_call_id"] = f"call-{i}"
    return out


@pytest.fixture(scope="module")
def backends(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StateStore, Engine]]:
    with pg_database() as engine:
        home: Path = tmp_path_factory.mktemp("differential")
        store = StateStore.open(home)
        try:
            sessions = sorted({row[0] for row in CORPUS})
            with store.unit_of_work() as uow:
                for sid in sessions:
                    uow.sessions.create(id=sid)
                for i, (sid, role, content, tool, _active) in enumerate(CORPUS):
                    uow.messages.append(sid, _message(role, content, tool, i))
                for i, (sid, _role, _c, _t, active) in enumerate(CORPUS):
                    if not active:
                        uow.messages.set_active(sid, f"u{i}", False, reason="test")
                for sid in sessions:
                    uow.messages.recount(sid)
                uow.commit()
            cols = ", ".join(MESSAGE_COLUMNS)
            rows = store.read(
                lambda c: [tuple(r) for r in c.execute(text(f"SELECT {cols} FROM messages"))]
            )
            copy_rows(engine, sessions, rows)
            yield store, engine
        finally:
            store.close()


def _ids(hits: list[SearchHit]) -> set[int]:
    return {h.message_id for h in hits}


def _on_sqlite(store: StateStore, query: SearchQuery) -> list[SearchHit]:
    return store.read(lambda conn: SearchRouter(Fts5Dialect(conn)).search(query))


def _on_postgresql(engine: Engine, query: SearchQuery) -> list[SearchHit]:
    with engine.connect() as conn:
        return SearchRouter(PostgresDialect(conn)).search(query)


def test_the_query_list_covers_the_whole_language() -> None:
    assert len(QUERIES) >= 60
    assert len(set(QUERIES)) == len(QUERIES)


@pytest.mark.pg
@pytest.mark.parametrize("query", QUERIES)
def test_the_postgresql_dialect_finds_the_same_messages_as_the_fts5_dialect(
    backends: tuple[StateStore, Engine], query: str
) -> None:
    store, engine = backends
    for filters in FILTERS:
        asked = SearchQuery(query, limit=LIMIT, **filters)
        expected = _ids(_on_sqlite(store, asked))
        got = _on_postgresql(engine, asked)
        assert _ids(got) == expected, (query, filters)
        assert len(got) == len(_ids(got)), "a message came back twice"


@pytest.mark.pg
@pytest.mark.parametrize("query", QUERIES[::7])
def test_the_store_searches_through_its_backends_dialect(
    backends: tuple[StateStore, Engine], query: str
) -> None:
    """The store's search (the driver cursor, the index's liveness) is the router over
    the FTS5 dialect: the same hits in the same order."""
    store, _ = backends
    for filters in FILTERS:
        if "before_id" in filters:
            continue  # the store pages through search_page (tests/integration/test_search_paging)
        assert store.search(query, limit=LIMIT, **filters) == _on_sqlite(
            store, SearchQuery(query, limit=LIMIT, **filters)
        ), (query, filters)


@pytest.mark.pg
def test_the_corpus_makes_the_comparison_meaningful(backends: tuple[StateStore, Engine]) -> None:
    """Most queries find something and some find nothing: equal empty sets prove nothing."""
    store, _ = backends
    found = [q for q in QUERIES if store.search(q, limit=LIMIT, include_inactive=True)]
    assert len(found) >= 0.75 * len(QUERIES)
    assert len(QUERIES) - len(found) >= 2


@pytest.mark.pg
def test_hits_carry_the_row_and_a_marked_snippet(backends: tuple[StateStore, Engine]) -> None:
    store, engine = backends
    for query, marked in [("zebracorn", "zebracorn"), ("部署", "部署"), ("🚀", "🚀")]:
        hits = _on_postgresql(engine, SearchQuery(query))
        sqlite = {h.message_id: h for h in store.search(query)}
        assert hits and {h.message_id for h in hits} == set(sqlite)
        for hit in hits:
            assert f">>>{marked}<<<" in hit.snippet.lower()
            twin = sqlite[hit.message_id]
            assert (hit.session_id, hit.role, hit.timestamp) == (
                twin.session_id,
                twin.role,
                twin.timestamp,
            )


@pytest.mark.pg
@pytest.mark.parametrize(
    ("query", "position"),
    [
        ("frobnicator", 0),  # an argument of a turn with text content
        ("grep_logs", 1),  # a function name of a turn without text
        ("quokka timeout", 1),
        ("配置文件路径", 2),  # CJK inside arguments: the trigram side
    ],
)
def test_a_word_only_in_a_tool_call_is_found_by_both_dialects_with_a_snippet(
    backends: tuple[StateStore, Engine], query: str, position: int
) -> None:
    store, engine = backends
    (row_id,) = store.read(
        lambda c: [
            r[0]
            for r in c.execute(
                text("SELECT id FROM messages WHERE uid = :uid"),
                {"uid": f"u{_CALL_ROWS + position}"},
            )
        ]
    )
    asked = SearchQuery(query, limit=LIMIT)
    for hits in (_on_sqlite(store, asked), _on_postgresql(engine, asked)):
        (hit,) = hits
        assert hit.message_id == row_id
        assert ">>>" in hit.snippet, hit.snippet
