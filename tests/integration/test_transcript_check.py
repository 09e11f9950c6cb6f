"""The operator's transcript check (read-only) and per-session / store-wide repair."""

from __future__ import annotations

from contextlib import closing

import pytest

from hermes_repo import NotFoundError, StateStore
from hermes_repo.ops.transcript_check import (
    check_transcripts,
    repair_session,
    repair_transcripts,
)
from hermes_repo.transcript.repair import (
    RULE_DUPLICATE_TOOL,
    RULE_MERGE_ASSISTANT,
    RULE_MERGE_USER,
    RULE_ORPHAN_TOOL,
    RULE_UNMERGEABLE_ASSISTANT,
)
from tests.support.transcripts import EXPECTED_ARCHIVED, MALFORMED, raw_connect, rows_of, seed

USERS_TWICE = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
CLEAN = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]


def test_check_counts_sessions_and_rows_per_invariant_and_writes_nothing(
    store: StateStore,
) -> None:
    malformed, _ = seed(store, MALFORMED)
    users, _ = seed(store, USERS_TWICE)
    seed(store, CLEAN)
    with closing(raw_connect(store)) as watcher:
        version = watcher.execute("PRAGMA data_version").fetchone()[0]
        report = check_transcripts(store)
        assert watcher.execute("PRAGMA data_version").fetchone()[0] == version

    assert report.sessions_checked == 3
    assert report.rows_checked == len(MALFORMED) + 4
    assert [s.session_id for s in report.sessions] == sorted([malformed, users])
    assert report.sessions_violating == 2 and report.rows_violating == 5
    assert report.by_rule == {
        RULE_MERGE_ASSISTANT: 1,
        RULE_MERGE_USER: 2,
        RULE_ORPHAN_TOOL: 1,
        RULE_DUPLICATE_TOOL: 1,
        RULE_UNMERGEABLE_ASSISTANT: 0,
    }
    assert report.alternation == (2, 3)
    assert report.tool_pairing == (1, 2)
    as_json = report.as_dict()
    assert as_json["ok"] is False and as_json["sessions_violating"] == 2
    by_sid = {s["session_id"]: s for s in as_json["sessions"]}
    assert by_sid[users]["by_rule"] == {RULE_MERGE_USER: 1}
    assert by_sid[malformed]["tool_pairing_rows"] == 2


def test_check_ignores_archived_rows_and_passes_after_repair(store: StateStore) -> None:
    seed(store, MALFORMED)
    seed(store, USERS_TWICE)
    summary = repair_transcripts(store)
    assert summary.sessions_repaired == 2
    assert summary.repairs == len(EXPECTED_ARCHIVED) + 1
    assert summary.rows_updated == 3
    after = check_transcripts(store)
    assert after.ok and after.rows_violating == 0
    assert after.rows_checked == len(MALFORMED) - len(EXPECTED_ARCHIVED) + 1
    # Nothing left: a second run changes nothing.
    assert repair_transcripts(store).repairs == 0


def test_repair_session_reports_what_changed(store: StateStore) -> None:
    sid, ids = seed(store, MALFORMED)
    other, _ = seed(store, USERS_TWICE)
    rows_before = rows_of(store, other)
    change = repair_session(store, sid)
    assert change.repairs == 4
    assert change.updated_ids == (ids[1], ids[4])
    assert {a.id: a.reason for a in change.archived} == {
        ids[2]: f"merge_user into #{ids[1]}",
        ids[5]: f"merge_assistant into #{ids[4]}",
        ids[7]: "duplicate_tool_result",
        ids[9]: "orphan_tool_result",
    }
    assert change.counters_before == (12, 2) and change.counters_after == (8, 2)
    assert change.as_dict()["archived"][0]["reason"] == f"merge_user into #{ids[1]}"
    # Only that session moved.
    assert len(rows_before) == 2 and rows_of(store, other) == rows_before
    # A second repair is a no-op that writes nothing.
    with closing(raw_connect(store)) as watcher:
        version = watcher.execute("PRAGMA data_version").fetchone()[0]
        again = repair_session(store, sid)
        assert watcher.execute("PRAGMA data_version").fetchone()[0] == version
    assert again.repairs == 0 and again.rows_written == 0 and again.archived == ()


def test_repair_session_of_an_unknown_session_says_so(store: StateStore) -> None:
    with pytest.raises(NotFoundError, match="sessions list"):
        repair_session(store, "no_such_session")


def test_a_group_chat_of_different_speakers_is_not_a_violation(store: StateStore) -> None:
    group, _ = seed(
        store,
        [
            {"role": "user", "content": "hi", "name": "alice"},
            {"role": "user", "content": "hello", "name": "bob"},
            {"role": "user", "content": {"type": "input_text", "text": "a dict"}, "name": "bob"},
            {"role": "assistant", "content": "welcome both"},
        ],
    )
    same, _ = seed(
        store,
        [
            {"role": "user", "content": "one", "name": "alice"},
            {"role": "user", "content": "two", "name": "alice"},
        ],
    )
    report = check_transcripts(store)
    # Only the same speaker's two text turns break alternation; the check reads the
    # flagged sessions whole to tell them apart.
    assert [s.session_id for s in report.sessions] == [same]
    summary = repair_transcripts(store)
    assert summary.repairs == 1
    assert check_transcripts(store).ok
    assert [m["content"] for m in store.load_conversation(group).messages] == [
        "hi",
        "hello",
        {"type": "input_text", "text": "a dict"},
        "welcome both",
    ]
