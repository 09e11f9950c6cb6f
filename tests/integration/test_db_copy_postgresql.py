"""Copying a store to PostgreSQL and back: the variants of test_db_copy.py that need a
server. They skip, saying so, unless HERMES_TEST_PG_URL names one (a superuser URL: each
test creates and drops its own database)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from hermes_repo import StateStore
from hermes_repo.schema.copy_mark import COPIED_FROM_KEY, COPY_MARK_KEY, STORE_ID_KEY
from hermes_repo.transfer.copy import CopyConflictError, CopyError, copy_store
from tests.support.copying import (
    PgEnd,
    fill_odd_store,
    fill_plain_store,
    kill_copy_midway,
    message_count,
    meta_value,
    new_home,
    pg_target,
    set_meta,
    store_rows,
    store_with_session,
)

pytestmark = pytest.mark.pg


@pytest.fixture
def source(tmp_path: Path) -> Iterator[StateStore]:
    with StateStore.open(new_home(tmp_path, "source")) as store:
        fill_odd_store(store)
        yield store


@pytest.fixture
def pg_end() -> Iterator[PgEnd]:
    with pg_target() as end:
        yield end


@pytest.fixture
def pg(pg_end: PgEnd) -> StateStore:
    return pg_end.store


def test_sqlite_to_postgresql_brings_every_row_with_every_column(
    source: StateStore, pg: Any
) -> None:
    report = copy_store(source, pg, batch_size=3)

    assert store_rows(pg) == store_rows(source)
    assert report.target.startswith("postgresql")
    assert copy_store(source, pg).written == 0


def test_the_id_sequence_moves_past_the_copied_ids(source: StateStore, pg: Any) -> None:
    copy_store(source, pg)

    def append(uow: Any) -> int:
        stmt = text(
            "INSERT INTO messages (session_id, uid, role, timestamp, display_only, active) "
            "VALUES ('lonely', 'after-copy', 'user', :t, 0, 1) RETURNING id"
        )
        return int(uow.connection.execute(stmt, {"t": time.time()}).scalar_one())

    assert pg.write(append) == 39


def test_postgresql_back_to_a_new_sqlite_store_gives_identical_rows(
    tmp_path: Path, source: StateStore, pg: Any
) -> None:
    copy_store(source, pg)
    with StateStore.open(new_home(tmp_path, "back")) as back:
        copy_store(pg, back, batch_size=4)

        assert store_rows(back) == store_rows(source)


def test_a_postgresql_target_with_another_stores_rows_is_refused(
    tmp_path: Path, source: StateStore, pg: Any
) -> None:
    with StateStore.open(new_home(tmp_path, "other")) as other:
        fill_odd_store(other)
        copy_store(other, pg)
    before = store_rows(pg)

    with pytest.raises(CopyConflictError, match="another store"):
        copy_store(source, pg)

    assert store_rows(pg) == before


def test_a_killed_copy_into_postgresql_finishes_on_rerun(
    tmp_path: Path, pg_end: PgEnd, pg: StateStore
) -> None:
    src_home = new_home(tmp_path, "big")
    with StateStore.open(src_home) as src:
        fill_plain_store(src, sessions=20, per_session=500)
    total = 10_000

    kill_copy_midway(src_home, pg_end.url, after=total // 10)

    partial = message_count(pg)
    assert total // 10 <= partial < total

    with StateStore.open(src_home) as src:
        report = copy_store(src, pg, batch_size=500)

        assert report.messages.inserted == total - partial
        assert store_rows(pg) == store_rows(src)


def test_text_holding_nul_is_refused_by_name_and_the_rest_resumes_once_fixed(
    tmp_path: Path, pg: Any
) -> None:
    home = new_home(tmp_path, "nul")
    store_with_session(home, "s")
    with StateStore.open(home) as source:
        source.append_message("s", {"role": "user", "content": "fine"})
        bad = source.append_message("s", {"role": "user", "content": "a\x00b"})

        with pytest.raises(CopyError, match=f"messages row {bad}: column content holds a NUL"):
            copy_store(source, pg)

        assert message_count(pg) == 0  # the batch holding it was not written
        with source.unit_of_work() as uow:
            uow.connection.execute(
                text("UPDATE messages SET content = 'ab' WHERE id = :i"), {"i": bad}
            )
            uow.commit()
        copy_store(source, pg)
        assert store_rows(pg) == store_rows(source)


def test_copies_between_sqlite_and_postgresql_keep_each_store_id_and_record_the_source(
    tmp_path: Path, source: StateStore, pg: Any
) -> None:
    set_meta(source, STORE_ID_KEY, "sqlite-1")
    set_meta(pg, STORE_ID_KEY, "pg-1")

    copy_store(source, pg, batch_size=4)
    assert meta_value(pg, STORE_ID_KEY) == "pg-1"
    assert meta_value(pg, COPIED_FROM_KEY) == '["sqlite-1"]'
    assert meta_value(pg, COPY_MARK_KEY) is None
    with StateStore.open(new_home(tmp_path, "back")) as back:
        copy_store(pg, back)
        assert meta_value(back, STORE_ID_KEY) != "pg-1"
        assert meta_value(back, COPIED_FROM_KEY) == '["pg-1"]'
        assert store_rows(back) == store_rows(source)
