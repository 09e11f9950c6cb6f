"""`db copy` carries LangGraph's memory: every checkpoint, channel value and pending write
written through the real saver reads back equal through a saver on the copy, between
SQLite stores and into PostgreSQL; a rerun writes nothing and a thread deleted in the
source since is deleted from the copy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from hermes_repo import StateStore
from hermes_repo.integrations.langgraph import HermesSaver
from hermes_repo.models import langgraph_blobs_table, langgraph_writes_table
from hermes_repo.transfer.copy import CopyConflictError, copy_store
from tests.cli.conftest import run_cli_from_root
from tests.integrations.langgraph_scenario import RESUME, chat_graph
from tests.support.copying import kill_copy_midway, new_home, pg_target, store_rows
from tests.support.langgraph_threads import THREADS, checkpoints_of, config, fill_threads


def _config(thread: str) -> dict[str, Any]:
    return config(thread)


def _count(store: StateStore, table: Any) -> int:
    return int(store.read(lambda c: c.execute(select(func.count()).select_from(table)).scalar()))


@pytest.fixture
def source(tmp_path: Path) -> Iterator[StateStore]:
    with StateStore.open(new_home(tmp_path, "source")) as store:
        fill_threads(store)
        yield store


def _assert_same_memory(
    source: StateStore, target: StateStore, threads: tuple[str, ...] = THREADS
) -> None:
    theirs, ours = checkpoints_of(source, threads), checkpoints_of(target, threads)
    assert all(len(found) > 5 for found in theirs.values())
    assert ours == theirs
    src_saver, dst_saver = HermesSaver(source), HermesSaver(target)
    for thread in threads:
        latest = dst_saver.get_tuple(_config(thread))
        assert latest == src_saver.get_tuple(_config(thread))
        assert latest is not None and len(latest.pending_writes or []) >= 3
        # An older checkpoint by id, with its own channel values.
        older = theirs[thread][3]
        assert dst_saver.get_tuple(older.config) == older
        assert chat_graph(dst_saver).get_state(_config(thread)) == chat_graph(src_saver).get_state(
            _config(thread)
        )
    assert store_rows(target) == store_rows(source)


def test_a_copy_between_sqlite_stores_carries_every_checkpoint_value_and_write(
    source: StateStore, tmp_path: Path
) -> None:
    with StateStore.open(new_home(tmp_path, "target")) as target:
        report = copy_store(source, target, batch_size=7)

        _assert_same_memory(source, target)
        tallies = report.as_dict()["checkpoints"]
        assert tallies["langgraph_writes"]["inserted"] == _count(source, langgraph_writes_table)
        assert tallies["langgraph_blobs"]["inserted"] == _count(source, langgraph_blobs_table)
        assert report.checksums["langgraph_writes"]["count"] > 0
        # The copied thread goes on: resumed on the copy, the paused run ends as it
        # does on the source.
        ours = chat_graph(HermesSaver(target)).invoke(RESUME, _config("trip"))
        theirs = chat_graph(HermesSaver(source)).invoke(RESUME, _config("trip"))
        assert ours == theirs and len(ours["messages"]) > 10


def test_a_second_copy_writes_nothing_and_brings_checkpoints_written_since(
    source: StateStore, tmp_path: Path
) -> None:
    with StateStore.open(new_home(tmp_path, "target")) as target:
        copy_store(source, target, batch_size=5)
        again = copy_store(source, target, batch_size=5)
        assert again.written == 0
        assert all(t.unchanged > 0 for t in again.checkpoints.values())

        fill_threads(source, ("later",))
        third = copy_store(source, target, batch_size=5)

        assert third.checkpoints["langgraph_checkpoints"].inserted > 0
        _assert_same_memory(source, target, (*THREADS, "later"))


def test_a_checkpoint_the_source_deleted_since_is_refused_with_nothing_written(
    source: StateStore, tmp_path: Path
) -> None:
    with StateStore.open(new_home(tmp_path, "target")) as target:
        copy_store(source, target, batch_size=5)
        HermesSaver(source).delete_thread("gone")
        fill_threads(source, ("later",))
        before = checkpoints_of(target)

        with pytest.raises(CopyConflictError, match="delete_thread"):
            copy_store(source, target, batch_size=5)

        assert checkpoints_of(target) == before
        assert checkpoints_of(target, ("later",)) == {"later": []}
        # The fix the error names: the thread deleted in the target too, then a rerun.
        HermesSaver(target).delete_thread("gone")
        copy_store(source, target, batch_size=5)
        _assert_same_memory(source, target, (*THREADS[:2], "later"))


def test_a_killed_copy_finishes_on_rerun_with_no_checkpoint_doubled(
    source: StateStore, tmp_path: Path
) -> None:
    target_home = new_home(tmp_path, "target")
    # The messages come first: killed past them, the kill lands among checkpoint rows.
    messages = source.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM messages").scalar())
    kill_copy_midway(Path(source.home), str(target_home), after=int(messages) + 3, batch_size=3)
    with StateStore.open(target_home) as target:
        partial = _count(target, langgraph_blobs_table)
        report = copy_store(source, target, batch_size=3)

        assert report.checkpoints["langgraph_checkpoints"].unchanged > 0
        assert report.checkpoints["langgraph_blobs"].inserted + partial == _count(
            source, langgraph_blobs_table
        )
        _assert_same_memory(source, target)


def test_progress_counts_checkpoint_rows_after_the_messages(
    source: StateStore, tmp_path: Path
) -> None:
    seen: list[tuple[int, int]] = []
    with StateStore.open(new_home(tmp_path, "target")) as target:
        copy_store(source, target, batch_size=50, progress=lambda d, t: seen.append((d, t)))
    messages = source.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM messages").scalar())
    total = seen[0][1]
    assert total > messages
    assert seen[-1] == (total, total)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


@pytest.mark.pg
def test_sqlite_to_postgresql_and_back_keeps_every_checkpoint(
    source: StateStore, tmp_path: Path
) -> None:
    with pg_target() as pg:
        copy_store(source, pg.store, batch_size=7)
        _assert_same_memory(source, pg.store)
        assert copy_store(source, pg.store, batch_size=7).written == 0

        with StateStore.open(new_home(tmp_path, "back")) as back:
            copy_store(pg.store, back, batch_size=4)
            _assert_same_memory(source, back)


def test_the_cli_summary_and_json_count_the_checkpoint_rows(
    source: StateStore, tmp_path: Path
) -> None:
    target = tmp_path / "cli-target"
    shown = run_cli_from_root("--home", source.home, "db", "copy", "--to", target, "--json")
    assert shown.code == 0, shown.stderr
    summary = json.loads(shown.stdout)
    blobs = _count(source, langgraph_blobs_table)
    assert summary["checkpoints"]["langgraph_blobs"] == {
        "inserted": blobs,
        "updated": 0,
        "unchanged": 0,
    }
    assert summary["verified"]["langgraph_blobs"]["count"] == blobs

    again = run_cli_from_root("--home", source.home, "db", "copy", "--to", target)
    assert again.code == 0, again.stderr
    assert f"langgraph_blobs: 0 new, 0 updated, {blobs} already there" in again.stdout
    assert "LangGraph checkpoints on both sides" in again.stdout


@pytest.mark.pg
def test_a_killed_copy_into_postgresql_finishes_on_rerun_with_no_checkpoint_doubled(
    source: StateStore,
) -> None:
    messages = source.read(lambda c: c.exec_driver_sql("SELECT count(*) FROM messages").scalar())
    with pg_target() as pg:
        kill_copy_midway(Path(source.home), pg.url, after=int(messages) + 3, batch_size=3)
        report = copy_store(source, pg.store, batch_size=3)

        assert report.checkpoints["langgraph_checkpoints"].unchanged > 0
        _assert_same_memory(source, pg.store)
