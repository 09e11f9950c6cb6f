"""The repositories' dialect-specific statements on both backends: the counters recount
(SQLite's JSON functions there, the same rule elsewhere) and the state_meta upsert."""

from __future__ import annotations

import pytest

from hermes_repo import StateStore
from hermes_repo.codec import message_to_row

pytestmark = pytest.mark.usefixtures("backend")


def test_recount_counts_calls_of_json_arrays_only_and_active_rows_only(
    store: StateStore,
) -> None:
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(source="cli")
        rows = []
        for i, (calls, active) in enumerate(
            [("[1, 2]", 1), ("not json {", 1), ('{"a": 1}', 1), ("[1, 2, 3]", 0), (None, 1)]
        ):
            row = message_to_row(sid, {"role": "assistant", "content": f"m{i}"})
            row.update(tool_calls=calls, active=active, archived_at=None, archive_reason=None)
            rows.append(row)
        uow.messages.insert_rows(rows)
        uow.messages.recount(sid)
        uow.commit()
    info = store.get_session(sid)
    assert (info.message_count, info.tool_call_count) == (4, 2)


def test_state_meta_set_inserts_then_replaces_the_value(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        uow.meta.set("probe", "one")
        uow.meta.set("probe", "two")
        uow.commit()
    with store.unit_of_work() as uow:
        assert uow.meta.get("probe") == "two"
        assert uow.meta.delete("probe")
        uow.commit()
