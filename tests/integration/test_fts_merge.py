"""The FTS5 indexes are merged, bounded, after every few dozen messages a store writes.

Each write transaction leaves FTS5 a small new segment per index; a search probes every
segment. After every ``MERGE_EVERY`` messages committed, the store runs FTS5's bounded
``'merge'`` on both indexes in a short transaction of its own, after the caller's write
committed (:mod:`hermes_repo.schema.fts.merge`). These tests drive real stores built by
the migrations, on both SQLite drivers (pysqlite3 in WAL, the standard library's with a
rollback journal), and look at what SQLite ran (a trace on every pooled connection) and
at the indexes' segments (the ``*_data`` shadow rows: a row id's bits above 37 are its
segment's id).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.schema import fts
from hermes_repo.schema.fts.merge import MERGE_EVERY, MERGE_STATEMENTS
from tests.support.sqltrace import traced

SESSION = "chat"
INDEXES = tuple(ix.name for ix in fts.INDEXES)


@pytest.fixture(params=["pysqlite3", "stdlib"])
def driver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    # Opened alone with the standard module, the file switches to a rollback journal.
    monkeypatch.setenv("HERMES_REPO_DRIVER", request.param)
    return str(request.param)


@pytest.fixture
def store(home: Path, driver: str) -> Iterator[StateStore]:
    with StateStore.open(home) as opened:
        with opened.unit_of_work() as uow:
            uow.sessions.create(id=SESSION)
            uow.commit()
        yield opened


def merges_in(seen: list[str]) -> int:
    """How many merge statements (of either index) ran."""
    return sum(1 for sql in seen if sql in MERGE_STATEMENTS)


def segments(store: StateStore) -> dict[str, int]:
    """Each index's number of segments."""
    with store.engine.connect() as conn:
        return {
            ix: conn.exec_driver_sql(
                f"SELECT count(DISTINCT id >> 37) FROM {ix}_data WHERE id >> 37 > 0"
            ).scalar_one()
            for ix in INDEXES
        }


def index_rows(store: StateStore) -> dict[str, list[tuple[int, bytes]]]:
    """Each index's shadow data, row by row."""
    with store.engine.connect() as conn:
        return {
            ix: [tuple(r) for r in conn.exec_driver_sql(f"SELECT id, block FROM {ix}_data")]
            for ix in INDEXES
        }


def message(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"note {i} amber w{i * 7} 数据库"}


def append_each(store: StateStore, first: int, count: int) -> list[int]:
    return [store.append_message(SESSION, message(i)) for i in range(first, first + count)]


def hits(store: StateStore) -> dict[str, list[tuple[str, str]]]:
    return {
        term: [(h.role, h.message_id) for h in store.search(term, limit=100)]
        for term in ("amber", "w21", "数据库", "note")
    }


def test_the_indexes_are_merged_after_the_fiftieth_message_in_their_own_transaction(
    store: StateStore,
) -> None:
    with traced(store.engine) as before_due:
        append_each(store, 0, MERGE_EVERY - 1)
    assert merges_in(before_due) == 0
    spread = segments(store)
    assert all(n > 1 for n in spread.values()), spread
    found = hits(store)

    with traced(store.engine) as seen:
        append_each(store, MERGE_EVERY - 1, 1)

    # The caller's unit committed first; the merge ran after it, each index once, in a
    # transaction of its own that never waits for a lock.
    start = seen.index(MERGE_STATEMENTS[0])
    assert "COMMIT" in seen[: start - 3]
    assert seen[start - 3 :] == [
        "PRAGMA busy_timeout",
        "PRAGMA busy_timeout = 0",
        "BEGIN IMMEDIATE",
        *MERGE_STATEMENTS,
        "COMMIT",
        "PRAGMA busy_timeout = 1000",
    ]

    merged = segments(store)
    assert all(merged[ix] < spread[ix] for ix in INDEXES), (spread, merged)
    with store.engine.connect() as conn:
        assert fts.integrity_errors(conn) == {}
    # What a search finds is the same, one message more.
    after = hits(store)
    assert after["w21"] == found["w21"]
    assert len(after["amber"]) == len(found["amber"]) + 1


