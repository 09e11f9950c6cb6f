"""Hermes state.db files with what Hermes accepts and this store's rules do not, each
built by Hermes Agent's own store code (hermes-agent 0.19.0): nothing is dropped, one odd
value never stops the rest, and a re-import follows what Hermes later rewrote."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.errors import ImportSourceError
from hermes_repo.hermes_import import run
from hermes_repo.hermes_import.mapping import store_session_id
from hermes_repo.hermes_import.run import DELETED_REASON, edited_reason
from tests.support.stores import read_only_rows

hermes_state = pytest.importorskip(
    "hermes_state",
    reason="hermes-agent is not installed: pip install --no-deps hermes-agent==0.19.0",
)

pytestmark = pytest.mark.usefixtures("backend")


def _build(path: Path, write: Callable[[Any], None]) -> Path:
    path.parent.mkdir(exist_ok=True)
    db = hermes_state.SessionDB(db_path=path)
    try:
        write(db)
    finally:
        db.close()
    return path


def _raw(path: Path, *sql: str, args: tuple[Any, ...] = ()) -> None:
    """A change Hermes' own code has no method for, made on its file."""
    conn = sqlite3.connect(path)
    with conn:
        for statement in sql:
            conn.execute(statement, args)
    conn.close()


def _extra(store: StateStore, sid: str) -> dict[str, Any]:
    with store.unit_of_work() as uow:
        return json.loads(uow.sessions.require(sid).extra or "{}")


# Ids Hermes' API server passes through (up to 256 characters, no / \ .. CR LF NUL).
ODD_IDS = ["chat with spaces", "ünïcödé-会话", "x" * 200, "#tag@room", "tab\there"]


def test_sessions_with_ids_this_store_refuses_land_under_a_stable_mapped_id(
    store: StateStore, tmp_path: Path
) -> None:
    def write(db: Any) -> None:
        for sid in ODD_IDS:
            db.create_session(sid, "api_server")
            db.append_message(sid, "user", f"hello from {sid[:10]}")
            db.append_message(sid, "assistant", "hi")
        db.create_session("child_ok", "api_server", parent_session_id=ODD_IDS[0])
        db.append_message("child_ok", "user", "a child of an odd parent")

    src = _build(tmp_path / "h" / "state.db", write)
    report = store.import_hermes_db(src)

    assert report.sessions.imported == len(ODD_IDS) + 1
    assert report.messages.imported == report.messages.read == 2 * len(ODD_IDS) + 1
    assert set(report.mapped_sessions) == set(ODD_IDS)
    for hermes_id, sid in report.mapped_sessions.items():
        assert sid == store_session_id(hermes_id) != hermes_id
        assert _extra(store, sid)["hermes_session_id"] == hermes_id
        assert [m["content"] for m in store.load_conversation(sid).messages][1] == "hi"
        assert any(repr(hermes_id) in w and sid in w for w in report.warnings)
    with store.unit_of_work() as uow:
        child = uow.sessions.require("child_ok")
    assert child.parent_session_id == report.mapped_sessions[ODD_IDS[0]]
    # The mapping depends on the id alone: a re-import finds every row already there.
    again = store.import_hermes_db(src)
    assert (again.sessions.imported, again.messages.imported) == (0, 0)
    assert again.messages.already_present == report.messages.read


