"""`sessions salvage` carries LangGraph's memory: the checkpoint, channel value and
pending write rows it can read go into the new store unchanged; the rows on a damaged
page are counted as missing, and nothing stands in for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from hermes_repo import StateStore
from hermes_repo.integrations.langgraph import HermesSaver, session_id_for
from hermes_repo.salvage import salvage
from hermes_repo.salvage.shapes import CHECKPOINT_TABLES
from tests.cli.conftest import run_cli_from_root
from tests.support import damage
from tests.support.langgraph_threads import THREADS, checkpoints_of, fill_threads

MODULE = damage.DRIVER


def _rows(db: Path, table: str) -> set[tuple[Any, ...]]:
    con = MODULE.connect(f"{db.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return {tuple(r) for r in con.execute(f"SELECT * FROM {table}")}
    finally:
        con.close()


@pytest.fixture
def source(tmp_path: Path) -> Path:
    home = tmp_path / "source"
    home.mkdir(mode=0o700)
    with StateStore.open(home) as store:
        fill_threads(store)
    db = home / "state.db"
    damage.checkpoint_and_close(db)
    return db


def test_salvage_of_an_intact_store_carries_every_thread_whole(
    source: Path, tmp_path: Path
) -> None:
    with StateStore.open(source.parent) as store:
        before = checkpoints_of(store)
    output = tmp_path / "out" / "state.db"

    result = salvage(source, output)

    for table in CHECKPOINT_TABLES:
        assert _rows(output, table) == _rows(source, table) != set()
        assert result.after[table] == result.before.tables[table].claimed
        assert result.before.tables[table].complete
    with StateStore.open(output.parent) as store:
        assert checkpoints_of(store) == before
        assert {store.get_session(session_id_for(t)).source for t in THREADS} == {"langgraph"}


def test_a_damaged_checkpoint_page_loses_only_its_rows_and_says_how_many(
    source: Path, tmp_path: Path
) -> None:
    with StateStore.open(source.parent) as store:
        before = checkpoints_of(store)
    every = _rows(source, "langgraph_checkpoints")
    values = {t: _rows(source, t) for t in ("langgraph_blobs", "langgraph_writes")}
    leaves = damage.btree_pages(source, "langgraph_checkpoints", "leaf")
    assert len(leaves) > 1, "the checkpoints must span several pages for this test"
    damage.damage_first_leaf(source, "langgraph_checkpoints")
    output = tmp_path / "out" / "state.db"

    result = salvage(source, output)

    report = result.before.tables["langgraph_checkpoints"]
    kept = _rows(output, "langgraph_checkpoints")
    assert kept < every  # some lost, none invented or altered
    assert report.claimed == len(every)
    assert report.recoverable == len(kept) == result.after["langgraph_checkpoints"]
    assert not report.complete and not result.before.complete
    # The values and writes were on undamaged pages: every one is kept.
    for table, rows in values.items():
        assert _rows(output, table) == rows
    with StateStore.open(output.parent) as store:
        after = checkpoints_of(store)
        assert sum(map(len, after.values())) == len(kept)
        for thread, found in after.items():
            originals = {c.config["configurable"]["checkpoint_id"]: c for c in before[thread]}
            for checkpoint in found:
                assert checkpoint == originals[checkpoint.config["configurable"]["checkpoint_id"]]


def test_a_damaged_checkpoint_root_keeps_every_row_through_the_page_scanner(
    source: Path, tmp_path: Path
) -> None:
    every = {t: _rows(source, t) for t in CHECKPOINT_TABLES}
    assert damage.btree_pages(source, "langgraph_checkpoints", "internal")
    damage.damage_root(source, "langgraph_checkpoints")
    output = tmp_path / "out" / "state.db"

    result = salvage(source, output)

    # The leaves no b-tree reaches any more are read by shape, each row to its table.
    assert result.before.scanner_used
    assert result.before.tables["langgraph_checkpoints"].scan_only > 0
    for table, rows in every.items():
        assert _rows(output, table) == rows


def test_checkpoints_whose_session_row_was_lost_keep_a_placeholder_session(
    source: Path, tmp_path: Path
) -> None:
    with StateStore.open(source.parent) as store:
        # A thread without messages: only its checkpoint names its session.
        HermesSaver(store).put(
            {"configurable": {"thread_id": "silent", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {"source": "input", "step": -1},
            {},
        )
    damage.checkpoint_and_close(source)
    every = {t: _rows(source, t) for t in CHECKPOINT_TABLES}
    damage.damage_root(source, "sessions")  # one page: every session row is lost
    output = tmp_path / "out" / "state.db"

    result = salvage(source, output)

    assert result.integrity == "ok"
    assert set(result.placeholders) >= {session_id_for(t) for t in (*THREADS, "silent")}
    for table, rows in every.items():
        assert _rows(output, table) == rows


def test_the_cli_names_the_unreadable_checkpoint_rows(source: Path, tmp_path: Path) -> None:
    every = len(_rows(source, "langgraph_checkpoints"))
    damage.damage_first_leaf(source, "langgraph_checkpoints")
    output = tmp_path / "out" / "state.db"

    shown = run_cli_from_root("sessions", "salvage", "--source", source, "--output", output)

    assert shown.code == 0, shown.stdout + shown.stderr
    lost = every - len(_rows(output, "langgraph_checkpoints"))
    assert lost > 0
    assert (
        f"LangGraph checkpoint rows unreadable (not recovered): {lost} of langgraph_checkpoints"
        in " ".join(shown.stdout.split())
    )
