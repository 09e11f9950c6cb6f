"""store.replay_pending: dedup by uid and by overlap, torn lines, idempotence (also
as properties), two processes at once, and the operator's view in health()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from itertools import count
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_repo import ReplayReport, StateStore
from hermes_repo.transcript import spool
from hermes_repo.transcript.replay import ADOPT_LEGACY
from tests.support.processes import reaped
from tests.support.spooling import check_store, pending_files, stored, stored_contents, write_spool

# The public API these tests prove runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("backend")

Msg = dict[str, Any]
ROOT = Path(__file__).resolve().parents[2]


def msg(i: int, *, uid: bool = True, ts: float | None = None) -> Msg:
    m: Msg = {
        "role": ("user", "assistant", "tool")[i % 3],
        "content": f"message {i}",
        "timestamp": 1_700_000_000.0 + i if ts is None else ts,
    }
    if m["role"] == "tool":
        m["tool_call_id"] = f"call_{i}"
        m["tool_name"] = "terminal"
    if uid:
        m["uid"] = f"u{i:04d}"
    return m


def wrapped(m: Msg, at: float = 1.0) -> Msg:
    return {"_fallback_timestamp": at, "message": m}


def recover(store: StateStore, session_id: str | None = None) -> ReplayReport:
    """``store.replay_pending``, adopting records that name no store: these tests write
    spool files by hand as an older version did, which a server replays only when told
    to (a SQLite store that existed before the file takes them anyway)."""
    return store.replay_pending(session_id, adopt=[ADOPT_LEGACY])


def store_messages(store: StateStore, sid: str, messages: list[Msg]) -> None:
    def work(uow: Any) -> None:
        uow.sessions.ensure(sid)
        uow.messages.append_many(sid, messages)

    store.write(work)


# -- examples ------------------------------------------------------------------------


def test_records_with_uid_are_inserted_once_in_file_order(store: StateStore) -> None:
    store_messages(store, "s", [msg(0), msg(1)])
    write_spool(store.home, "s", [wrapped(msg(1)), msg(2), wrapped(msg(3)), wrapped(msg(2))])
    report = recover(store)
    assert report == ReplayReport(files=1, inserted=2, duplicates=2, kept=0)
    assert stored_contents(store.home, "s") == [f"message {i}" for i in range(4)]
    assert pending_files(store.home) == []
    check_store(store.home)


def test_records_without_uid_use_the_longest_stored_overlap(store: StateStore) -> None:
    """The seed's case: the database took some writes the spool also holds."""
    store_messages(store, "s", [msg(i) for i in range(4)])
    write_spool(store.home, "s", [wrapped(msg(i, uid=False)) for i in range(2, 6)])
    report = recover(store)
    assert (report.inserted, report.duplicates) == (2, 2)
    assert stored_contents(store.home, "s") == [f"message {i}" for i in range(6)]


def test_overlap_lines_up_when_uid_and_uidless_records_interleave(store: StateStore) -> None:
    store_messages(store, "s", [msg(i) for i in range(4)])
    records = [wrapped(msg(i, uid=i % 2 == 0)) for i in range(1, 6)]
    write_spool(store.home, "s", records)
    report = recover(store)
    assert (report.inserted, report.duplicates) == (2, 3)
    assert stored_contents(store.home, "s") == [f"message {i}" for i in range(6)]


def test_a_new_message_equal_to_an_old_one_but_later_is_not_a_duplicate(
    store: StateStore,
) -> None:
    store_messages(store, "s", [msg(0), msg(1)])
    # Same role and text as message 0, but not the stored tail: a new message.
    again = msg(0, uid=False, ts=1_700_000_000.0)
    write_spool(store.home, "s", [wrapped(again)])
    assert recover(store).inserted == 1


def kept_lines(path: Path) -> list[tuple[bytes, str, int]]:
    """The rejected file's lines as (original bytes, reason, line number)."""
    out = []
    for line in path.read_bytes().splitlines():
        record = json.loads(line)
        out.append(
            (record["raw"].encode("utf-8", "surrogateescape"), record["_rejected"], record["line"])
        )
    return out


