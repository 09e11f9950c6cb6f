"""File names derived from session ids never collide, and replay checks the session
named inside each record.

Before: session ``chat.pending`` salvaging to ``chat.pending.jsonl`` wrote into the
retry queue of session ``chat`` (and was replayed into it); ``Chat-1`` and ``chat-1``
shared a file on a case-insensitive filesystem.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_repo import StateStore
from hermes_repo.transcript import spool
from tests.support.spooling import stored

SUFFIXES = (spool.PENDING_SUFFIX, spool.REJECTED_SUFFIX, spool.HOLD_SUFFIX)

session_ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", fullmatch=True).filter(
    lambda s: ".." not in s
)


def _message(text: str, uid: str) -> dict[str, Any]:
    return {"role": "user", "content": text, "timestamp": 1_772_000_000.0, "uid": uid}


@settings(max_examples=400, deadline=None)
@given(a=session_ids, b=session_ids, sa=st.sampled_from(SUFFIXES), sb=st.sampled_from(SUFFIXES))
def test_names_are_injective_and_case_fold_safe(a: str, b: str, sa: str, sb: str) -> None:
    na, nb = spool.pending_name(a, sa), spool.pending_name(b, sb)
    if (a, sa) != (b, sb):
        assert na.casefold() != nb.casefold(), (a, sa, b, sb)
    # The name reads back as exactly the id and kind it was made from.
    assert spool.parse_name(na) == (a, sa)
    # The sid part is lower case with no dot; the first dot starts the suffix.
    stem = na.partition(".")[0]
    assert stem == stem.lower() and "." + na.partition(".")[2] == sa
    assert len(na + ".lock") <= 255


def test_names_of_common_ids_stay_as_they_are() -> None:
    for sid in ("20260301_101500_ab12cd34ef56", "telegram:12345", "cli-1", "a_b"):
        assert spool.pending_name(sid) == sid + ".pending.jsonl"
        assert spool.pending_name(sid, spool.HOLD_SUFFIX) == sid + ".jsonl"


def test_case_and_dots_are_encoded_in_names() -> None:
    assert spool.pending_name("Chat-1") == "chat-1=1.pending.jsonl"
    assert spool.pending_name("chat.pending", spool.HOLD_SUFFIX) == "chat+pending.jsonl"
    assert re.fullmatch(r"[a-z0-9_:+=-]+", spool.encode_session_id("Chat.V2"))


def test_salvage_of_a_dotted_session_is_never_replayed_into_another(home: Path) -> None:
    # Session "chat.pending" salvages while the file is damaged; session "chat" has a
    # retry queue of its own. Before, both were "chat.pending.jsonl".
    spool.append_messages(
        home, "chat.pending", [_message("salvaged", "s-1")], suffix=spool.HOLD_SUFFIX
    )
    spool.append_messages(home, "chat", [_message("queued", "q-1")])
    with StateStore.open(home) as store:
        assert store.last_replay is not None
        assert store.last_replay.inserted == 1
    assert [r["content"] for r in stored(home, "chat")] == ["queued"]
    assert stored(home, "chat.pending") == []
    salvage = spool.list_pending(home, suffix=spool.HOLD_SUFFIX)
    assert [(f.session_id, f.records) for f in salvage] == [("chat.pending", 1)]


def test_ids_differing_in_case_get_separate_files_and_replays(home: Path) -> None:
    spool.append_messages(home, "Chat-1", [_message("upper", "u-1")])
    spool.append_messages(home, "chat-1", [_message("lower", "l-1")])
    names = sorted(p.name for p in spool.sessions_dir(home).glob("*.pending.jsonl"))
    assert len({n.casefold() for n in names}) == 2
    with StateStore.open(home):
        pass
    assert [r["content"] for r in stored(home, "Chat-1")] == ["upper"]
    assert [r["content"] for r in stored(home, "chat-1")] == ["lower"]


def test_records_carry_their_session_id(home: Path) -> None:
    path = spool.append_messages(home, "Chat.v2", [_message("x", "u-1")], at=5.0)
    record = json.loads(path.read_bytes().splitlines()[0])
    assert record == {
        "_fallback_timestamp": 5.0,
        "session_id": "Chat.v2",
        "message": _message("x", "u-1"),
    }


def test_record_of_another_session_is_kept_not_replayed(home: Path) -> None:
    folder = spool.sessions_dir(home)
    folder.mkdir(mode=0o700)
    foreign = json.dumps(
        {"_fallback_timestamp": 1.0, "session_id": "other", "message": _message("x", "f-1")}
    ).encode()
    own = json.dumps(
        {"_fallback_timestamp": 1.0, "session_id": "chat", "message": _message("y", "o-1")}
    ).encode()
    (folder / "chat.pending.jsonl").write_bytes(foreign + b"\n" + own + b"\n")
    listed = spool.list_pending(home)
    assert [(f.session_id, f.records, f.bad_lines) for f in listed] == [("chat", 1, 1)]
    with StateStore.open(home) as store:
        report = store.last_replay
    assert report is not None and (report.inserted, report.kept) == (1, 1)
    assert [r["content"] for r in stored(home, "chat")] == ["y"]
    assert stored(home, "other") == []
    # Kept for an operator with the reason, its bytes exact, never in a retry queue again.
    [kept] = (folder / "chat.rejected.jsonl").read_bytes().splitlines()
    record = json.loads(kept)
    assert record["raw"].encode("utf-8", "surrogateescape") == foreign
    assert "other" in record["_rejected"]
    assert not (folder / "chat.pending.jsonl").exists()


def test_files_spooled_under_the_previous_names_are_listed_and_replayed(home: Path) -> None:
    folder = spool.sessions_dir(home)
    folder.mkdir(mode=0o700)
    old = {
        "Chat-1.pending.jsonl": _message("old upper", "o-1"),
        "chat.v2.pending.jsonl": _message("old dotted", "o-2"),
        "x.pending.pending.jsonl": _message("old pending-suffixed", "o-3"),
    }
    for name, m in old.items():
        (folder / name).write_text(json.dumps({"_fallback_timestamp": 1.0, "message": m}) + "\n")
    (folder / "Chat-1.rejected.jsonl").write_text('{"torn\n')
    (folder / "Chat-1.jsonl").write_text(json.dumps(_message("salvaged", "o-4")) + "\n")
    pending = {f.session_id: f.records for f in spool.list_pending(home)}
    assert pending == {"Chat-1": 1, "chat.v2": 1, "x.pending": 1}
    rejected = spool.list_pending(home, suffix=spool.REJECTED_SUFFIX)
    assert [(f.session_id, f.bad_lines) for f in rejected] == [("Chat-1", 1)]
    salvage = spool.list_pending(home, suffix=spool.HOLD_SUFFIX)
    assert [(f.session_id, f.records) for f in salvage] == [("Chat-1", 1)]
    with StateStore.open(home, replay=False) as store:
        assert store.health().pending_files == 3
        # Recovery of one session finds its old file as well as the current one.
        spool.append_messages(home, "Chat-1", [_message("new upper", "n-1")])
        report = store.replay_pending(session_id="Chat-1")
        assert (report.files, report.inserted) == (2, 2)
        assert store.replay_pending().inserted == 2
    assert [r["content"] for r in stored(home, "Chat-1")] == ["old upper", "new upper"]
    assert [r["content"] for r in stored(home, "chat.v2")] == ["old dotted"]
    assert [r["content"] for r in stored(home, "x.pending")] == ["old pending-suffixed"]
    assert spool.list_pending(home) == []


def _both_names(home: Path, session_id: str) -> None:
    """An older record under the previous version's name, a newer one under today's."""
    folder = spool.sessions_dir(home)
    folder.mkdir(mode=0o700, exist_ok=True)
    legacy = folder / f"{session_id}{spool.PENDING_SUFFIX}"
    legacy.write_text(
        json.dumps({"_fallback_timestamp": 1.0, "message": _message("older", "b-1")}) + "\n"
    )
    spool.append_messages(home, session_id, [_message("newer", "b-2")])
    current = spool.pending_name(session_id)
    # Today's name sorts first: only a deliberate order keeps the conversation's order.
    assert current != legacy.name and sorted([current, legacy.name])[0] == current


def test_recovery_replays_the_previous_name_of_a_session_before_the_current_one(
    home: Path,
) -> None:
    _both_names(home, "x.y")
    with StateStore.open(home, replay=False) as store:
        report = store.replay_pending()
    assert (report.files, report.inserted) == (2, 2)
    assert [r["content"] for r in stored(home, "x.y")] == ["older", "newer"]


def test_a_flush_writes_the_backlog_under_both_names_first_in_order(home: Path) -> None:
    _both_names(home, "x.y")
    with StateStore.open(home, replay=False) as store:
        result = store.transcript_writer("x.y").flush([_message("newest", "b-3")])
    assert result.ok and result.written == 1
    assert [r["content"] for r in stored(home, "x.y")] == ["older", "newer", "newest"]
    assert spool.list_pending(home) == []