def test_nan_and_infinity_in_json_columns_are_kept_and_the_rest_imports(
    store: StateStore, tmp_path: Path
) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}}

    def write(db: Any) -> None:
        db.create_session("s1", "cli")
        db.append_message(
            "s1",
            "assistant",
            None,
            tool_calls=[{**call, "score": float("nan")}],
            reasoning_details=[{"budget": float("inf")}],
        )
        db.append_message("s1", "tool", "ok", tool_call_id="c1", tool_name="t")
        db.append_message("s1", "user", [{"type": "text", "text": "x", "w": float("-inf")}])
        db.append_message("s1", "assistant", "after the odd values")

    src = _build(tmp_path / "h" / "state.db", write)
    (first, *_rest) = read_only_rows(src, "SELECT tool_calls FROM messages ORDER BY id")
    assert "NaN" in first["tool_calls"]  # what Hermes wrote

    report = store.import_hermes_db(src)

    assert report.messages.imported == 4
    loaded = store.load_conversation("s1").messages
    assert loaded[0]["tool_calls"] == [{**call, "score": None}]
    assert loaded[0]["hermes_original_tool_calls"] == first["tool_calls"]
    assert loaded[0]["reasoning_details"] == [{"budget": None}]
    # Kept as the text Hermes wrote (on a server with U+FFFD for its leading U+0000).
    assert loaded[2]["content"][1:].startswith("json:") and "-Infinity" in loaded[2]["content"]
    assert loaded[3]["content"] == "after the odd values"
    text = " | ".join(report.warnings)
    assert "message 1 of session 's1': tool_calls holds NaN" in text
    assert "message 3 of session 's1'" in text


def test_a_nul_character_in_content_is_kept_exactly_or_with_its_original_on_a_server(
    store: StateStore, tmp_path: Path, backend: str
) -> None:
    def write(db: Any) -> None:
        db.create_session("s1", "cli", model="m\x00odel")
        db.append_message("s1", "user", "before\x00after")
        db.append_message("s1", "assistant", "fine", tool_name="to\x00ol")

    src = _build(tmp_path / "h" / "state.db", write)
    report = store.import_hermes_db(src)

    assert report.messages.imported == 2
    first, second = store.load_conversation("s1").messages
    if backend == "sqlite":
        assert first["content"] == "before\x00after" and report.warnings == []
        assert second["tool_name"] == "to\x00ol"
    else:
        assert first["content"] == "before\ufffdafter"
        assert first["hermes_original_content"] == "before\x00after"
        assert second["hermes_original_tool_name"] == "to\x00ol"
        assert _extra(store, "s1")["hermes_original_model"] == "m\x00odel"
        assert any("message 1 of session 's1': content holds U+0000" in w for w in report.warnings)
    assert second["content"] == "fine"


def test_a_parent_cycle_written_by_hermes_upsert_is_cut_and_reported(
    store: StateStore, tmp_path: Path
) -> None:
    def write(db: Any) -> None:
        db.create_session("a", "cli")
        db.create_session("b", "cli", parent_session_id="a")
        db.create_session("a", "cli", parent_session_id="b")  # the upsert fills a's NULL
        db.append_message("a", "user", "in a")
        db.append_message("b", "user", "in b")

    src = _build(tmp_path / "h" / "state.db", write)
    parents = {
        r["id"]: r["parent_session_id"] for r in read_only_rows(src, "SELECT * FROM sessions")
    }
    assert parents == {"a": "b", "b": "a"}

    report = store.import_hermes_db(src)

    assert (report.sessions.imported, report.messages.imported) == (2, 2)
    with store.unit_of_work() as uow:
        a, b = uow.sessions.require("a"), uow.sessions.require("b")
    assert (a.parent_session_id, b.parent_session_id) == (None, "a")
    assert _extra(store, "a")["parent_session_id"] == "b"
    assert any("session 'a'" in w and "cycle" in w for w in report.warnings)


