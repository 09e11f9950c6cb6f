"""Copying a whole store into another (SQLite to SQLite here; the PostgreSQL variants are
in test_db_copy_postgresql.py): every row and column, idempotent, resumable after a real
SIGKILL, verified, and refusing a target that holds another store's rows."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from hermes_repo import StateStore
from hermes_repo.errors import ConfigurationError
from hermes_repo.schema.copy_mark import COPIED_FROM_KEY, COPY_MARK_KEY, STORE_ID_KEY, copy_mark
from hermes_repo.transfer.copy import (
    CopyConflictError,
    CopyVerificationError,
    copy_store,
)
from tests.support.copying import (
    HUGE,
    fill_odd_store,
    fill_plain_store,
    kill_copy_midway,
    message_count,
    meta_value,
    new_home,
    set_meta,
    store_rows,
    store_with_session,
)


@pytest.fixture
def source(tmp_path: Path) -> Iterator[StateStore]:
    with StateStore.open(new_home(tmp_path, "source")) as store:
        fill_odd_store(store)
        yield store


@pytest.fixture
def target(tmp_path: Path) -> Iterator[StateStore]:
    with StateStore.open(new_home(tmp_path, "target")) as store:
        yield store


def test_copy_brings_every_row_with_every_column_and_keeps_ids(
    source: StateStore, target: StateStore
) -> None:
    report = copy_store(source, target, batch_size=3)

    assert store_rows(target) == store_rows(source)
    assert report.messages.inserted == 38 and report.sessions.inserted == 3
    assert report.parent_links == 1  # the child sorts before its parent
    assert report.checksums["messages"]["count"] == 38
    # The copy reads back as the source does: surrogates, CJK, huge text, archived rows.
    for sid in ("z-root", "a-child"):
        want = source.load_conversation(sid, include_inactive=True, with_ids=True).messages
        got = target.load_conversation(sid, include_inactive=True, with_ids=True).messages
        assert got == want
    assert any(m.get("content") == HUGE for m in target.load_conversation("z-root").messages)
    assert target.get_session("a-child").parent_session_id == "z-root"
    # Derived markers stay with their file; the target's index is live and finds copies.
    # The target's own store id (made when it was created) is not the source's; the
    # verified copy names the source in copied_from.
    keys = target.read(lambda c: c.execute(text("SELECT key FROM state_meta")).all())
    assert sorted(keys) == [
        ("copied_from",),
        ("hermes_import.state_meta",),
        ("store_created_at",),
        ("store_id",),
    ]
    assert target.store_id is not None and target.store_id != source.store_id
    copied = target.read(
        lambda c: c.execute(text("SELECT value FROM state_meta WHERE key = 'copied_from'")).scalar()
    )
    assert json.loads(copied) == [source.store_id]
    assert [h.session_id for h in target.search("データ", limit=1)] == ["a-child"]


def test_an_append_after_the_copy_gets_a_new_id(source: StateStore, target: StateStore) -> None:
    copy_store(source, target)

    new_id = target.append_message("z-root", {"role": "user", "content": "after"})

    assert new_id == 39


def test_a_second_copy_writes_nothing(source: StateStore, target: StateStore) -> None:
    copy_store(source, target)
    before = store_rows(target)

    again = copy_store(source, target, batch_size=5)

    assert again.written == 0
    assert again.messages.unchanged == 38 and again.sessions.unchanged == 3
    assert store_rows(target) == before


def test_a_rerun_brings_over_what_the_source_changed_since(
    source: StateStore, target: StateStore
) -> None:
    copy_store(source, target)
    with source.unit_of_work() as uow:
        uid = sorted(uow.messages.uids("z-root"))[0]
        uow.messages.set_active("z-root", uid, False, reason="repair: test")
        uow.messages.recount("z-root")
        uow.sessions.end("a-child", "compressed")
        uow.commit()
    source.append_message("lonely", {"role": "user", "content": "new"})

    again = copy_store(source, target)

    assert again.messages.inserted == 1 and again.messages.updated == 1
    # The end of one session; the counters of two moved with their messages' batches.
    assert again.sessions.updated == 1 and again.counters == 0
    assert store_rows(target) == store_rows(source)


def test_copying_back_into_a_new_store_gives_identical_rows(
    tmp_path: Path, source: StateStore, target: StateStore
) -> None:
    copy_store(source, target)
    with StateStore.open(new_home(tmp_path, "back")) as back:
        copy_store(target, back, batch_size=4)

        assert store_rows(back) == store_rows(source)


def test_a_killed_copy_finishes_on_rerun_with_nothing_doubled_or_lost(tmp_path: Path) -> None:
    src_home, dst_home = new_home(tmp_path, "big"), new_home(tmp_path, "dst")
    with StateStore.open(src_home) as src:
        fill_plain_store(src, sessions=40, per_session=500)
    total = 20_000

    kill_copy_midway(src_home, str(dst_home), after=total // 10)

    with StateStore.open(src_home) as src, StateStore.open(dst_home) as dst:
        partial = message_count(dst)
        assert total // 10 <= partial < total  # a real half-done copy

        report = copy_store(src, dst, batch_size=500)

        assert report.messages.inserted == total - partial
        assert report.messages.unchanged == partial
        assert store_rows(dst) == store_rows(src)


def test_a_target_holding_another_stores_messages_is_refused_untouched(
    tmp_path: Path, source: StateStore
) -> None:
    with StateStore.open(new_home(tmp_path, "other")) as other:
        # Same session ids, and message ids 1..3: but other messages (other uids).
        fill_odd_store(other)
        before = store_rows(other)

        with pytest.raises(CopyConflictError, match="another store") as caught:
            copy_store(source, other)

        assert "empty store" in str(caught.value)  # the fix
        assert store_rows(other) == before


def test_other_messages_under_the_sources_own_sessions_are_refused_untouched(
    tmp_path: Path, source: StateStore
) -> None:
    # The sessions match (id and start) but message id 1 is another message.
    home = new_home(tmp_path, "other")
    store_with_session(home, "lonely", source.get_session("lonely").started_at)
    with StateStore.open(home) as other:
        other.append_message("lonely", {"role": "user", "content": "not the source's"})
        before = store_rows(other)

        with pytest.raises(CopyConflictError, match="message id 1 is uid"):
            copy_store(source, other)

        assert store_rows(other) == before


def test_a_target_with_sessions_the_source_lacks_is_refused(
    tmp_path: Path, source: StateStore
) -> None:
    home = new_home(tmp_path, "other")
    store_with_session(home, "theirs")
    with StateStore.open(home) as other:
        with pytest.raises(CopyConflictError, match="'theirs'"):
            copy_store(source, other)

        assert message_count(other) == 0


def test_a_target_with_messages_beyond_the_sources_is_refused(
    source: StateStore, target: StateStore
) -> None:
    copy_store(source, target)
    target.append_message("lonely", {"role": "user", "content": "written in the target"})

    with pytest.raises(CopyConflictError, match="message id 39"):
        copy_store(source, target)


def test_a_store_cannot_be_copied_into_itself(source: StateStore) -> None:
    with (
        StateStore.open(source.home, replay=False) as same,
        pytest.raises(ConfigurationError, match="source store itself"),
    ):
        copy_store(source, same)


@pytest.mark.parametrize("size", [0, 100_001])
def test_a_batch_size_out_of_range_is_refused(
    source: StateStore, target: StateStore, size: int
) -> None:
    with pytest.raises(ConfigurationError, match="1 to 100000"):
        copy_store(source, target, batch_size=size)


def test_a_source_written_during_the_copy_fails_verification_then_a_rerun_matches(
    source: StateStore, target: StateStore
) -> None:
    # An agent keeps writing to the source: a message already copied is archived.
    first = source.load_conversation("z-root").messages[0]["uid"]  # in the first batch

    def agent_writes(done: int, total: int) -> None:
        if done == 3:
            with source.unit_of_work() as uow:
                uid = first
                uow.messages.set_active("z-root", uid, False, reason="repair: test")
                uow.messages.recount("z-root")
                uow.commit()

    with pytest.raises(CopyVerificationError, match="run the copy again"):
        copy_store(source, target, batch_size=3, progress=agent_writes)
    assert target.read(copy_mark) is not None  # unverified: still says unfinished

    copy_store(source, target)
    assert store_rows(target) == store_rows(source)
    assert target.read(copy_mark) is None


def test_progress_counts_messages_up_to_the_total(source: StateStore, target: StateStore) -> None:
    seen: list[tuple[int, int]] = []

    copy_store(source, target, batch_size=10, progress=lambda d, t: seen.append((d, t)))

    assert seen == [(0, 38), (10, 38), (20, 38), (30, 38), (38, 38)]


def test_text_holding_nul_characters_copies_exactly_between_sqlite_stores(
    tmp_path: Path, target: StateStore
) -> None:
    home = new_home(tmp_path, "nul")
    store_with_session(home, "s")
    with StateStore.open(home) as source:
        source.append_message("s", {"role": "user", "content": "a\x00b", "reasoning": "\x00"})

        copy_store(source, target)

        assert store_rows(target) == store_rows(source)
        assert target.load_conversation("s").messages[0]["content"] == "a\x00b"


def test_store_id_is_never_copied_and_copied_from_names_each_source_once(
    tmp_path: Path, source: StateStore, target: StateStore
) -> None:
    set_meta(source, STORE_ID_KEY, "src-A")
    set_meta(target, STORE_ID_KEY, "dst-B")

    report = copy_store(source, target, batch_size=5)
    again = copy_store(source, target)

    assert meta_value(target, STORE_ID_KEY) == "dst-B"  # the target stays itself
    assert meta_value(target, COPIED_FROM_KEY) == '["src-A"]'
    assert report.copied_from == again.copied_from == ["src-A"]  # once, however many runs
    assert meta_value(target, COPY_MARK_KEY) is None
    assert again.written == 0 and store_rows(target) == store_rows(source)
    # A copy of the copy names the store it came from, not that store's own sources.
    with StateStore.open(new_home(tmp_path, "third")) as third:
        set_meta(third, STORE_ID_KEY, "third-C")
        assert copy_store(target, third).copied_from == ["dst-B"]
        assert meta_value(third, STORE_ID_KEY) == "third-C"
        assert meta_value(third, COPIED_FROM_KEY) == '["dst-B"]'


def test_a_source_without_a_store_id_adds_nothing_to_copied_from(
    source: StateStore, target: StateStore
) -> None:
    with source.unit_of_work() as uow:
        uow.meta.delete(STORE_ID_KEY)  # a store made before store ids existed
        uow.commit()
    report = copy_store(source, target)
    assert report.copied_from == [] and meta_value(target, COPIED_FROM_KEY) is None
    assert meta_value(target, COPY_MARK_KEY) is None


def test_a_failed_copy_leaves_the_mark_with_the_command_that_resumes(
    source: StateStore, target: StateStore
) -> None:
    def interrupt(done: int, total: int) -> None:
        if done >= 6:
            raise KeyboardInterrupt  # an operator's Ctrl-C between two batches

    with pytest.raises(KeyboardInterrupt):
        copy_store(source, target, batch_size=3, progress=interrupt)
    mark = target.read(copy_mark)
    assert mark is not None and mark.source_store_id == meta_value(source, STORE_ID_KEY)
    assert mark.command.endswith(f"db copy --to {target.home} --batch-size 3")
    assert target.read(lambda c: c.execute(text(DRIFT_SQL)).scalar()) == 0

    copy_store(source, target, batch_size=3)
    assert target.read(copy_mark) is None
    assert store_rows(target) == store_rows(source)


DRIFT_SQL = (
    "SELECT count(*) FROM sessions s WHERE s.message_count <> "
    "(SELECT count(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1)"
)


def test_the_resume_command_survives_odd_folder_names(tmp_path: Path) -> None:
    odd = tmp_path / 'it\'s a "store" $HOME; rm -rf x'
    odd.mkdir()
    with StateStore.open(odd) as src, StateStore.open(new_home(tmp_path, "t t")) as dst:
        with src.unit_of_work() as uow:
            uow.messages.append(uow.sessions.create(), {"role": "user", "content": "x"})
            uow.commit()

        def interrupt(done: int, total: int) -> None:
            if done:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            copy_store(src, dst, batch_size=1, progress=interrupt)
        mark = dst.read(copy_mark)
        assert mark is not None
        argv = shlex.split(mark.command)
        assert argv == [
            "hermes-repo",
            "--home",
            str(odd),
            "db",
            "copy",
            "--to",
            str(dst.home),
            "--batch-size",
            "1",
        ]