def test_flushes_and_units_count_toward_the_same_cadence(store: StateStore) -> None:
    with traced(store.engine) as seen:
        for group in range(4):  # 40 messages in groups of ten: not due yet
            store.append_messages(SESSION, [message(group * 10 + k) for k in range(10)])
        assert merges_in(seen) == 0

        def unit(uow: Any) -> None:
            uow.messages.append_many(SESSION, [message(40 + k) for k in range(10)])

        store.write(unit)  # the 50th message, through a unit of work
        assert merges_in(seen) == len(MERGE_STATEMENTS)
        store.append_messages(SESSION, [message(50 + k) for k in range(10)])
        assert merges_in(seen) == len(MERGE_STATEMENTS)  # the next is due at 100


def test_a_write_lock_held_by_another_connection_skips_the_merge_and_the_write_succeeds(
    store: StateStore, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    append_each(store, 0, MERGE_EVERY - 1)
    module = store.database.driver.module
    database = store.database
    merge_once = database._merge_on_driver
    holders: list[Any] = []

    def held_during_merge() -> bool | None:
        # Another connection takes the write lock just after the caller's write
        # committed, and holds it while the merge tries.
        other = module.connect(str(home / "state.db"), isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        holders.append(other)
        try:
            return merge_once()
        finally:
            other.execute("ROLLBACK")
            other.close()

    monkeypatch.setattr(database, "_merge_on_driver", held_during_merge)
    with traced(store.engine) as seen:
        row_id = store.append_message(SESSION, message(MERGE_EVERY - 1))
    assert holders, "the merge was not due"
    assert row_id > 0
    assert store.load_conversation(SESSION).messages[-1]["content"] == message(49)["content"]
    # It asked for the lock without waiting (busy_timeout 0), did not get it, ran no
    # merge, and gave the connection its wait back.
    after_commit = seen[seen.index("COMMIT") + 1 :]
    assert after_commit == [
        "PRAGMA busy_timeout",
        "PRAGMA busy_timeout = 0",
        "BEGIN IMMEDIATE",
        "PRAGMA busy_timeout = 1000",
    ]
    monkeypatch.undo()

    # Still due: the next write merges.
    with traced(store.engine) as next_write:
        append_each(store, MERGE_EVERY, 1)
    assert merges_in(next_write) == len(MERGE_STATEMENTS)


def test_a_detached_index_is_never_merged(store: StateStore) -> None:
    append_each(store, 0, MERGE_EVERY - 1)
    store.write(lambda uow: fts.detach(uow.connection, index=None, error="detached by a test"))
    frozen = index_rows(store)

    with traced(store.engine) as seen:
        (last,) = append_each(store, MERGE_EVERY - 1, 1)

    # The merge's statements ran (it was due) and left the detached index as it was.
    assert merges_in(seen) == len(MERGE_STATEMENTS)
    assert index_rows(store) == frozen
    assert [h.message_id for h in store.search("w343")] == [last]


def test_a_merge_that_meets_a_damaged_index_detaches_it_and_the_write_stands(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    append_each(store, 0, MERGE_EVERY - 1)
    database = store.database
    merge_once = database._merge_on_driver

    def damaged_then_merge() -> bool | None:
        # The word index's leaves are garbage from here on: reading them to merge
        # fails the way SQLite reports a damaged FTS5 index.
        with store.engine.connect() as conn:
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None
            dbapi.execute(
                "UPDATE messages_fts_data SET block = zeroblob(length(block)) WHERE id > 10"
            )
        return merge_once()

    monkeypatch.setattr(database, "_merge_on_driver", damaged_then_merge)
    row_id = store.append_message(SESSION, message(MERGE_EVERY - 1))
    assert row_id > 0
    with store.engine.connect() as conn:
        marker = fts.stale_marker(conn)
        assert marker is not None, "the damage was not noticed"
        assert not fts.present_triggers(conn)
    # The search answers from the rows while the index is detached.
    assert [h.message_id for h in store.search("w343")] == [row_id]


def test_a_server_store_counts_no_messages_toward_a_merge(
    backend: str, store_on_backend: StateStore
) -> None:
    # PostgreSQL keeps its own full-text index (a generated tsvector): nothing to merge.
    append_each(store_on_backend, 0, MERGE_EVERY)
    written = store_on_backend.database._merge.written
    assert written == (MERGE_EVERY if backend == "sqlite" else 0)


@pytest.fixture
def store_on_backend(backend: str, home: Path) -> Iterator[StateStore]:
    with StateStore.open(home) as opened:
        with opened.unit_of_work() as uow:
            uow.sessions.create(id=SESSION)
            uow.commit()
        yield opened


# -- a batch's rows go in multi-row INSERTs: one segment a batch, not one a row --------


def segment_ids(store: StateStore) -> dict[str, set[int]]:
    """Each index's segment ids."""
    with store.engine.connect() as conn:
        return {
            ix: {
                int(r[0])
                for r in conn.exec_driver_sql(
                    f"SELECT DISTINCT id >> 37 FROM {ix}_data WHERE id >> 37 > 0"
                )
            }
            for ix in INDEXES
        }


def test_a_flush_of_ten_messages_adds_one_segment_an_index_and_ids_follow_the_list(
    store: StateStore,
) -> None:
    writer = store.transcript_writer(SESSION)
    before = segment_ids(store)
    added: list[dict[str, int]] = []
    batches = [[{**message(i), "timestamp": float(i)} for i in range(k, k + 10)] for k in (0, 10)]
    for batch in batches:
        ids_before = segment_ids(store)
        result = writer.flush(batch)
        assert (result.written, result.error) == (10, None)
        after = segment_ids(store)
        added.append({ix: len(after[ix] - ids_before[ix]) for ix in INDEXES})
        assert after[INDEXES[0]] >= ids_before[INDEXES[0]]  # nothing merged away
    # One statement a flush: FTS5 wrote one segment an index, not ten.
    assert added == [dict.fromkeys(INDEXES, 1)] * 2
    assert all(len(segment_ids(store)[ix]) == len(before[ix]) + 2 for ix in INDEXES)
    with store.engine.connect() as conn:
        stored = conn.exec_driver_sql(
            "SELECT content FROM messages WHERE session_id = ? ORDER BY id", (SESSION,)
        ).scalars()
        assert list(stored) == [m["content"] for batch in batches for m in batch]


def test_a_batch_of_many_rows_is_written_in_a_few_statements_in_list_order(
    store: StateStore,
) -> None:
    # 300 rows: statements of 64 rows, then one of the 44 left; each one segment an
    # index at most (FTS5's automerge may merge some of them).
    rows = [{**message(i), "uid": f"u{i:04d}"} for i in range(300)]
    with traced(store.engine) as seen, store.unit_of_work() as uow:
        assert uow.messages.append_many(SESSION, rows) == 300
        uow.commit()
    # The driver reports a statement again at each trigger it fires: once each.
    inserts = list(dict.fromkeys(sql for sql in seen if sql.startswith("INSERT INTO messages (")))
    assert [sql.count("),(") + 1 for sql in inserts] == [64, 64, 64, 64, 44]
    assert all(1 <= len(ids) <= 5 for ids in segment_ids(store).values())
    with store.engine.connect() as conn:
        ordered = conn.exec_driver_sql(
            "SELECT uid FROM messages WHERE session_id = ? ORDER BY id", (SESSION,)
        ).scalars()
        assert list(ordered) == [r["uid"] for r in rows]
    session = store.get_session(SESSION)
    assert session is not None and session.message_count == 300