def test_unknown_tables_of_any_kind_are_kept_and_a_blob_content_replays_as_text(
    store: StateStore, tmp_path: Path
) -> None:
    def write(db: Any) -> None:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", b"caf\xe9 au lait")  # Hermes binds bytes as they are
        db.append_message("s1", "assistant", "noted")

    src = _build(tmp_path / "h" / "state.db", write)
    _raw(
        src,
        "CREATE TABLE plugin_kv (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID",
        "INSERT INTO plugin_kv VALUES ('b', '2'), ('a', '1')",
        "CREATE TABLE plugin_notes (session_id TEXT, note TEXT)",
        "INSERT INTO plugin_notes VALUES ('s1', CAST(x'6e6f7465ff' AS TEXT))",
    )
    # A plugin's table whose generated column needs the plugin's own SQL function.
    conn = sqlite3.connect(src)
    conn.create_function("plugin_hash", 1, lambda v: v, deterministic=True)
    with conn:
        conn.execute("CREATE TABLE plugin_cache (k TEXT, h TEXT AS (plugin_hash(k)))")
        conn.execute("INSERT INTO plugin_cache (k) VALUES ('x')")
    conn.close()

    report = store.import_hermes_db(src)

    assert report.messages.imported == 2 and report.skipped_tables == ["plugin_cache"]
    first, second = store.load_conversation("s1").messages
    assert first["content"] == "caf\ufffd au lait"
    assert first["hermes_content_bytes"] == {"$base64": "Y2Fm6SBhdSBsYWl0"}
    assert second["content"] == "noted"
    assert any("message 1 of session 's1': content is a BLOB" in w for w in report.warnings)
    with store.unit_of_work() as uow:
        kept = json.loads(uow.meta.get("hermes_import.plugin_kv") or "[]")
    assert kept == [{"k": "a", "v": "1"}, {"k": "b", "v": "2"}]
    notes = _extra(store, "s1")["hermes_tables"]["plugin_notes"]
    assert notes == [{"session_id": "s1", "note": {"$base64": "bm90Zf8="}}]
    text = " | ".join(report.warnings)
    assert "table 'plugin_kv' is not one Hermes Agent writes" in text
    assert "table 'plugin_notes' is not one Hermes Agent writes" in text
    assert "table 'plugin_cache' could not be read (SQLite says unknown function" in text


def test_a_reimport_follows_retry_undo_compress_and_in_place_edits(
    store: StateStore, tmp_path: Path
) -> None:
    src = tmp_path / "h" / "state.db"

    def write(db: Any) -> None:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "first question")
        db.append_message("s1", "assistant", "first answer")
        db.append_message("s1", "user", "second question")
        db.append_message("s1", "assistant", "a bad answer")
        db.create_session("s2", "cli")
        for i in range(4):
            db.append_message("s2", "user" if i % 2 == 0 else "assistant", f"turn {i}")

    _build(src, write)
    first = store.import_hermes_db(src)
    assert first.messages.imported == 8

    def rewrite(db: Any) -> None:
        # /retry: the transcript is replaced (DELETE + re-INSERT with new ids).
        db.replace_messages(
            "s1",
            [
                {"role": "user", "content": "first question"},
                {"role": "assistant", "content": "first answer"},
                {"role": "user", "content": "second question"},
                {"role": "assistant", "content": "a better answer"},
            ],
        )
        # /compress in place: the live rows archived as compacted, a summary added.
        db.archive_and_compact("s2", [{"role": "user", "content": "[CONTEXT COMPACTION] 4 turns"}])
        db.set_latest_user_api_content("s2", "[CONTEXT COMPACTION] 4 turns", "sent bytes")

    _build(src, rewrite)
    _raw(src, "UPDATE messages SET content = 'turn 0 (edited)' WHERE session_id = 's2' AND id = 5")

    report = store.import_hermes_db(src)

    assert report.messages.imported == 5  # s1's four new rows and s2's summary
    assert report.messages.archived == 4  # s1's old rows, deleted by Hermes
    assert report.messages.updated == 4  # s2's rows compacted by Hermes
    assert report.messages.edited == 1
    assert [m["content"] for m in store.load_conversation("s1").messages] == [
        "first question",
        "first answer",
        "second question",
        "a better answer",
    ]
    (summary,) = store.load_conversation("s2").messages
    assert summary["api_content"] == "sent bytes"
    audit = store.load_conversation("s1", include_inactive=True).messages
    gone = [m for m in audit if m.get("archive_reason") == DELETED_REASON]
    assert [m["content"] for m in gone][3] == "a bad answer"
    audit2 = store.load_conversation("s2", include_inactive=True).messages
    (edited,) = [m for m in audit2 if m["uid"] == "hermes:s2:5"]
    assert edited["content"] == "turn 0 (edited)" and edited["active"] is False
    (previous,) = [m for m in audit2 if m.get("archive_reason") == edited_reason_of(store, 5)]
    assert previous["content"] == "turn 0"
    with store.unit_of_work() as uow:
        assert uow.sessions.require("s1").message_count == 4
        assert uow.sessions.require("s2").message_count == 1
    again = store.import_hermes_db(src)
    counts = again.messages
    assert (counts.imported, counts.archived, counts.updated, counts.edited) == (0, 0, 0, 0)


