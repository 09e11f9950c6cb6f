"""Spool records belong to one store and one door: a replay never writes them into
another store (a new SQLite file in the same home, a server's spool met by a SQLite
open) or into a session of another source; such records stay, byte for byte. A line
nested beyond the parser never blocks its file; a uid reused for other content is an
error the caller sees, at flush and at replay."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import ConfigurationError, StateStore, TranscriptWriter
from hermes_repo.integrations._agents_items import SOURCE as SDK_SOURCE
from hermes_repo.integrations._pydantic_ai_rows import SOURCE as PYDANTIC_SOURCE
from hermes_repo.provenance import target_key, url_target
from hermes_repo.repositories.meta import COPIED_FROM_KEY
from hermes_repo.transcript import spool
from hermes_repo.transcript.replay import ADOPT_LEGACY
from tests.support.spooling import raw, stored_contents, write_spool

Msg = dict[str, Any]


def msgs(n: int, tag: str = "m", start: int = 0) -> list[Msg]:
    return [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"{tag} {i}",
            "uid": f"{tag}-{i}",
            "timestamp": 1_700_000_000.0 + i,
        }
        for i in range(start, start + n)
    ]


def spool_for(store: StateStore, sid: str, messages: list[Msg], *, source: str = "cli") -> Path:
    """Spool ``messages`` as a writer of ``store`` does when its database is down."""
    identity = store.store_identity
    owner = spool.SpoolOwner(identity.store_id, identity.target)
    return spool.append_messages(store.home, sid, messages, source=source, owner=owner)


# -- the store id ---------------------------------------------------------------------


@pytest.mark.usefixtures("backend")
def test_a_store_has_one_id_kept_across_opens(store: StateStore, tmp_path: Path) -> None:
    assert store.store_id is not None and len(store.store_id) == 32
    int(store.store_id, 16)
    home = store.home
    store.close()
    with StateStore.open(home) as again:
        assert again.store_id == store.store_id
        assert again.health().store_id == store.store_id
    with StateStore.open(tmp_path / "elsewhere", url="sqlite") as other:
        assert other.store_id not in (None, store.store_id)


def test_a_store_of_an_older_version_gets_its_id_at_its_first_open(home: Path) -> None:
    with StateStore.open(home) as store:
        store.write(lambda uow: uow.sessions.ensure("kept-from-before"))
    con = raw(home)
    con.execute("DELETE FROM state_meta WHERE key IN ('store_id', 'store_created_at')")
    con.close()
    with StateStore.open(home) as store:
        made = store.store_id
        assert made is not None
        # Not new (it existed before this version): no creation time, so an older
        # version's spool in its home is still its own.
        assert store.store_identity.created_at is None
    with StateStore.open(home) as store:
        assert store.store_id == made


# -- another store in the same home ---------------------------------------------------


def test_a_spool_of_one_sqlite_store_is_not_replayed_into_a_new_file_in_its_home(
    home: Path, tmp_path: Path
) -> None:
    with StateStore.open(home) as first:
        path = spool_for(first, "s", msgs(3))
    before = path.read_bytes()
    moved = tmp_path / "moved-away"
    moved.mkdir()
    os.rename(home / "state.db", moved / "state.db")

    with StateStore.open(home) as fresh:  # a new store: a stray open made it
        report = fresh.last_replay
        assert report is not None and report.inserted == 0 and report.foreign == 3
        assert "belongs to store" in report.foreign_notes[0]
        assert stored_contents(home, "s") == []
        assert fresh.replay_pending().inserted == 0
    assert path.read_bytes() == before  # byte for byte

    os.replace(moved / "state.db", home / "state.db")
    with StateStore.open(home) as original:
        assert original.last_replay is not None and original.last_replay.inserted == 3
    assert not path.exists()
    assert stored_contents(home, "s") == ["m 0", "m 1", "m 2"]


def test_a_server_spool_is_not_replayed_by_a_sqlite_open_of_its_home(
    home: Path, pg_server: Any, pg_template: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = pg_server.new_name("own")
    url = pg_server.create(name, template=pg_template).render_as_string(hide_password=False)
    try:
        os.remove(home / "state.db")  # a server host: no SQLite file in its home
        with StateStore.open(home, url=url, replay=False) as server:
            path = spool_for(server, "s", msgs(2))
            server_id = server.store_id
        # An older version's record too (it names no store): written before the file
        # existed, it is not the new file's either.
        legacy = spool.sessions_dir(home) / spool.pending_name("old")
        write_spool(home, "old", [{"_fallback_timestamp": 1.0, "message": msgs(1, "old")[0]}])
        past = time.time() - 60
        os.utime(legacy, (past, past))
        before, legacy_before = path.read_bytes(), legacy.read_bytes()

        monkeypatch.delenv("HERMES_REPO_URL", raising=False)
        with StateStore.open(home) as local:  # `sessions list` without --url
            report = local.last_replay
            assert report is not None and report.inserted == 0 and report.foreign == 3
            assert any(server_id in n and "--url" in n for n in report.foreign_notes)
            assert local.list_sessions() == []
        assert path.read_bytes() == before and legacy.read_bytes() == legacy_before

        with StateStore.open(home, url=url) as server:
            assert server.last_replay is not None
            assert server.last_replay.inserted == 2  # its own records
            # The older version's record is replayed only when the operator says so.
            assert legacy.read_bytes() == legacy_before
            assert server.replay_pending(adopt=[ADOPT_LEGACY]).inserted == 1
        assert not path.exists() and not legacy.exists()
    finally:
        pg_server.drop(name)


@pytest.mark.usefixtures("backend")
def test_records_of_a_copied_store_are_replayed_only_when_adopted(
    store: StateStore, tmp_path: Path
) -> None:
    with StateStore.open(tmp_path / "source", url="sqlite") as source:
        source_id = source.store_id
        assert source_id is not None
        owner = spool.SpoolOwner(source_id, source.store_identity.target)
    spool.append_messages(store.home, "s", msgs(2), owner=owner)
    assert store.replay_pending().foreign == 2
    with pytest.raises(ConfigurationError, match="not copied from store"):
        store.replay_pending(adopt=[source_id])

    # What `db copy` records in its target.
    store.write(lambda uow: uow.meta.set(COPIED_FROM_KEY, json.dumps([source_id])))
    report = store.replay_pending()
    assert report.inserted == 0 and report.foreign == 2
    assert f"--adopt {source_id}" in report.foreign_notes[0]
    assert store.replay_pending(adopt=[source_id]).inserted == 2
    assert stored_contents(store.home, "s") == ["m 0", "m 1"]


# -- another door ----------------------------------------------------------------------


@pytest.mark.usefixtures("backend")
def test_a_record_of_an_sdk_session_is_not_replayed_into_a_pydantic_ai_session(
    store: StateStore,
) -> None:
    store.write(lambda uow: uow.sessions.ensure("chat", source=PYDANTIC_SOURCE))
    store.append_messages("chat", msgs(1, "pai"))
    path = spool_for(store, "chat", msgs(2, "sdk"), source=SDK_SOURCE)
    before = path.read_bytes()

    report = store.replay_pending()
    assert report.inserted == 0 and report.foreign == 2 and report.errors == ()
    assert SDK_SOURCE in report.foreign_notes[0] and PYDANTIC_SOURCE in report.foreign_notes[0]
    assert path.read_bytes() == before
    assert stored_contents(store.home, "chat") == ["pai 0"]


@pytest.mark.usefixtures("backend")
def test_a_door_record_creates_its_own_session_and_a_plain_writer_record_goes_anywhere(
    store: StateStore,
) -> None:
    spool_for(store, "new", msgs(1, "sdk"), source=SDK_SOURCE)
    store.write(lambda uow: uow.sessions.ensure("tg", source="telegram"))
    spool_for(store, "tg", msgs(1, "plain"))  # a TranscriptWriter of the default source
    report = store.replay_pending()
    assert report.inserted == 2 and report.foreign == 0
    assert store.get_session("new").source == SDK_SOURCE
    assert stored_contents(store.home, "tg") == ["plain 0"]


# -- a line too deep -------------------------------------------------------------------


def _deep_line(depth: int) -> bytes:
    record = {"_fallback_timestamp": 1.0, "message": {"role": "user", "content": "X"}}
    text = json.dumps(record).replace('"X"', "[" * depth + "1" + "]" * depth)
    return text.encode() + b"\n"


@pytest.mark.usefixtures("backend")
def test_a_line_nested_beyond_the_parser_is_kept_aside_and_the_rest_replays(
    store: StateStore,
) -> None:
    good = [dict(m, **{}) for m in msgs(2)]
    lines = [
        {"_fallback_timestamp": 1.0, "message": good[0]},
        _deep_line(100_000),
        {"_fallback_timestamp": 1.0, "message": good[1]},
    ]
    write_spool(store.home, "s", lines)
    listed = spool.list_pending(store.home)
    assert [(f.records, f.bad_lines) for f in listed] == [(2, 1)]

    report = store.replay_pending(adopt=[ADOPT_LEGACY])
    assert (report.inserted, report.kept) == (2, 1)
    assert stored_contents(store.home, "s") == ["m 0", "m 1"]
    rejected = spool.sessions_dir(store.home) / spool.pending_name("s", spool.REJECTED_SUFFIX)
    kept = json.loads(rejected.read_bytes().splitlines()[0])
    assert "nested deeper" in kept["_rejected"] and kept["line"] == 2
    assert kept["raw"].encode() == _deep_line(100_000).rstrip(b"\n")


@pytest.mark.usefixtures("backend")
def test_a_flush_of_a_message_nested_thousands_deep_rejects_it_and_writes_the_rest(
    store: StateStore,
) -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = [deep]
    messages = [msgs(1)[0], {"role": "user", "content": deep}, msgs(1, start=1)[0]]
    writer = store.transcript_writer("s")
    result = writer.flush(messages)
    assert not result.ok and result.rejected == 1 and result.written == 2
    assert result.rejections[0].index == 1
    assert stored_contents(store.home, "s") == ["m 0", "m 1"]
    again = writer.flush(messages)  # never blocks a later flush either
    assert again.written == 0 and again.rejected == 1


# -- a uid reused for other content ----------------------------------------------------


@pytest.mark.usefixtures("backend")
def test_a_flush_of_other_content_under_a_stored_uid_is_rejected_and_kept(
    store: StateStore,
) -> None:
    writer = store.transcript_writer("s")
    first = msgs(2)
    assert writer.flush(first).ok
    same = [dict(m) for m in first]  # other dicts, same content: the same messages
    again = writer.flush(same)
    assert again.ok and again.written == 0

    other = dict(first[1], content="not what was stored")
    result = writer.flush([*first, other])
    assert not result.ok and result.written == 0 and result.rejected == 1
    assert result.rejections[0].uid == "m-1" and "different content" in result.rejections[0].reason

    # A writer that did not write it (another process) finds out from the store.
    fresh = TranscriptWriter(store.home, "s", store)
    late = fresh.flush([dict(other)])
    assert not late.ok and late.rejected == 1
    assert fresh.flush([dict(m) for m in first]).ok
    rejected = spool.sessions_dir(store.home) / spool.pending_name("s", spool.REJECTED_SUFFIX)
    kept = [json.loads(line) for line in rejected.read_bytes().splitlines()]
    assert kept[0]["message"]["content"] == "not what was stored"
    assert kept[0]["store_id"] == store.store_id
    assert stored_contents(store.home, "s") == ["m 0", "m 1"]


@pytest.mark.usefixtures("backend")
def test_a_spooled_record_whose_uid_is_stored_with_other_content_is_kept_aside(
    store: StateStore,
) -> None:
    store.write(lambda uow: uow.sessions.ensure("s"))
    store.append_messages("s", msgs(2))
    clash = dict(msgs(1, start=1)[0], content="a different message")
    spool_for(store, "s", [msgs(1)[0], clash, *msgs(1, start=2)])

    report = store.replay_pending()
    assert (report.inserted, report.duplicates, report.conflicts, report.kept) == (1, 1, 1, 1)
    assert stored_contents(store.home, "s") == ["m 0", "m 1", "m 2"]
    assert spool.list_pending(store.home) == []
    rejected = spool.sessions_dir(store.home) / spool.pending_name("s", spool.REJECTED_SUFFIX)
    kept = json.loads(rejected.read_bytes().splitlines()[0])
    assert "different content" in kept["_rejected"]
    assert kept["store_id"] == store.store_id  # which store set it aside
    assert json.loads(kept["raw"])["message"]["content"] == "a different message"


def test_a_writer_without_a_store_names_the_file_it_tried_and_that_store_replays_it(
    home: Path,
) -> None:
    result = TranscriptWriter(home, "s", None).flush(msgs(2))
    assert result.spooled == 2
    path = spool.sessions_dir(home) / spool.pending_name("s")
    record = json.loads(path.read_bytes().splitlines()[0])
    assert record["target"] == "sqlite:" + os.path.realpath(home / "state.db")
    assert "store_id" not in record
    with StateStore.open(home) as store:
        assert store.last_replay is not None and store.last_replay.inserted == 2


def test_a_server_target_never_holds_a_password_in_any_form() -> None:
    for url in (
        "postgresql+psycopg://bot:s3cret-pw@db.example:6543/agent",
        "postgresql+psycopg://bot@db.example:6543/agent?password=s3cret-pw",
        "postgresql+psycopg://bot:s3cret%40pw@db.example:6543/agent?sslmode=require",
    ):
        target = url_target(url)
        assert "s3cret" not in target and "password" not in target
        assert target_key(target) == ("postgresql", "db.example", "6543", "agent", "")


def test_two_schemas_of_one_database_are_two_targets() -> None:
    # Two stores may share a database, each in a schema of its own: a record one of
    # them spooled while down must not be replayed into the other.
    a = url_target("postgresql+psycopg://bot:pw@db.example/agent?hermes_schema=tenant_a")
    b = url_target("postgresql+psycopg://bot:pw@db.example/agent?hermes_schema=tenant_b")
    assert "hermes_schema=tenant_a" in a and "pw" not in a
    assert target_key(a) != target_key(b)
    assert target_key(a) == target_key(
        "postgresql+psycopg://other@db.example:5432/agent?hermes_schema=tenant_a&sslmode=require"
    )
