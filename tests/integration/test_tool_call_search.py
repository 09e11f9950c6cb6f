"""Search finds the words of tool calls (function names and arguments) of every message,
with or without text content, however the message was written: the store's API
(append, flush) or an import of a Hermes Agent state.db, as Hermes' own search does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.codec import calls_text
from hermes_repo.repositories.search import SNIPPET_CLOSE, SNIPPET_OPEN

pytestmark = pytest.mark.usefixtures("backend")


def _call(name: str, arguments: str, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _marked(word: str) -> str:
    return f"{SNIPPET_OPEN}{word}{SNIPPET_CLOSE}"


@pytest.fixture(autouse=True)
def _session(request: pytest.FixtureRequest) -> None:
    if "store" not in request.fixturenames:
        return
    store: StateStore = request.getfixturevalue("store")
    with store.unit_of_work() as uow:
        uow.sessions.create(id="s1")
        uow.commit()


def test_a_word_only_in_the_arguments_of_an_appended_turn_with_text_is_found_with_a_snippet(
    store: StateStore,
) -> None:
    turn = {
        "role": "assistant",
        "content": "Let me look at the deployment settings first.",
        "tool_calls": [_call("read_file", '{"path": "/srv/app/frobnicator.yaml"}')],
    }
    store.append_message("s1", {"role": "user", "content": "why does the deploy fail?"})
    row_id = store.append_message("s1", turn)

    (hit,) = store.search("frobnicator")
    assert (hit.message_id, hit.role) == (row_id, "assistant")
    assert _marked("frobnicator") in hit.snippet
    assert "read_file path" in hit.snippet  # the call's name, then its arguments
    (by_name,) = store.search("read_file")
    assert by_name.message_id == row_id
    # A word of the text and one of the arguments: the same row holds both.
    assert [h.message_id for h in store.search("deployment frobnicator")] == [row_id]
    # The index reads a derived column: the replayed turn is exactly what was appended.
    replayed = store.load_conversation("s1").messages[1]
    assert replayed["tool_calls"] == turn["tool_calls"] and "calls_text" not in replayed


def test_a_turn_that_only_calls_tools_is_found_by_its_arguments(store: StateStore) -> None:
    calls = [
        _call("grep_logs", '{"pattern": "quokka", "dir": "/var/log"}', "c1"),
        _call("terminal", '{"command": "systemctl restart wombatd"}', "c2"),
    ]
    row_id = store.append_message("s1", {"role": "assistant", "content": None, "tool_calls": calls})

    for word in ("quokka", "wombatd", "grep_logs", "systemctl"):
        (hit,) = store.search(word)
        assert hit.message_id == row_id, word
        # (PostgreSQL marks each token of grep_logs on its own.)
        assert (
            f"logs{SNIPPET_CLOSE}" in hit.snippet
            if word == "grep_logs"
            else _marked(word) in hit.snippet
        )


def test_a_word_after_an_escaped_newline_or_quote_in_arguments_is_a_word_of_its_own(
    store: StateStore,
) -> None:
    # Arguments are JSON text: a newline is the two characters backslash n. Read raw,
    # the word after it would be indexed as "nzanzibar".
    args = json.dumps({"command": "cd /srv/app\nzanzibar --flag", "note": 'say "capybara"'})
    row_id = store.append_message(
        "s1", {"role": "assistant", "content": "running it", "tool_calls": [_call("sh", args)]}
    )

    assert [h.message_id for h in store.search("zanzibar")] == [row_id]
    assert [h.message_id for h in store.search("capybara")] == [row_id]


def test_cjk_in_arguments_is_found_by_substring(store: StateStore) -> None:
    args = json.dumps({"query": "服务器配置文件路径"}, ensure_ascii=False)
    row_id = store.append_message(
        "s1", {"role": "assistant", "content": "searching", "tool_calls": [_call("docs", args)]}
    )

    assert [h.message_id for h in store.search("配置文件")] == [row_id]


def test_tool_calls_written_by_a_flush_are_searchable(store: StateStore) -> None:
    messages = [
        {"role": "user", "content": "list the backups"},
        {
            "role": "assistant",
            "content": "Listing them now.",
            "tool_calls": [_call("terminal", '{"command": "ls /mnt/platypus-backups"}')],
        },
        {"role": "tool", "content": "a.tar b.tar", "tool_call_id": "call_1"},
    ]
    result = store.transcript_writer("s1").flush(messages)
    assert (result.written, result.ok) == (3, True)

    (hit,) = store.search("platypus")
    assert hit.role == "assistant" and _marked("platypus") in hit.snippet


def test_archived_turns_are_searchable_by_their_calls_only_when_asked(store: StateStore) -> None:
    turn = {
        "role": "assistant",
        "content": "retrying",
        "tool_calls": [_call("fetch", '{"url_hint": "narwhalpage"}')],
        "uid": "t1",
    }
    store.append_message("s1", turn)
    with store.unit_of_work() as uow:
        uow.messages.set_active("s1", "t1", False, reason="test")
        uow.commit()

    assert store.search("narwhalpage") == []
    assert len(store.search("narwhalpage", include_inactive=True)) == 1


def test_the_searchable_text_of_calls_reads_names_and_decoded_arguments() -> None:
    calls = [
        _call("read_file", '{"path": "/a/b.txt", "lines": [1, 20], "follow": true}'),
        {"name": "anthropic_style", "input": {"q": "wombat"}},
        _call("broken", '{"path": "/never/closed'),
        "not a call",
    ]
    assert calls_text(calls) == (
        "read_file path /a/b.txt lines 1 20 follow anthropic_style q wombat "
        'broken {"path": "/never/closed'
    )
    assert calls_text([]) is None and calls_text(None) is None
    assert calls_text([_call("x\x00y", '"\ud800"')]) == "x\ufffdy \ufffd"


# -- a Hermes Agent state.db ------------------------------------------------------------


def test_a_hermes_turn_with_text_and_tool_calls_is_found_by_its_arguments_after_import(
    store: StateStore, tmp_path: Path
) -> None:
    hermes_state = pytest.importorskip(
        "hermes_state",
        reason="hermes-agent is not installed: pip install --no-deps hermes-agent==0.19.0",
    )
    call = _call("read_file", '{"path": "/etc/axolotl.conf"}')
    src = tmp_path / "h" / "state.db"
    src.parent.mkdir()
    db = hermes_state.SessionDB(db_path=src)
    try:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "read my config")
        db.append_message("s1", "assistant", "Reading it now.", tool_calls=[call])
        db.append_message("s1", "tool", "key: value", tool_call_id="call_1", tool_name="read_file")
        hermes_found = [m["role"] for m in db.search_messages("axolotl")]
    finally:
        db.close()
    assert hermes_found == ["assistant"]

    store.import_hermes_db(src)

    (hit,) = store.search("axolotl")
    assert (hit.session_id, hit.role) == ("s1", "assistant")
    assert _marked("axolotl") in hit.snippet
    # A re-import of the unchanged file changes nothing: the derived text is no edit.
    again = store.import_hermes_db(src)
    assert (again.messages.imported, again.messages.edited) == (0, 0)


def test_accented_cjk_and_escaped_words_in_hermes_arguments_are_found_where_hermes_misses_them(
    store: StateStore, tmp_path: Path
) -> None:
    hermes_state = pytest.importorskip(
        "hermes_state",
        reason="hermes-agent is not installed: pip install --no-deps hermes-agent==0.19.0",
    )
    args = json.dumps({"command": "cat café.txt\nnarwhal", "query": "服务器配置文件路径"})
    src = tmp_path / "h" / "state.db"
    src.parent.mkdir()
    db = hermes_state.SessionDB(db_path=src)
    try:
        db.create_session("s2", "cli")
        db.append_message("s2", "assistant", "Looking.", tool_calls=[_call("sh", args)])
        # Hermes indexes the calls' JSON as written: escapes, not the characters.
        assert [db.search_messages(w) for w in ("café", "narwhal", "配置文件")] == [[], [], []]
    finally:
        db.close()

    store.import_hermes_db(src)

    for word in ("café", "cafe", "narwhal", "配置文件"):
        assert [h.session_id for h in store.search(word)] == ["s2"], word


def test_a_nul_in_arguments_is_stored_and_the_words_around_it_are_found(store: StateStore) -> None:
    # A server's text cannot hold U+0000: the call keeps it (JSON escapes it), its
    # searchable text holds U+FFFD instead, so the append succeeds on every backend.
    calls = [_call("sh", json.dumps({"command": "printf 'a\x00b' > ocelot.bin"}))]
    row_id = store.append_message("s1", {"role": "assistant", "content": "ok", "tool_calls": calls})

    assert [h.message_id for h in store.search("ocelot")] == [row_id]
    assert store.load_conversation("s1").messages[0]["tool_calls"] == calls


def test_a_repair_that_unites_two_turns_calls_keeps_every_call_searchable_in_the_survivor(
    store: StateStore,
) -> None:
    first = {
        "role": "assistant",
        "content": "let me look",
        "tool_calls": [_call("read_file", '{"path": "/srv/ibex.conf"}', "c1")],
    }
    second = {  # a second assistant turn in a row: the repair unites it into the first
        "role": "assistant",
        "content": "and this",
        "tool_calls": [_call("grep", '{"pattern": "tapir"}', "c2")],
    }
    store.append_message("s1", {"role": "user", "content": "check both"})
    survivor = store.append_message("s1", first)
    store.append_message("s1", second)
    for cid in ("c1", "c2"):
        store.append_message("s1", {"role": "tool", "content": "ok", "tool_call_id": cid})

    assert store.load_conversation("s1", repair=True).repairs >= 1

    # The survivor now holds both calls: each word finds it, the archived turn only
    # when asked.
    assert [h.message_id for h in store.search("tapir")] == [survivor]
    assert [h.message_id for h in store.search("ibex")] == [survivor]
    assert len(store.search("tapir", include_inactive=True)) >= 2