def edited_reason_of(store: StateStore, hermes_id: int) -> str:
    rows = store.load_conversation("s2", include_inactive=True, with_ids=True).messages
    (row,) = [m for m in rows if m["uid"] == f"hermes:s2:{hermes_id}"]
    return edited_reason(row["id"])


def test_hermes_set_latest_user_api_content_on_an_imported_row_is_applied_with_an_audit(
    store: StateStore, tmp_path: Path
) -> None:
    src = tmp_path / "h" / "state.db"

    def write(db: Any) -> None:
        db.create_session("s1", "telegram")
        db.append_message("s1", "user", "what is the weather")

    _build(src, write)
    store.import_hermes_db(src)
    _build(src, lambda db: db.set_latest_user_api_content("s1", "what is the weather", "[ctx] w"))

    report = store.import_hermes_db(src)

    assert (report.messages.edited, report.messages.imported) == (1, 0)
    rows = store.load_conversation("s1", include_inactive=True, with_ids=True).messages
    live, previous = rows
    assert (live["uid"], live["api_content"]) == ("hermes:s1:1", "[ctx] w")
    assert previous["archive_reason"] == edited_reason(live["id"])
    assert previous["content"] == "what is the weather" and "api_content" not in previous
    assert store.import_hermes_db(src).messages.edited == 0


def test_search_after_a_migration_finds_compacted_history_as_hermes_did_but_not_undone_rows(
    store: StateStore, tmp_path: Path
) -> None:
    def write(db: Any) -> None:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "the zanzibar deployment failed")
        db.append_message("s1", "assistant", "checking the logs")
        db.archive_and_compact("s1", [{"role": "user", "content": "[CONTEXT COMPACTION] 2"}])
        undo_from = db.append_message("s1", "user", "try the quokka mirror")
        db.append_message("s1", "assistant", "done")
        db.rewind_to_message("s1", undo_from)

    src = _build(tmp_path / "h" / "state.db", write)
    hermes = hermes_state.SessionDB(db_path=src)
    try:  # what Hermes' own search finds
        assert [m["session_id"] for m in hermes.search_messages("zanzibar")] == ["s1"]
        assert hermes.search_messages("quokka") == []
    finally:
        hermes.close()

    store.import_hermes_db(src)

    (hit,) = store.search("zanzibar")
    assert hit.session_id == "s1"
    assert store.search("quokka") == []
    assert len(store.search("quokka", include_inactive=True)) == 1
    # The replay is the compacted transcript alone, as in Hermes.
    (live,) = store.load_conversation("s1").messages
    assert live["content"] == "[CONTEXT COMPACTION] 2"


