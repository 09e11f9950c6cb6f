"""The one-message append on PostgreSQL, as the server sees it: its statements and round
trips on the wire (libpq's protocol trace), whichever layer sends them."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_repo import StateStore
from tests.support.pg import PgServer
from tests.support.stores import new_session
from tests.support.wiretrace import wire

#: One append: its transaction, its lock wait bounded, the counters, the row with its
#: new id, the commit. No ping, no follow-up SELECT, no receipt row.
_ONE_APPEND = [
    r"BEGIN",
    r"SET LOCAL lock_timeout = \d+",
    r"UPDATE sessions SET message_count=\(sessions\.message_count \+ \$1::BIGINT\), .*",
    r"INSERT INTO messages \(session_id, uid, .*\) VALUES \(.*\) RETURNING messages\.id",
    r"COMMIT",
]


@pytest.fixture
def pg_store(tmp_path: Path, pg_server: PgServer, pg_template: str) -> Iterator[StateStore]:
    name = pg_server.new_name("wire")
    url = pg_server.create(name, template=pg_template).render_as_string(hide_password=False)
    store = StateStore.open(tmp_path / "home", url=url)
    try:
        yield store
    finally:
        store.close()
        pg_server.drop(name)


def test_each_append_is_its_five_statements_in_five_round_trips_and_nothing_else(
    pg_store: StateStore,
) -> None:
    sid = new_session(pg_store)
    with wire(pg_store.engine) as sent:
        ids = [pg_store.append_message(sid, {"role": "user", "content": f"m{i}"}) for i in range(3)]
    assert len(sent.statements) == 3 * len(_ONE_APPEND), sent.statements
    for got, want in zip(sent.statements, _ONE_APPEND * 3, strict=True):
        assert re.fullmatch(want, got), (want, got)
    assert sent.round_trips == 3 * len(_ONE_APPEND)
    # The ids are the rows' own, in order, and the counters followed.
    loaded = pg_store.load_conversation(sid, with_ids=True).messages
    assert [m["id"] for m in loaded] == ids
    assert pg_store.get_session(sid).message_count == 3