def test_torn_and_invalid_lines_are_kept_byte_for_byte_with_reasons_never_fatal(
    store: StateStore,
) -> None:
    torn = b'{"_fallback_timestamp": 3, "message": {"role": "user", "content": "\xe4\xbd'
    bad_role = json.dumps(wrapped({"role": "wizard", "content": "x"})).encode() + b"\n"
    lines: list[Any] = [wrapped(msg(0)), bad_role, b"not json\n", wrapped(msg(1))]
    write_spool(store.home, "s", lines, raw_tail=torn)
    report = recover(store)
    assert (report.inserted, report.kept) == (2, 3)
    assert pending_files(store.home) == []
    rejected = store.home / "sessions" / "s.rejected.jsonl"
    kept = kept_lines(rejected)
    assert [raw for raw, _, _ in kept] == [bad_role.rstrip(b"\n"), b"not json", torn]
    assert [n for _, _, n in kept] == [2, 3, 5]
    assert "role" in kept[0][1] and "JSON" in kept[1][1] and "JSON" in kept[2][1]
    assert oct(rejected.stat().st_mode & 0o777) == "0o600"
    before = rejected.read_bytes()
    # A crash after the commit and before the delete: the same file again.
    write_spool(store.home, "s", lines, raw_tail=torn)
    again = recover(store)
    assert (again.inserted, again.duplicates, again.kept) == (0, 2, 3)
    assert rejected.read_bytes() == before  # not doubled
    assert stored_contents(store.home, "s") == ["message 0", "message 1"]


def test_a_session_missing_from_the_database_is_created(store: StateStore) -> None:
    write_spool(store.home, "new-session", [wrapped(msg(5))])
    assert recover(store).inserted == 1
    with store.unit_of_work() as uow:
        session = uow.sessions.require("new-session")
        assert session.started_at == msg(5)["timestamp"]
        assert session.message_count == 1


def test_plain_records_without_timestamp_take_the_fallback_time(store: StateStore) -> None:
    plain = {"role": "user", "content": "no time"}
    write_spool(store.home, "s", [wrapped(plain, at=1234.5), plain])
    assert recover(store).inserted == 2
    assert stored(store.home, "s")[0]["timestamp"] == 1234.5


def test_files_with_invalid_session_names_are_never_replayed(store: StateStore) -> None:
    folder = spool.sessions_dir(store.home)
    folder.mkdir(mode=0o700)
    (folder / "bad name.pending.jsonl").write_text(json.dumps(msg(0)) + "\n")
    report = recover(store)
    assert report.inserted == 0 and report.errors and "not a valid session id" in report.errors[0]
    assert (folder / "bad name.pending.jsonl").exists()


def test_open_without_recover_leaves_the_files(home: Path) -> None:
    write_spool(home, "s", [wrapped(msg(0))])
    with StateStore.open(home, replay=False) as store:
        assert store.last_replay is None
        assert pending_files(home) == ["s.pending.jsonl"]
        assert recover(store, "s").inserted == 1


def test_health_reports_pending_files_records_and_age(store: StateStore) -> None:
    health = store.health()
    assert (health.pending_files, health.pending_records, health.oldest_pending_age_s) == (
        0,
        0,
        None,
    )
    now = time.time()
    write_spool(store.home, "a", [wrapped(msg(0), at=now - 100), wrapped(msg(1), at=now - 50)])
    write_spool(store.home, "b", [wrapped(msg(2), at=now - 10)], raw_tail=b'{"torn')
    health = store.health()
    assert (health.pending_files, health.pending_records) == (2, 3)
    assert health.oldest_pending_age_s is not None and 100 <= health.oldest_pending_age_s < 110


# -- properties ----------------------------------------------------------------------