def test_a_session_whose_id_is_not_text_is_imported_with_its_messages(
    store: StateStore, tmp_path: Path
) -> None:
    def write(db: Any) -> None:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello")

    src = _build(tmp_path / "h" / "state.db", write)
    # Another tool wrote the id as bytes that are not UTF-8 (sessions and messages alike).
    _raw(
        src,
        "PRAGMA foreign_keys = OFF",
        "UPDATE sessions SET id = CAST(x'6964ff' AS TEXT) WHERE id = 's1'",
        "UPDATE messages SET session_id = CAST(x'6964ff' AS TEXT) WHERE session_id = 's1'",
    )

    report = store.import_hermes_db(src)

    assert (report.sessions.imported, report.messages.imported) == (1, 1)
    ((_, sid),) = report.mapped_sessions.items()
    assert [m["content"] for m in store.load_conversation(sid).messages] == ["hello"]


def test_two_sessions_that_would_share_a_mapped_id_stop_the_import_before_any_write(
    store: StateStore, tmp_path: Path
) -> None:
    taken = store_session_id("a b")

    def write(db: Any) -> None:
        for sid in ("a b", taken):
            db.create_session(sid, "api_server")
            db.append_message(sid, "user", "hi")

    src = _build(tmp_path / "h" / "state.db", write)
    with pytest.raises(ImportSourceError, match="would both be stored as") as caught:
        store.import_hermes_db(src)
    assert "nothing was imported" in str(caught.value)
    with store.unit_of_work() as uow:
        assert uow.sessions.list(limit=10) == []


def test_search_after_a_migration_finds_words_only_in_tool_call_arguments(
    store: StateStore, tmp_path: Path
) -> None:
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "/etc/frobnicator.yaml"}'},
    }

    def write(db: Any) -> None:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "read my config")
        db.append_message("s1", "assistant", None, tool_calls=[call], finish_reason="tool_calls")
        db.append_message("s1", "tool", "key: value", tool_call_id="c1", tool_name="read_file")

    src = _build(tmp_path / "h" / "state.db", write)
    hermes = hermes_state.SessionDB(db_path=src)
    try:  # what Hermes' own search finds
        found = hermes.search_messages("frobnicator")
    finally:
        hermes.close()
    assert [m["role"] for m in found] == ["assistant"]

    store.import_hermes_db(src)

    (hit,) = store.search("frobnicator")
    assert (hit.session_id, hit.role) == ("s1", "assistant")
    # Only the index reads it: the replayed turn is as Hermes stored it.
    assistant = store.load_conversation("s1").messages[1]
    assert assistant.get("content") is None and assistant["tool_calls"] == [call]


def test_a_session_longer_than_a_unit_of_work_is_written_in_parts_and_followed_whole(
    store: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "BATCH_ROWS", 5)  # the 20,000-message session of a real install
    src = tmp_path / "h" / "state.db"

    def write(db: Any) -> None:
        db.create_session("long", "cli")
        for i in range(12):
            db.append_message("long", "user" if i % 2 == 0 else "assistant", f"turn {i}")
        db.create_session("short", "cli")
        db.append_message("short", "user", "hello")

    _build(src, write)
    report = store.import_hermes_db(src)

    assert (report.sessions.imported, report.sessions.already_present) == (2, 0)
    assert report.messages.imported == 13
    assert [m["content"] for m in store.load_conversation("long").messages] == [
        f"turn {i}" for i in range(12)
    ]
    with store.unit_of_work() as uow:
        assert uow.sessions.require("long").message_count == 12

    # /retry in Hermes: the last two turns replaced; the first part of the session did
    # not change, the archive of what is gone waits for the last part.
    def retry(db: Any) -> None:
        kept = [
            {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"}
            for i in range(10)
        ]
        db.replace_messages(
            "long",
            [
                *kept,
                {"role": "user", "content": "turn 10"},
                {"role": "assistant", "content": "better"},
            ],
        )

    _build(src, retry)
    again = store.import_hermes_db(src)

    assert (again.sessions.imported, again.sessions.already_present) == (0, 2)
    assert (again.messages.imported, again.messages.archived) == (12, 12)
    assert [m["content"] for m in store.load_conversation("long").messages][-1] == "better"
    with store.unit_of_work() as uow:
        assert uow.sessions.require("long").message_count == 12
