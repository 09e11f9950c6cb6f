"""Durable transcript repair on real store files (seed 001, invariants 3 and 6).

A session is seeded directly with the malformed rows the seed describes: consecutive
user and assistant turns, a duplicate and an orphan tool response, stale ``api_content``
sidecars and a display-only row between them. A repairing load must fix them in the
store, so that after close and reopen nothing is left to repair and the replay is
byte-identical; inspection loads must not change a byte.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.schema import fts
from hermes_repo.transcript import reconcile
from hermes_repo.transcript.reconcile import (
    PATH_CLEAN,
    PATH_SAME_TRANSACTION,
    PATH_WRITE_UNIT,
    ReconcileConflict,
    reconcile_session,
)
from hermes_repo.transcript.repair import violations
from tests.support.transcripts import EXPECTED_ARCHIVED, MALFORMED, call, raw_connect, rows_of, seed

# The public API these tests prove runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("backend")

Msg = dict[str, Any]


def session_row(store: StateStore, sid: str) -> tuple[Any, ...]:
    with closing(raw_connect(store)) as conn:
        return tuple(conn.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone())


def file_digest(path: Path) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for suffix in ("", "-wal", "-journal"):
        p = path.with_name(path.name + suffix)
        out[suffix or "db"] = hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None
    return out


@contextmanager
def assert_no_write(store: StateStore) -> Iterator[None]:
    """Fail if anything commits to the database (or touches its files) in the block."""
    if not store.database.backend.is_file:
        # A server's files are its own: every row's xmin changes when a write touches it.
        with closing(raw_connect(store)) as watcher:
            versions = (
                "SELECT 'm', id::text, xmin::text FROM messages UNION ALL "
                "SELECT 's', id, xmin::text FROM sessions UNION ALL "
                "SELECT 'k', key, xmin::text FROM state_meta ORDER BY 1, 2"
            )
            before_rows = watcher.execute(versions).fetchall()
            yield
            assert watcher.execute(versions).fetchall() == before_rows
        return
    with closing(raw_connect(store)) as watcher:
        version = watcher.execute("PRAGMA data_version").fetchone()[0]
        before = file_digest(store.path)
        yield
        assert watcher.execute("PRAGMA data_version").fetchone()[0] == version
        assert file_digest(store.path) == before


def replay_bytes(messages: list[Msg]) -> str:
    return json.dumps(messages, ensure_ascii=False)


# -- convergence -----------------------------------------------------------------------


def test_repair_converges_across_close_and_reopen(home: Path) -> None:
    with StateStore.open(home) as store:
        sid, _ = seed(store, MALFORMED)
        first = store.load_conversation(sid, repair=True)
    assert first.repairs == len(EXPECTED_ARCHIVED)
    assert violations(first.messages) == []

    with StateStore.open(home) as store:
        second = store.load_conversation(sid, repair=True)
        plain = store.load_conversation(sid)
    assert second.repairs == 0
    assert replay_bytes(second.messages) == replay_bytes(first.messages)
    assert replay_bytes(plain.messages) == replay_bytes(first.messages)


def test_survivors_keep_their_ids_and_get_the_merged_fields(store: StateStore) -> None:
    sid, ids = seed(store, MALFORMED)
    out = store.load_conversation(sid, repair=True, with_ids=True).messages
    by_id = {m["id"]: m for m in out}
    assert [m["id"] for m in out] == [ids[i] for i in range(len(ids)) if i not in EXPECTED_ARCHIVED]

    user = by_id[ids[1]]
    assert user["content"] == "first question about zebras\n\nsecond part mentions quokkas"
    assert "api_content" not in user  # stale sidecar cleared

    asst = by_id[ids[4]]
    assert asst["content"] == "let me look\nand also this"
    assert asst["tool_calls"] == [call("c1"), call("c2", "read")]
    assert asst["reasoning"] == "plan A"  # the first non-empty reasoning wins
    assert asst["reasoning_details"] == [{"type": "summary", "text": "why"}]
    assert "api_content" not in asst

    # The stored columns say the same (api_content NULL, not an empty string).
    with closing(raw_connect(store)) as conn:
        stored = conn.execute(
            "SELECT content, content_parts, api_content, tool_calls FROM messages WHERE id = ?",
            (ids[4],),
        ).fetchone()
    assert stored[0] == "let me look\nand also this" and stored[1] is None and stored[2] is None
    assert json.loads(stored[3]) == [call("c1"), call("c2", "read")]


def test_ids_are_stripped_unless_asked_for(store: StateStore) -> None:
    sid, _ = seed(store, MALFORMED)
    assert all("id" not in m for m in store.load_conversation(sid, repair=True).messages)
    assert all("id" in m for m in store.load_conversation(sid, repair=True, with_ids=True).messages)


def test_removed_rows_are_archived_with_reasons_never_deleted(store: StateStore) -> None:
    sid, ids = seed(store, MALFORMED)
    before = store.load_conversation(sid, include_inactive=True, with_ids=True).messages
    store.load_conversation(sid, repair=True)
    audit = store.load_conversation(sid, include_inactive=True, with_ids=True).messages
    # Nothing deleted; the two survivors' rows as they were follow as archived copies.
    assert [m["id"] for m in audit[: len(ids)]] == [m["id"] for m in before] == ids
    originals = audit[len(ids) :]
    assert [m["archive_reason"] for m in originals] == [
        f"repair_original of #{ids[1]}",
        f"repair_original of #{ids[4]}",
    ]
    for copy_row, survivor in zip(originals, (before[1], before[4]), strict=True):
        assert copy_row["active"] is False and isinstance(copy_row["archived_at"], float)
        assert copy_row["uid"] != survivor["uid"]
        strip = ("id", "uid", "active", "archived_at", "archive_reason")
        assert {k: v for k, v in copy_row.items() if k not in strip} == {
            k: v for k, v in survivor.items() if k not in strip
        }

    for pos, row in enumerate(audit[: len(ids)]):
        if pos in EXPECTED_ARCHIVED:
            rule, survivor = EXPECTED_ARCHIVED[pos]
            reason = rule if survivor is None else f"{rule} into #{ids[survivor]}"
            assert row["active"] is False
            assert row["archive_reason"] == reason
            assert isinstance(row["archived_at"], float)
            # An archived row keeps its own original content for the audit.
            assert row["content"] == MALFORMED[pos]["content"]
        else:
            assert "active" not in row


def test_display_only_row_stays_active_and_untouched(store: StateStore) -> None:
    sid, ids = seed(store, MALFORMED)
    display = [r for r in rows_of(store, sid) if r[0] == ids[3]]
    store.load_conversation(sid, repair=True)
    assert [r for r in rows_of(store, sid) if r[0] == ids[3]] == display
    out = store.load_conversation(sid).messages
    assert [m["content"] for m in out if m.get("display_only")] == ["shown to the person only"]


def test_session_counters_match_the_active_rows(store: StateStore) -> None:
    sid, _ = seed(store, MALFORMED)
    store.load_conversation(sid, repair=True)
    active = store.load_conversation(sid).messages
    with store.unit_of_work() as uow:
        info = uow.sessions.require(sid)
        counters = (info.message_count, info.tool_call_count)
    assert counters == (len(active), sum(len(m.get("tool_calls") or []) for m in active))
    assert counters == (8, 2)


def test_write_touches_only_the_changed_rows(store: StateStore) -> None:
    sid, ids = seed(store, MALFORMED)
    before = {r[0]: r for r in rows_of(store, sid)}
    result = reconcile_session(store, sid)
    assert result.path == PATH_SAME_TRANSACTION  # uncontended: written where it was read
    after = {r[0]: r for r in rows_of(store, sid)}
    changed = {i for i in before if before[i] != after[i]}
    assert changed == {ids[1], ids[4], *(ids[p] for p in EXPECTED_ARCHIVED)}
    assert set(result.updated_ids) | {a.id for a in result.archived} == changed
    # Each rewritten survivor's row as it was is inserted as an archived copy.
    copies = {i for i in after if i not in before}
    assert result.originals == tuple(zip((ids[1], ids[4]), sorted(copies), strict=True))
    # The session row's counters moved too: 12 rows with 2 calls -> 8 rows with 2 calls.
    assert result.counters_before == (12, 2) and result.counters_after == (8, 2)
    assert result.rows_written == len(changed) + len(copies) + 1


# Search on PostgreSQL arrives with its own revision (0004); until then SQLite only.
@pytest.mark.sqlite_only
def test_search_finds_merged_text_at_the_survivor_only(store: StateStore) -> None:
    sid, ids = seed(store, MALFORMED)
    assert {h.message_id for h in store.search("quokkas")} == {ids[2]}
    store.load_conversation(sid, repair=True)
    assert [h.message_id for h in store.search("quokkas")] == [ids[1]]
    assert {h.message_id for h in store.search("quokkas", include_inactive=True)} == {
        ids[1],
        ids[2],
    }
    assert store.search("pangolin") == []  # the orphan is archived
    assert [h.message_id for h in store.search("pangolin", include_inactive=True)] == [ids[9]]
    # Trigram (substring) index follows the survivor too.
    assert [h.message_id for h in store.search("okkas")] == [ids[1]]
    with store.engine.connect() as conn:
        assert fts.integrity_errors(conn) == {}  # rank = 1: the index matches the rows


def test_unrelated_sessions_are_untouched(store: StateStore) -> None:
    other, _ = seed(store, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    clean, _ = seed(
        store, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    )
    sid, _ = seed(store, MALFORMED)
    snapshot = {s: (rows_of(store, s), session_row(store, s)) for s in (other, clean)}
    assert store.load_conversation(sid, repair=True).repairs == 4
    assert {s: (rows_of(store, s), session_row(store, s)) for s in (other, clean)} == snapshot


def test_shapes_and_speakers_that_cannot_merge_are_stored_untouched(store: StateStore) -> None:
    """Issue 23: a dict content became its repr text, and two speakers became one."""
    image = {"type": "image_url", "image_url": {"url": "u"}}
    turns: list[Msg] = [
        {"role": "user", "content": {"type": "input_text", "text": "a dict"}},
        {"role": "user", "content": "plain text"},
        {"role": "user", "content": [image]},
        {"role": "user", "content": "from alice", "name": "alice"},
        {"role": "user", "content": "from bob", "name": "bob"},
        {"role": "assistant", "content": "ok"},
    ]
    sid, _ids = seed(store, turns)
    before = rows_of(store, sid)
    out = store.load_conversation(sid, repair=True)
    assert out.repairs == 0
    assert rows_of(store, sid) == before
    assert [m["content"] for m in out.messages] == [t["content"] for t in turns]
    assert [m.get("name") for m in out.messages] == [t.get("name") for t in turns]


def test_a_survivors_overwritten_values_are_kept_exactly_in_the_audit_trail(
    store: StateStore,
) -> None:
    sid, ids = seed(
        store,
        [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": None,
                "api_content": "sent \udc80 as is",
                "reasoning": None,
                "tool_calls": [call("c1")],
                "name": "bot",
                "x": {"k": [1]},
            },
            {
                "role": "assistant",
                "content": "more",
                "reasoning": "why",
                "tool_calls": [call("c2")],
                "name": "bot",
                "x": {"k": [1]},
            },
        ],
    )
    raw_before = {r[0]: r for r in rows_of(store, sid)}
    result = reconcile_session(store, sid)
    assert result.updated_ids == (ids[1],)
    ((survivor, copy_id),) = result.originals
    raw_after = {r[0]: r for r in rows_of(store, sid)}
    cols = _column_names(store)
    kept = dict(zip(cols, raw_after[copy_id], strict=True))
    was = dict(zip(cols, raw_before[survivor], strict=True))
    for name in cols:
        if name not in ("id", "uid", "active", "archived_at", "archive_reason"):
            assert kept[name] == was[name], name  # byte for byte, as stored
    assert kept["active"] == 0 and kept["archive_reason"] == f"repair_original of #{ids[1]}"
    # The merged row itself is archived untouched.
    merged_now = dict(zip(cols, raw_after[ids[2]], strict=True))
    merged_was = dict(zip(cols, raw_before[ids[2]], strict=True))
    for name in cols:
        if name not in ("active", "archived_at", "archive_reason"):
            assert merged_now[name] == merged_was[name], name
    again = reconcile_session(store, sid)
    assert again.repairs == 0 and again.rows_written == 0


def _column_names(store: StateStore) -> list[str]:
    with closing(raw_connect(store)) as conn:
        cur = conn.execute("SELECT * FROM messages WHERE 1 = 0")
        return [d[0] for d in cur.description]


def test_multimodal_merge_is_stored_as_parts(store: StateStore) -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    sid, ids = seed(
        store,
        [
            {"role": "user", "content": [{"type": "text", "text": "look at this"}]},
            {"role": "user", "content": [image, {"type": "text", "text": "和这个"}]},
        ],
    )
    out = store.load_conversation(sid, repair=True).messages
    assert out[0]["content"] == [
        {"type": "text", "text": "look at this"},
        image,
        {"type": "text", "text": "和这个"},
    ]
    with closing(raw_connect(store)) as conn:
        content, parts, searchable = conn.execute(
            "SELECT content, content_parts, content_text FROM messages WHERE id = ?", (ids[0],)
        ).fetchone()
    assert content is None and json.loads(parts) == out[0]["content"]
    assert searchable == "look at this 和这个"  # the indexed text of the parts
    if store.database.backend.is_file:  # search on PostgreSQL arrives with revision 0004
        assert [h.message_id for h in store.search("这个")] == [ids[0]]
    assert store.load_conversation(sid, repair=True).repairs == 0


# -- read-only paths -------------------------------------------------------------------


def test_inspection_loads_never_write(store: StateStore) -> None:
    sid, _ = seed(store, MALFORMED)
    store.load_conversation(sid)  # warm the pool: opening a connection is not the test
    with assert_no_write(store):
        plain = store.load_conversation(sid)
        audit = store.load_conversation(sid, include_inactive=True)
        # An audit view is never reconciled, even when repair is asked for.
        audit_repair = store.load_conversation(sid, include_inactive=True, repair=True)
        store.load_conversation(sid, with_ids=True)
    assert plain.repairs == audit.repairs == audit_repair.repairs == 0
    assert len(plain.messages) == len(audit.messages) == len(MALFORMED)
    assert violations(plain.messages) != []  # still malformed: nothing was repaired


def test_repairing_load_of_a_clean_session_takes_no_write_transaction(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, _ = seed(
        store, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    )
    monkeypatch.setattr(store, "write", _forbidden)
    with assert_no_write(store):
        out = store.load_conversation(sid, repair=True)
        assert reconcile_session(store, sid).path == PATH_CLEAN
    assert out.repairs == 0 and len(out.messages) == 2


def _forbidden(*_a: Any, **_k: Any) -> Any:
    raise AssertionError("a clean session must not open a write unit")


def test_unknown_or_empty_session_loads_empty(store: StateStore) -> None:
    with assert_no_write(store):
        assert store.load_conversation("no_such_session", repair=True).messages == []
    sid, _ = seed(store, [])
    assert store.load_conversation(sid, repair=True).repairs == 0


# -- the state moves between the read and the write ------------------------------------


def _after_first_read(monkeypatch: pytest.MonkeyPatch, action: Callable[[], None]) -> None:
    """Run ``action`` right after the next repair's read, while its transaction is open."""
    original = reconcile._Snapshot.read.__func__  # type: ignore[attr-defined]
    done = False

    def read(cls: type[Any], *args: Any) -> Any:
        nonlocal done
        snapshot = original(cls, *args)
        if not done:
            done = True
            action()
        return snapshot

    monkeypatch.setattr(reconcile._Snapshot, "read", classmethod(read))