_sid = count()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    n=st.integers(1, 10),
    data=st.data(),
)
def test_property_any_stored_subset_and_any_spool_recover_exactly_once(
    store: StateStore, n: int, data: st.DataObject
) -> None:
    """Records with uids: whatever is stored, whatever the spool repeats or reorders,
    every uid ends up stored exactly once, and a second recovery of the same spool (a
    crash before the delete) changes nothing."""
    sid = f"p{next(_sid)}"
    transcript = [msg(i) for i in range(n)]
    stored_mask = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    picks = data.draw(st.lists(st.integers(0, n - 1), max_size=2 * n))
    wrap_mask = data.draw(st.lists(st.booleans(), min_size=len(picks), max_size=len(picks)))
    torn = data.draw(st.booleans())
    before = [m for m, s in zip(transcript, stored_mask, strict=True) if s]
    if before:
        store_messages(store, sid, before)
    lines = [
        wrapped(transcript[i]) if w else transcript[i]
        for i, w in zip(picks, wrap_mask, strict=True)
    ]
    tail = b'{"_fallback_timestamp": 1, "mess' if torn else b""
    write_spool(store.home, sid, lines, raw_tail=tail)
    report = recover(store, sid)
    stored_uids = {m["uid"] for m in before}
    new_in_order = list(dict.fromkeys(transcript[i]["uid"] for i in picks))
    new_in_order = [u for u in new_in_order if u not in stored_uids]
    assert report.inserted == len(new_in_order)
    assert report.duplicates == len(picks) - len(new_in_order)
    assert report.kept == (1 if torn else 0)
    rows = [r["uid"] for r in stored(store.home, sid)]
    assert rows == [m["uid"] for m in before] + new_in_order
    write_spool(store.home, sid, lines, raw_tail=tail)
    again = recover(store, sid)
    assert again.inserted == 0 and [r["uid"] for r in stored(store.home, sid)] == rows


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    n=st.integers(1, 10),
    data=st.data(),
)
def test_property_seed_cursor_spools_with_and_without_uid_replay_the_transcript(
    store: StateStore, n: int, data: st.DataObject
) -> None:
    """The seed's situation: the database holds the transcript's first k messages, the
    spool holds messages i..j (i <= k <= j: written from a cursor, some also committed),
    perhaps twice (two failed flushes), records with or without uid. Recovery yields
    exactly the first max(k, j) messages, in order, and is idempotent."""
    sid = f"q{next(_sid)}"
    k = data.draw(st.integers(0, n))
    i = data.draw(st.integers(0, k))
    j = data.draw(st.integers(k, n))
    uid_mask = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    transcript = [msg(x, uid=uid_mask[x]) for x in range(n)]
    full = [msg(x) for x in range(n)]  # as the writer stored them: with uids
    if k:
        store_messages(store, sid, full[:k])
    records = [wrapped(m) for m in transcript[i:j]]
    if data.draw(st.booleans()):
        j2 = data.draw(st.integers(i, j))
        records = [wrapped(m) for m in transcript[i:j2]] + records
    write_spool(store.home, sid, records)
    recover(store, sid)
    expected = [f"message {x}" for x in range(max(k, j))]
    assert stored_contents(store.home, sid) == expected
    write_spool(store.home, sid, records)
    assert recover(store, sid).inserted == 0
    assert stored_contents(store.home, sid) == expected


# -- two processes -------------------------------------------------------------------

RECOVER = textwrap.dedent(
    """
    import json, sys
    from hermes_repo import StateStore
    with StateStore.open(sys.argv[1], replay=False) as store:
        r = store.replay_pending()
    print(json.dumps([r.files, r.inserted, r.duplicates, r.kept, list(r.errors)]))
    """
)


# Processes racing on one store are the multi-host tests' subject on PostgreSQL; here
# they would add half a minute of CI time to what the single-process tests prove.
@pytest.mark.sqlite_only
@pytest.mark.parametrize("sessions", [1, 4])
def test_two_processes_recovering_at_once_insert_each_record_once(
    home: Path, sessions: int
) -> None:
    per_session = 1500
    for s in range(sessions):
        write_spool(
            home,
            f"c{s}",
            [wrapped(msg(x)) for x in range(per_session)]
            + [msg(x, uid=False) for x in range(per_session, per_session + 20)],
        )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RECOVER, str(home)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(2)
    ]
    with reaped(procs):
        outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    reports = [json.loads(o[0]) for o in outs]
    assert sum(r[1] for r in reports) == sessions * (per_session + 20)
    assert all(r[4] == [] for r in reports)
    for s in range(sessions):
        assert len(stored(home, f"c{s}")) == per_session + 20
    assert pending_files(home) == []
    check_store(home)


def test_a_record_the_driver_cannot_bind_is_kept_not_blocking_the_file(
    store: StateStore,
) -> None:
    unbindable = wrapped({"role": "tool", "content": "x", "tool_call_id": {"nested": 1}})
    infinite = b'{"role": "user", "content": "x", "timestamp": 1e400}\n'
    write_spool(store.home, "s", [wrapped(msg(0)), unbindable, infinite, wrapped(msg(1))])
    report = recover(store)
    assert (report.inserted, report.kept, report.errors) == (2, 2, ())
    assert pending_files(store.home) == []
    result = store.transcript_writer("w").flush([dict(unbindable["message"])])
    assert result.rejected == 1 and "tool_call_id" in result.rejections[0].reason
