"""Identity before the first attempt: a replayed unit writes the same ids, and a uid
names one message.

A write call mints every id its unit generates (session ids, uids of messages given
without one) once; each replay of the unit gets the same ones, so a replay after a
commit that did land finds its own rows instead of adding new ones (the lost-reply
tests in ``tests/faults/test_pg_lost_commit_reply.py`` drive that through a real cut).
``append_message`` with a uid already stored returns that row's id when it is the same
message, and refuses another message under it with ``UidConflictError``.
"""

from __future__ import annotations

from typing import Any

import pytest

from hermes_repo import (
    DatabaseBusyError,
    IntegrityViolation,
    StateStore,
    UidConflictError,
)
from hermes_repo.uow import UnitOfWork

pytestmark = pytest.mark.usefixtures("backend")


def _busy_once(attempts: list[Any]) -> None:
    # The unit's own transient failure after it wrote: the write core replays it whole.
    if len(attempts) == 1:
        raise DatabaseBusyError("write failed: the database is locked by another process")


def test_a_replayed_unit_creates_its_session_and_message_under_the_same_ids(
    store: StateStore,
) -> None:
    seen: list[tuple[str, str]] = []

    def work(uow: UnitOfWork) -> str:
        sid = uow.sessions.create(source="cli")
        uow.messages.append(sid, {"role": "user", "content": "q"})
        seen.append((sid, uow.messages.list(sid)[0]["uid"]))
        _busy_once(seen)
        return sid

    sid = store.write(work)
    assert len(seen) == 2 and seen[0] == seen[1] and seen[1][0] == sid
    assert [s.id for s in store.list_sessions()] == [sid]
    assert [m["uid"] for m in store.load_conversation(sid).messages] == [seen[0][1]]


def test_each_write_call_mints_its_own_ids(store: StateStore) -> None:
    first = store.write(lambda uow: uow.sessions.create(source="cli"))
    second = store.write(lambda uow: uow.sessions.create(source="cli"))
    assert first != second
    message: dict[str, Any] = {"role": "user", "content": "same dict twice"}
    store.write(lambda uow: uow.messages.append(first, message))
    store.write(lambda uow: uow.messages.append(first, message))
    assert "uid" not in message  # the caller's dict is left as it was
    stored = store.load_conversation(first).messages
    assert len({m["uid"] for m in stored}) == 2


def test_append_message_with_a_stored_uid_returns_that_rows_id(store: StateStore) -> None:
    sid = store.write(lambda uow: uow.sessions.create(source="cli"))
    message = {"role": "user", "content": "hello", "uid": "u-1", "timestamp": 1.5e9}
    first = store.append_message(sid, message)
    assert store.append_message(sid, dict(message)) == first
    # Without a timestamp each call stamps its own: still the same message.
    bare = {"role": "assistant", "content": "hi", "uid": "u-2"}
    second = store.append_message(sid, bare)
    assert store.append_message(sid, dict(bare)) == second
    assert store.get_session(sid).message_count == 2
    assert [m["uid"] for m in store.load_conversation(sid).messages] == ["u-1", "u-2"]


def test_another_message_under_a_stored_uid_is_refused_naming_the_uid(
    store: StateStore,
) -> None:
    sid = store.write(lambda uow: uow.sessions.create(source="cli"))
    store.append_message(sid, {"role": "user", "content": "original", "uid": "u-1"})
    with pytest.raises(UidConflictError, match=r"uid 'u-1'.*content.*own uid") as caught:
        store.append_message(sid, {"role": "user", "content": "different", "uid": "u-1"})
    assert isinstance(caught.value, IntegrityViolation)
    stored = store.load_conversation(sid).messages
    assert [m["content"] for m in stored] == ["original"]
    assert store.get_session(sid).message_count == 1


def test_a_transcript_flush_keeps_a_conflicting_uid_out_of_the_database(
    store: StateStore,
) -> None:
    writer = store.transcript_writer("s-flush")
    messages: list[dict[str, Any]] = [{"role": "user", "content": "first"}]
    assert writer.flush(messages).ok
    # Another writer stores the uid after this writer read the session's uids: the
    # flush meets it in the database, and the conflict is reported, never counted.
    store.append_message("s-flush", {"role": "user", "content": "elsewhere", "uid": "u-x"})
    messages.append({"role": "assistant", "content": "another message", "uid": "u-x"})
    result = writer.flush(messages)
    assert not result.ok and result.written == 0
    assert result.error is not None and "u-x" in result.error
    stored = store.load_conversation("s-flush").messages
    assert [m["content"] for m in stored] == ["first", "elsewhere"]


def test_a_content_list_sent_again_under_its_uid_is_the_same_message(store: StateStore) -> None:
    # On a server the list's searchable copy is stored with U+FFFD for U+0000: the
    # comparison must see the row as it was stored, not as it was handed over.
    sid = store.write(lambda uow: uow.sessions.create(source="cli"))
    message = {"role": "user", "content": [{"type": "text", "text": "a\x00b"}], "uid": "u-parts"}
    first = store.append_message(sid, message)
    assert store.append_message(sid, dict(message)) == first
    assert store.get_session(sid).message_count == 1