def _needs_concurrent_commits(backend: str) -> None:
    # On SQLite another connection can commit while a read transaction is open only in
    # WAL mode; with a rollback journal the read's shared lock holds every writer off.
    # A server always lets it commit: the repair then meets it as SQLite's stale
    # snapshot does (REPEATABLE READ and the session row's lock).
    if backend == "sqlite" and select_driver().journal_mode != "WAL":
        pytest.skip("needs WAL: a reader blocks commits otherwise")


def test_repair_done_by_another_process_in_between_is_not_repeated(
    home: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    _needs_concurrent_commits(backend)
    with StateStore.open(home) as store, StateStore.open(home) as rival:
        sid, _ = seed(store, MALFORMED)
        rival_result: list[int] = []
        _after_first_read(
            monkeypatch,
            lambda: rival_result.append(rival.load_conversation(sid, repair=True).repairs),
        )
        result = reconcile_session(store, sid)
        assert rival_result == [4]
        # Its read was stale: the write was refused (SQLite's stale snapshot, or the
        # server's 40001 at the session lock), and the unit under the write lock
        # re-read the rows and found nothing left to do.
        assert result.path == PATH_WRITE_UNIT
        assert result.repairs == 0 and result.rows_written == 0
        assert replay_bytes(result.messages) == replay_bytes(store.load_conversation(sid).messages)
        audit = store.load_conversation(sid, include_inactive=True).messages
        reasons = [m["archive_reason"] for m in audit if m.get("active") is False]
        # Four rows archived and the two survivors' originals kept, once.
        assert len(reasons) == 6
        assert sum(1 for r in reasons if r.startswith("repair_original of #")) == 2
        merged = store.load_conversation(sid).messages[1]["content"]
        assert merged == "first question about zebras\n\nsecond part mentions quokkas"


def test_rows_appended_in_between_are_planned_too(
    home: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    _needs_concurrent_commits(backend)
    with StateStore.open(home) as store, StateStore.open(home) as writer:
        sid, _ = seed(store, MALFORMED)
        _after_first_read(
            monkeypatch,
            lambda: writer.append_message(sid, {"role": "user", "content": "one more"}),
        )
        out = store.load_conversation(sid, repair=True)
        # The appended user row follows "thanks" (a user row): it merges as well.
        assert out.repairs == 5
        assert out.messages[-1]["content"] == "thanks\n\none more"
        assert store.load_conversation(sid, repair=True).repairs == 0


def test_a_write_that_would_not_match_the_plan_rolls_back_whole(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, _ = seed(store, MALFORMED)
    # Archive one of the rows behind the repair's back and make the write unit trust
    # the stale read: the guarded UPDATE then changes fewer rows than planned.
    snap = store.read(lambda conn: reconcile._Snapshot.read(conn, sid, False))
    with store.unit_of_work() as uow:
        uow.orm.execute(text("UPDATE messages SET active = 0 WHERE id = :id"), {"id": snap.ids[9]})
        uow.commit()
    monkeypatch.setattr(reconcile._Snapshot, "read", classmethod(lambda cls, *a: snap))
    before = rows_of(store, sid)
    with pytest.raises(ReconcileConflict):
        reconcile_session(store, sid)
    assert rows_of(store, sid) == before


@pytest.mark.parametrize("with_ids", [False, True])
def test_a_callers_own_message_id_never_decides_a_merge(store: StateStore, with_ids: bool) -> None:
    # A provider's per-message "id" is kept (escaped when loaded with row ids); whether
    # the turns merge must not depend on how the session was loaded.
    sid, _ids = seed(
        store,
        [
            {"role": "user", "content": "a", "id": "msg_1"},
            {"role": "user", "content": "b", "id": "msg_2"},
        ],
    )
    out = store.load_conversation(sid, repair=True, with_ids=with_ids)
    assert out.repairs == 1
    assert store.load_conversation(sid, repair=True, with_ids=not with_ids).repairs == 0
    audit = store.load_conversation(sid, include_inactive=True).messages
    assert [m.get("id") for m in audit] == ["msg_1", "msg_2", "msg_1"]  # kept, all of them
