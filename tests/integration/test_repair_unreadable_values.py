"""``sessions repair`` rewrites the values the store cannot read (another tool's, a hand
edit's) by a fixed rule, keeping each message row as it was as an archived row: after
it every active row reads without ``$invalid``, and the doctor is clean."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from sqlalchemy import text

from hermes_repo import StateStore
from hermes_repo.codec import INVALID_KEY, MAX_TIMESTAMP
from hermes_repo.ops.doctor import diagnose
from hermes_repo.ops.repair import repair_store
from hermes_repo.transcript.reconcile import original_reason
from tests.support.odd_values import damaged_session


def _doctor_values(home: Path, backend: str) -> dict[str, Any]:
    if backend == "sqlite":
        report = diagnose(home)
    else:
        from hermes_repo.engine_pg import resolve_url
        from hermes_repo.ops.doctor import diagnose_server

        target = resolve_url(None)
        assert target is not None
        report = diagnose_server(home, target)
    codes = [f.code for f in report.findings]
    values = report.to_dict()["values"]
    return {"codes": codes, **values}


def test_repair_rewrites_every_unreadable_value_and_keeps_each_row_as_it_was(
    backend: str, home: Path
) -> None:
    with StateStore.open(home) as store:
        sid, damaged, odd = damaged_session(store, backend)
        before = {m["id"]: m for m in store.load_conversation(sid, with_ids=True).messages}
    found = _doctor_values(home, backend)
    assert "value-unreadable" in found["codes"]
    checked = repair_store(home, check_only=True)
    assert not checked.ok and checked.summary == "the store needs a repair"

    report = repair_store(home)
    assert report.ok, report.summary
    assert report.values is not None
    # Every value the doctor counted (sessions' and messages') was rewritten.
    assert len(report.values.fixes) == found["unreadable"]
    assert "unreadable value(s) rewritten" in report.summary
    rewritten = {f.message_id for f in report.values.fixes if f.message_id is not None}
    assert {mid for mid, _, _ in damaged} | set(odd) == rewritten

    with StateStore.open(home) as store:
        after = store.load_conversation(sid, with_ids=True).messages
        everything = store.load_conversation(sid, with_ids=True, include_inactive=True).messages
        (info,) = store.list_sessions()
    assert all(INVALID_KEY not in m for m in after)
    assert [m["id"] for m in after] == list(before)  # same rows, same order
    assert all(isinstance(m["timestamp"], float) for m in after)
    assert all(0 <= m["timestamp"] < MAX_TIMESTAMP for m in after)
    assert info.extra is None  # '{bad' had no reading: NULL, and the report lists it
    assert [f.was for f in report.values.fixes if f.message_id is None] == ["{bad"]

    # Each rewritten row's original is an archived row holding the exact stored values.
    originals = {m["archive_reason"]: m for m in everything if m.get("active") is False}
    for mid, field, raw in damaged:
        kept = originals[original_reason(mid)]
        assert kept[INVALID_KEY][field]["raw"] == raw, (mid, field)
    for mid in odd:
        kept_time = originals[original_reason(mid)]["timestamp"]
        assert kept_time != kept_time or not 0 <= kept_time < MAX_TIMESTAMP  # NaN too

    clean = _doctor_values(home, backend)
    assert "value-unreadable" not in clean["codes"]
    assert clean["unreadable"] == 0
    assert clean["archived_unreadable"] >= len(damaged)
    assert repair_store(home, check_only=True).ok

    again = repair_store(home)
    assert again.ok and again.summary.startswith("nothing needed repair"), again.summary
    assert again.backup is None


def test_each_rule_reads_what_another_tool_wrote(home: Path) -> None:
    with StateStore.open(home) as store:
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(id="rules")
            uow.commit()
        ids = [
            store.append_message(sid, {"role": r, "content": f"m{i}", "timestamp": 1000.0 + i})
            for i, r in enumerate(["user", "assistant"] * 4)
        ]
        sets = {
            ids[1]: "timestamp = '2024-01-01T00:00:00Z', token_count = '42'",
            ids[2]: "timestamp = '  1700000000.5 '",
            ids[3]: "timestamp = 1700000000500.0",  # milliseconds
            ids[4]: "timestamp = 'yesterday', tool_name = 7",
            # Latin-1 bytes bound as TEXT: "caf\xe9".
            ids[5]: "content = CAST(X'636166e9' AS TEXT)",
            ids[6]: "content = NULL, content_parts = 'plain words, not JSON'",
            ids[7]: "reasoning = X'68656c6c6f'",  # a blob that is UTF-8
        }
        with store.engine.begin() as conn:
            for mid, assignment in sets.items():
                conn.execute(text(f"UPDATE messages SET {assignment} WHERE id = {mid}"))
    found = _doctor_values(home, "sqlite")
    reasons = {(v["message_id"], v["field"]): v["reason"] for v in found["values"]}
    assert "not UTF-8" in reasons[(ids[5], "content")]

    report = repair_store(home)
    assert report.ok, report.summary
    with StateStore.open(home) as store:
        rows = {m["id"]: m for m in store.load_conversation(sid, with_ids=True).messages}
        assert [h.message_id for h in store.search("plain words")] == [ids[6]]
        with store.engine.connect() as conn:
            kept = conn.execute(
                text("SELECT CAST(content AS BLOB) FROM messages WHERE archive_reason = :r"),
                {"r": original_reason(ids[5])},
            ).scalar_one()
    utc = dt.UTC
    assert rows[ids[1]]["timestamp"] == dt.datetime(2024, 1, 1, tzinfo=utc).timestamp()
    assert rows[ids[1]]["token_count"] == 42
    assert rows[ids[2]]["timestamp"] == 1700000000.5
    assert rows[ids[3]]["timestamp"] == 1700000000.5
    assert rows[ids[4]]["timestamp"] == rows[ids[3]]["timestamp"]  # the row before
    assert rows[ids[4]]["tool_name"] == "7"
    assert rows[ids[5]]["content"] == "caf\ufffd"
    assert kept == b"caf\xe9"  # the archived original keeps the stored bytes
    assert rows[ids[6]]["content"] == "plain words, not JSON"
    assert rows[ids[7]]["reasoning"] == "hello"
    assert all(INVALID_KEY not in m for m in rows.values())
