"""A flush list reusing a uid for a different message, and refused values JSON cannot
say: reported and kept, never silently dropped or written as invalid JSON."""

from __future__ import annotations

from pathlib import Path

from hermes_repo import StateStore
from hermes_repo.transcript import spool
from tests.support.spooling import stored
from tests.support.strict_json import strict_json


def _rejected_lines(home: Path, sid: str) -> list[bytes]:
    path = spool.sessions_dir(home) / spool.pending_name(sid, spool.REJECTED_SUFFIX)
    return path.read_bytes().splitlines()


def test_a_different_message_reusing_a_uid_in_one_flush_is_rejected_and_kept(
    home: Path, store: StateStore
) -> None:
    writer = store.transcript_writer("w")
    first = {"role": "user", "content": "first", "uid": "u1"}
    second = {"role": "assistant", "content": "second, same uid", "uid": "u1"}
    result = writer.flush([first, second, {"role": "user", "content": "third"}])
    assert [r.index for r in result.rejections] == [1]
    assert "u1" in result.rejections[0].reason and "own uid" in result.rejections[0].reason
    assert result.rejected_uids == ("u1",)
    assert [r["content"] for r in stored(home, "w")] == ["first", "third"]
    (kept,) = [strict_json(line) for line in _rejected_lines(home, "w")]
    assert kept["message"]["content"] == "second, same uid"


def test_an_identical_repeat_of_a_message_in_one_flush_is_one_message(
    home: Path, store: StateStore
) -> None:
    writer = store.transcript_writer("w")
    message = {"role": "user", "content": "once", "uid": "u1", "timestamp": 5.0}
    result = writer.flush([message, message, dict(message)])
    assert result.ok and result.rejections == ()
    assert [r["content"] for r in stored(home, "w")] == ["once"]


def test_rejected_jsonl_writes_nan_and_infinities_as_repr_values(
    home: Path, store: StateStore
) -> None:
    writer = store.transcript_writer("w")
    bad = {"role": "user", "content": "c", "timestamp": float("nan"), "extra": [float("-inf")]}
    result = writer.flush([bad])
    assert result.rejected == 1
    (kept,) = [strict_json(line) for line in _rejected_lines(home, "w")]
    assert kept["message"]["timestamp"] == {"__repr__": "nan"}
    assert kept["message"]["extra"] == [{"__repr__": "-inf"}]
    assert kept["message"]["content"] == "c"
