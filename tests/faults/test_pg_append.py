"""The one-message append on PostgreSQL keeps its connection between calls (no checkout
ping per message); a kept connection that the server lost is replaced transparently."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import event

from hermes_repo import NotFoundError, StateStore
from tests.support.pg import PgServer


@pytest.fixture
def pg_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    name = pg_server.new_name("append")
    url = pg_server.create(name, template=pg_template)
    yield url.render_as_string(hide_password=False)
    pg_server.drop(name)


@pytest.fixture
def pg_store(tmp_path: Path, pg_url: str) -> Iterator[StateStore]:
    store = StateStore.open(tmp_path / "pg-home", url=pg_url, write_budget_s=10)
    try:
        yield store
    finally:
        store.close()


def _session(store: StateStore) -> str:
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(source="cli")
        uow.commit()
    return sid


def _terminate_every_other_backend(url: str) -> int:
    with psycopg.connect(
        url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    ) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return len(rows)


def test_consecutive_appends_check_out_no_connection_after_the_first(
    pg_store: StateStore,
) -> None:
    sid = _session(pg_store)
    pg_store.append_message(sid, {"role": "user", "content": "first"})
    checkouts: list[object] = []
    event.listen(pg_store.engine.pool, "checkout", lambda *a: checkouts.append(a[0]))
    for i in range(5):
        pg_store.append_message(sid, {"role": "user", "content": f"m{i}"})
    assert checkouts == []
    assert pg_store.get_session(sid).message_count == 6


def test_an_append_after_the_server_dropped_the_kept_connection_is_replayed(
    pg_store: StateStore, pg_url: str
) -> None:
    sid = _session(pg_store)
    pg_store.append_message(sid, {"role": "user", "content": "one"})
    assert _terminate_every_other_backend(pg_url) >= 1
    pg_store.append_message(sid, {"role": "assistant", "content": "two"})
    pg_store.append_message(sid, {"role": "user", "content": "three"})
    contents = [m["content"] for m in pg_store.load_conversation(sid).messages]
    assert contents == ["one", "two", "three"]
    assert pg_store.get_session(sid).message_count == 3


def test_an_append_to_a_missing_session_still_names_the_session(pg_store: StateStore) -> None:
    sid = _session(pg_store)
    pg_store.append_message(sid, {"role": "user", "content": "one"})
    with pytest.raises(NotFoundError, match="nosuch"):
        pg_store.append_message("nosuch", {"role": "user", "content": "x"})
    pg_store.append_message(sid, {"role": "user", "content": "two"})
    assert pg_store.get_session(sid).message_count == 2
