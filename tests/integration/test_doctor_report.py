"""``diagnose(home)``: the FTS part of the doctor, on real stores, writing nothing."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.maintenance.fts_rebuild import REPAIR_COMMAND
from hermes_repo.ops.doctor import (
    CheckResult,
    DoctorContext,
    DoctorReadError,
    check_store,
    diagnose,
)
from hermes_repo.ops.repair import repair_store
from hermes_repo.schema import fts, migrate
from tests.support import damage
from tests.support.fts_checks import (
    MODULE,
    SEED_ROWS,
    SEED_SESSION,
    read_state,
)
from tests.support.holding import held_by_another_process
from tests.support.stores import copy_store

REPAIR = REPAIR_COMMAND.removeprefix("hermes-repo ")


EMPTY_DIGEST = damage.file_digest(Path("/dev/null"))


def _files(home: Path) -> dict[str, str | None]:
    """Digest of every store file: the doctor must change none of them."""
    return {
        name: damage.file_digest(home / name)
        for name in ("state.db", "state.db-wal", "state.db.fts-rebuild.json")
    }


def _unchanged(before: dict[str, str | None], after: dict[str, str | None]) -> bool:
    # A reader of a WAL database needs its -wal (SQLite creates it empty if missing,
    # as for any reader); an empty new -wal is not a change of the store.
    if before["state.db-wal"] is None and after["state.db-wal"] == EMPTY_DIGEST:
        after = {**after, "state.db-wal": None}
    return before == after


def _codes(home: Path) -> list[str]:
    return [f.code for f in diagnose(home).findings]


def test_healthy_store_has_no_findings_and_reports_its_facts(seeded_home: Path) -> None:
    report = diagnose(seeded_home)

    assert report.healthy and report.findings == []
    store = report.store
    assert store.exists and store.at_head and store.revision == migrate.head_revision()
    assert store.counts == {"sessions": 1, "messages": SEED_ROWS, "active_messages": SEED_ROWS}
    assert store.sqlite_version == select_driver().sqlite_version
    assert store.driver == select_driver().name
    status = report.fts
    assert status is not None and not status.stale and status.marker is None
    assert status.triggers == dict.fromkeys(fts.TRIGGER_NAMES, True)
    for ix in status.indexes:
        assert ix.ok and ix.problems == [] and ix.indexed_rows == ix.covered_rows
        assert ix.integrity == "ok" or ix.integrity.startswith("not checked")
    # --json is json.dumps of this
    assert json.loads(json.dumps(report.to_dict()))["healthy"] is True


def test_detached_index_is_a_finding_with_the_exact_repair_command(seeded_home: Path) -> None:
    damage.fts_delete_averages(seeded_home / "state.db", module=MODULE)
    with StateStore.open(seeded_home) as store:
        store.append_message(SEED_SESSION, {"role": "user", "content": "after"})
        before = _files(seeded_home)
        report = diagnose(seeded_home)  # while this process holds the store
        assert _unchanged(before, _files(seeded_home))

    assert not report.healthy
    (finding,) = report.findings
    assert finding.code == "fts-stale"
    status = report.fts
    assert status is not None and status.stale and status.marker is not None
    assert status.marker["error"] in finding.summary  # the SQLite error, for the operator
    # SQLite 3.53 names the index in the error; 3.40 says only "malformed".
    assert status.marker["index"] in ("messages_fts", None)
    assert finding.fix == (
        "stop every process using the store (e.g. the gateway), then run "
        f"`hermes-repo --home {seeded_home} {REPAIR}`"
    )
    assert not any(status.triggers.values())
    # The index missed the row written while detached: the facts say so.
    words = status.indexes[0]
    assert (words.name, words.indexed_rows, words.covered_rows) == (
        "messages_fts",
        SEED_ROWS,
        SEED_ROWS + 1,
    )


def test_automatic_rebuild_that_gave_up_is_named_in_the_finding(seeded_home: Path) -> None:
    damage.fts_delete_averages(seeded_home / "state.db", module=MODULE)
    with StateStore.open(seeded_home) as store:
        store.append_message(SEED_SESSION, {"role": "user", "content": "after"})
        # The ledger a failed rebuild leaves (see maintenance.fts_rebuild).
        since = json.loads(read_state(seeded_home / "state.db").marker or "{}")["since"]
        ledger = {"since": since, "attempts": 3, "last_error": "database or disk is full"}
        (seeded_home / "state.db.fts-rebuild.json").write_text(json.dumps(ledger))
        report = diagnose(seeded_home)

    (finding,) = report.findings
    assert "gave up after 3 attempts (last error: database or disk is full)" in finding.summary
    assert report.fts is not None and report.fts.rebuild_attempts == 3


# Damage that reads can show, whatever the SQLite version (no FTS5 integrity hook
# needed): the record the doctor finds missing or wrong.
@pytest.mark.parametrize(
    ("inflict", "problem"),
    [
        (damage.fts_delete_structure, "structure record missing"),
        (damage.fts_zero_structure, "structure record is empty but documents are indexed"),
        (damage.fts_delete_averages, "averages record missing"),
        (damage.fts_bad_config_version, "unsupported format version 99"),
        (damage.fts_delete_all_data, "structure record missing"),
    ],
    ids=["structure", "zeroed-structure", "averages", "config-version", "all-data"],
)
@pytest.mark.parametrize("index", [ix.name for ix in fts.INDEXES])
def test_damage_not_yet_detached_is_a_finding(
    seeded_home: Path, inflict: Callable[..., object], problem: str, index: str
) -> None:
    inflict(seeded_home / "state.db", index, module=MODULE)
    before = _files(seeded_home)
    report = diagnose(seeded_home)
    assert _unchanged(before, _files(seeded_home))

    (finding,) = report.findings
    assert finding.code == "fts-damaged"
    assert finding.summary.startswith(f"{index} is damaged but not detached yet")
    assert problem in finding.summary
    assert REPAIR in finding.fix
    assert read_state(seeded_home / "state.db").live  # the doctor changed nothing


def test_index_that_fell_behind_without_triggers_is_a_finding(seeded_home: Path) -> None:
    db = seeded_home / "state.db"
    con = MODULE.connect(str(db), isolation_level=None)
    try:  # what an old tool that dropped the triggers would leave behind
        for name in fts.TRIGGER_NAMES:
            con.execute(f"DROP TRIGGER {name}")
        con.execute(
            "INSERT INTO messages (session_id, uid, role, content, timestamp) "
            "VALUES (?, 'stray', 'user', 'not indexed', 0)",
            (SEED_SESSION,),
        )
    finally:
        con.close()

    report = diagnose(seeded_home)
    assert [f.code for f in report.findings] == ["fts-triggers-missing", "fts-behind", "fts-behind"]
    assert report.fts is not None
    for finding, ix in zip(report.findings[1:], report.fts.indexes, strict=True):
        assert ix.indexed_rows is not None and ix.covered_rows == ix.indexed_rows + 1
        assert f"holds {ix.indexed_rows} of the {ix.covered_rows} rows" in finding.summary


def test_old_sqlite_reports_wal_risk_and_skips_the_read_only_fts_check(
    seeded_home: Path, tmp_path: Path
) -> None:
    stdlib = select_driver("stdlib")
    if stdlib.has_wal_reset_fix:
        pytest.skip("the standard sqlite3 here already has the WAL-reset fix")
    # Another PROCESS keeps the file in WAL mode while it is diagnosed: a store open in
    # this process on pysqlite3 next to the doctor's standard sqlite3 would be two
    # copies of SQLite on one file, blind to each other's locks.
    with held_by_another_process(seeded_home, tmp_path / "signals"):
        report = diagnose(seeded_home, driver=stdlib)
    codes = [f.code for f in report.findings]
    if report.store.journal_mode == "wal":
        assert codes == ["sqlite-wal-reset-bug"]
        assert "pip install pysqlite3" in report.findings[0].fix
    assert report.fts is not None
    if stdlib.version_tuple < (3, 45, 1):
        assert all(ix.integrity.startswith("not checked") for ix in report.fts.indexes)


@pytest.mark.parametrize("state", ["missing", "empty", "unknown-revision"])
def test_store_that_cannot_be_opened_is_a_finding(
    tmp_path: Path, seeded_template: Path, state: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    if state == "empty":
        (home / "state.db").touch()
    elif state == "unknown-revision":
        copy_store(seeded_template, home)
        con = sqlite3.connect(home / "state.db")
        con.execute("UPDATE alembic_version SET version_num = 'from_the_future'")
        con.commit()
        con.close()
    before = sorted(p.name for p in home.iterdir())

    codes = _codes(home)
    expected = {
        "missing": ["store-missing"],
        "empty": ["store-missing"],
        "unknown-revision": ["schema-ahead"],
    }[state]
    assert codes == expected
    if state != "unknown-revision":  # nothing created where there is no store
        assert sorted(p.name for p in home.iterdir()) == before


def test_a_check_that_cannot_read_becomes_a_finding_not_a_crash(seeded_home: Path) -> None:
    def check_header(ctx: DoctorContext) -> CheckResult:
        ctx.rows("SELECT * FROM no_such_table")
        return CheckResult("header", None)

    report = diagnose(seeded_home, checks=[check_store, check_header])
    (finding,) = report.findings
    assert finding.code == "header-unreadable"
    assert "no such table" in finding.summary
    assert "sessions salvage" in finding.fix
    assert set(report.sections) == {"store"}
    assert issubclass(DoctorReadError, Exception)


def test_a_store_of_messages_too_short_to_index_is_healthy_and_fix_changes_nothing(
    home: Path,
) -> None:
    # One- and two-character messages give the trigram index no token, and a run of
    # punctuation gives unicode61 none: their indexes hold documents and no term, which
    # is an empty structure record, not damage.
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        sid = uow.sessions.create(id="short")
        for text in ["hi", "ok", "是", "..", "?!", "no"]:
            uow.messages.append(sid, {"role": "user", "content": text})
            uow.messages.append(sid, {"role": "assistant", "content": text})
        uow.commit()
    assert _codes(home) == []
    before = sorted(p.name for p in home.iterdir())
    report = repair_store(home)
    assert report.ok
    # Nothing to fix: no backup, no snapshot, no rebuild ledger.
    after = sorted(p.name for p in home.iterdir())
    assert [n for n in after if n not in before and n != "state.db.holders"] == []
