"""The benchmarks' same-SQL check sees the driver-cursor paths and stops a benchmark
whose raw side runs other SQL than the library."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hermes_repo import StateStore
from tests.support.stores import new_session

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
_common = pytest.importorskip("_common")


def test_capture_sees_the_append_run_on_the_driver_cursor(store: StateStore) -> None:
    sid = new_session(store)
    store.append_message(sid, {"role": "user", "content": "hi", "timestamp": 1.0})
    with _common.capture_sql(store) as seen:
        store.append_message(sid, {"role": "user", "content": "it's 数据", "timestamp": 2.0})
    statements = _common._statements(seen)
    assert statements == [
        _common._norm(_common.RAW_UPDATE_COUNTERS),
        _common._norm(_common.RAW_INSERT),
    ]


def test_the_same_statements_pass_whatever_their_values(store: StateStore) -> None:
    sid = new_session(store)
    with _common.capture_sql(store) as seen:
        store.append_message(sid, {"role": "user", "content": "x", "timestamp": 3.0})
    assert _common.check_same_sql("t", seen, [_common.RAW_UPDATE_COUNTERS, _common.RAW_INSERT])


def test_other_sql_on_the_raw_side_stops_the_benchmark(store: StateStore) -> None:
    sid = new_session(store)
    with _common.capture_sql(store) as seen:
        store.append_message(sid, {"role": "user", "content": "x", "timestamp": 3.0})
    with pytest.raises(SystemExit) as stop:
        _common.check_same_sql("t", seen, [_common.RAW_INSERT])
    assert stop.value.code != 0
    assert "differs" in str(stop.value.code)


def test_a_capture_that_saw_nothing_stops_the_benchmark() -> None:
    with pytest.raises(SystemExit):
        _common.check_same_sql("t", [], [])


def test_the_raw_side_runs_the_stores_fts_merge_at_the_same_cadence(
    store: StateStore, home: Path
) -> None:
    from hermes_repo.schema.fts.merge import MERGE_EVERY

    sid = new_session(store)
    for i in range(MERGE_EVERY - 1):
        store.append_message(sid, {"role": "user", "content": f"m {i}", "timestamp": 1.0})
    with _common.trace_sql(store) as library:
        store.append_message(sid, {"role": "user", "content": "last", "timestamp": 2.0})
    con = _common.raw_connect(home / "state.db")
    try:
        raw = _common.RawFtsMerge()
        cur = con.cursor()
        raw.after_commit(cur, MERGE_EVERY - 1)  # not due yet: runs nothing
        with _common.capture_raw_sql(con) as seen:
            raw.after_commit(cur, 1)
    finally:
        con.close()
    merge = [_common._norm(s[0]) for s in seen]
    after_commit = [_common._norm(s) for s in library[library.index("COMMIT") + 1 :]]
    assert merge == after_commit
    assert all(_common.is_maintenance(s) for s in merge if s not in ("BEGIN IMMEDIATE", "COMMIT"))


def test_the_capture_check_leaves_the_fts_merge_out_on_both_sides(store: StateStore) -> None:
    from hermes_repo.schema.fts.merge import MERGE_EVERY

    sid = new_session(store)
    for i in range(MERGE_EVERY - 1):
        store.append_message(sid, {"role": "user", "content": f"m {i}", "timestamp": 1.0})
    with _common.capture_sql(store) as seen:
        store.append_message(sid, {"role": "user", "content": "last", "timestamp": 2.0})
    assert any(_common.is_maintenance(s[0]) for s in seen)  # the merge ran in the capture
    assert _common.check_same_sql("t", seen, [_common.RAW_UPDATE_COUNTERS, _common.RAW_INSERT])
