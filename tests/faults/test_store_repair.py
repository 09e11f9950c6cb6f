"""The explicit repair, ``hermes-repo sessions repair`` (seed 003, part 3; invariant 3).

Real store files, real damage (``tests/support/damage.py``), a real second process
holding the store. What is asserted is read from the file afterwards through a
separate read-only connection:

* the repair refuses at once while another process holds the store, and changes no
  byte of it;
* a search index the automatic rebuild gave up on is rebuilt, and the seed's three
  verification queries hold (no ``fts_stale`` row, the triggers present, canonical
  counts not lower);
* an index that is damaged, or lost its triggers, without a stale marker is rebuilt too;
* a file whose canonical tables are damaged is never repaired in place: the command
  fails naming ``sessions salvage``, the live file keeps its bytes, the backup is kept;
* across every scenario the canonical counts never go down.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import create_store_engine
from hermes_repo.holders import HolderLock, holders_path
from hermes_repo.maintenance.fts_rebuild import BACKUP_LABEL as REBUILD_BACKUP_LABEL
from hermes_repo.maintenance.snapshots import list_snapshots
from hermes_repo.ops.repair import (
    BACKUP_LABEL,
    RepairReport,
    RepairStoreHeldError,
    repair_store,
    verify,
)
from hermes_repo.schema import fts
from tests.cli.conftest import run_cli_from_root
from tests.support import damage
from tests.support.faultinject import FaultInjector, endswith
from tests.support.fts_checks import (
    CJK_TERM,
    MODULE,
    TERMS,
    canonical_like_ids,
    fts_match_ids,
    give_up_rebuild,
    read_state,
    repair_originals,
    ro_connect,
)
from tests.support.holding import held_by_another_process
from tests.support.stores import store_digests
from tests.support.transcripts import MALFORMED, seed

SEED_TRIGGERS = ("messages_fts_insert", "messages_fts_update", "messages_fts_delete")


def _db(home: Path) -> Path:
    return home / "state.db"


def _canonical(db: Path) -> tuple[int, int]:
    state = read_state(db)
    return state.sessions, state.messages


# -- stores that need a repair -------------------------------------------------------------


RECIPES: dict[str, Callable[[Path], object]] = {
    "averages-record": lambda db: damage.fts_delete_averages(db, module=MODULE),
    "config-version": lambda db: damage.fts_bad_config_version(db, module=MODULE),
    # Page damage inside a shadow b-tree: the rebuild must purge and VACUUM.
    "data-page": lambda db: damage.damage_fts_shadow_page(db, which=0, module=MODULE),
}


def _drop_triggers(home: Path) -> None:
    """Triggers gone without a marker (a hand edit, an old tool): search misses rows."""
    con = MODULE.connect(str(_db(home)), isolation_level=None)
    try:
        for name in fts.TRIGGER_NAMES[:3]:
            con.execute(f"DROP TRIGGER {name}")
    finally:
        con.close()


def _add_malformed_transcript(home: Path) -> None:
    with StateStore.open(home) as store:
        seed(store, MALFORMED, source="cli")


SCENARIOS: dict[str, Callable[[Path], object]] = {
    "transcripts-only": _add_malformed_transcript,
    "gave-up-averages": lambda h: give_up_rebuild(h, RECIPES["averages-record"]),
    "gave-up-data-page": lambda h: give_up_rebuild(h, RECIPES["data-page"]),
    "triggers-missing-no-marker": _drop_triggers,
    # Damaged but never met by a write: no marker; the repair must find it itself.
    "damaged-not-detached": lambda h: damage.fts_zero_structure(_db(h), module=MODULE),
}


def _fts_answers_like_canonical_rows(db: Path) -> None:
    """Each index returns exactly the canonical rows it covers, for every term."""
    with ro_connect(db) as con:
        for term in TERMS:
            for ix in fts.INDEXES:
                if ix.name == "messages_fts" and term == CJK_TERM:
                    continue  # unicode61 makes one token of a CJK run: trigram's job
                expected = canonical_like_ids(con, ix, term)
                assert expected and fts_match_ids(con, ix, term) == expected, (ix.name, term)


# -- refused while held --------------------------------------------------------------------


def test_repair_refuses_at_once_while_another_process_holds_the_store(
    seeded_home: Path, tmp_path: Path
) -> None:
    give_up_rebuild(seeded_home, RECIPES["averages-record"])  # a store that does need repair
    before = store_digests(seeded_home)

    with held_by_another_process(seeded_home, tmp_path / "signals") as holder:
        with pytest.raises(RepairStoreHeldError) as info:
            repair_store(seeded_home)
        assert info.value.pids == (holder.pid,)
        message = str(info.value)
        assert f"pid {holder.pid}" in message
        assert "Stop every process using the store" in message
        assert f"hermes-repo --home {seeded_home} sessions repair" in message
        assert store_digests(seeded_home) == before

        # --check-only writes nothing, so it runs while the gateway does.
        check = repair_store(seeded_home, check_only=True)
        assert check.damage == "index" and not check.ok
        assert [f.code for f in check.findings] == ["fts-stale", "store-held"]
        assert store_digests(seeded_home) == before

    assert store_digests(seeded_home) == before
    assert not list(seeded_home.glob(f"state.db.{BACKUP_LABEL}-*"))
    assert list_snapshots(seeded_home) == []
    assert read_state(_db(seeded_home)).detached


def test_holder_lock_is_reentrant_and_keeps_the_store_alone_to_the_end(home: Path) -> None:
    """The repair holds the store exclusively and the rebuild inside asks again."""
    holder = HolderLock(_db(home))

    def someone_else_can_open() -> bool:
        fd = os.open(holders_path(_db(home)), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        return True

    with holder.exclusive():
        with holder.exclusive():  # what guarded_rebuild does inside the repair
            assert not someone_else_can_open()
        assert not someone_else_can_open()  # the inner block handed nothing back
    assert someone_else_can_open()


# -- index damage: rebuilt, verified as the seed does ---------------------------------------


@pytest.mark.parametrize("recipe", list(RECIPES))
def test_sessions_repair_rebuilds_an_index_the_automatic_rebuild_gave_up_on(
    seeded_home: Path, recipe: str
) -> None:
    db = _db(seeded_home)
    give_up_rebuild(seeded_home, RECIPES[recipe])
    sessions, messages = _canonical(db)

    result = run_cli_from_root("--home", seeded_home, "sessions", "repair", "--json")

    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["damage"] == "index"
    assert report["rebuild"]["ran"] and report["rebuild"]["ok"]
    assert all(v["ok"] for v in report["verification"])
    # The seed's verification, query for query.
    with ro_connect(db) as con:
        marker = con.execute("SELECT key, value FROM state_meta WHERE key = 'fts_stale'")
        assert marker.fetchall() == []
        triggers = con.execute(
            "SELECT type, name FROM sqlite_master WHERE name IN "
            "('messages_fts_insert','messages_fts_update','messages_fts_delete') ORDER BY name"
        ).fetchall()
        assert triggers == [("trigger", name) for name in sorted(SEED_TRIGGERS)]
        counts = dict(
            con.execute(
                "SELECT 'sessions', COUNT(*) FROM sessions "
                "UNION ALL SELECT 'messages', COUNT(*) FROM messages"
            ).fetchall()
        )
        assert counts["sessions"] >= sessions and counts["messages"] >= messages
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert read_state(db).live  # all six triggers, both indexes
    _fts_answers_like_canonical_rows(db)
    # The backup came first and is kept; the rebuild reused it instead of a second copy.
    [backup] = seeded_home.glob(f"state.db.{BACKUP_LABEL}-*.bak")
    assert report["backup"] == str(backup) == report["rebuild"]["backup"]
    assert not list(seeded_home.glob(f"state.db.{REBUILD_BACKUP_LABEL}-*"))
    assert not (seeded_home / "state.db.fts-rebuild.json").exists()  # ledger cleared
    # A snapshot only of a store that passes integrity_check; otherwise it says why.
    snapshots = [s.id for s in list_snapshots(seeded_home)]
    assert snapshots == ([report["snapshot"]] if report["snapshot"] else [])
    assert report["snapshot"] or any("no snapshot" in n for n in report["notes"])


# -- every scenario: what was done, and counts never lower ---------------------------------


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_a_repair_never_lowers_canonical_counts(seeded_home: Path, scenario: str) -> None:
    db = _db(seeded_home)
    SCENARIOS[scenario](seeded_home)
    before = _canonical(db)

    report = repair_store(seeded_home)

    assert report.ok, (report.summary, report.notes)
    after = _canonical(db)
    assert after[0] >= before[0] and after[1] >= before[1]
    # Archived, never deleted; the only rows added are the audit copies of the survivors
    # a repair rewrote (their values as they were).
    assert after == (before[0], before[1] + repair_originals(db))
    assert report.counts_before["messages"] == before[1]
    assert report.counts_after["messages"] == after[1]
    assert report.transcripts is not None and report.transcripts.repairs > 0
    # Archiving takes rows out of the replay, never out of the table.
    assert report.counts_after["active_messages"] < report.counts_before["active_messages"]
    assert (report.rebuild is not None) is (scenario != "transcripts-only")
    assert report.damage == ("none" if scenario == "transcripts-only" else "index")
    assert read_state(db).live
    _fts_answers_like_canonical_rows(db)
    with ro_connect(db) as con:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]

    # Converged: a second repair finds nothing to do and still loses nothing.
    again = repair_store(seeded_home)
    assert again.ok and again.rebuild is None and again.transcripts is not None
    assert again.transcripts.repairs == 0
    assert _canonical(db) == after


def test_verification_reports_lower_counts_as_a_failure(home: Path) -> None:
    """Invariant 3 is checked, not assumed: fewer rows than before fails the repair."""
    engine = create_store_engine(_db(home))
    try:
        items, after = verify(engine, {"sessions": 5, "messages": 9})
    finally:
        engine.dispose()
    counts = next(v for v in items if v.name == "canonical counts")
    assert after["sessions"] == 0 and not counts.ok
    assert "LOWER than before for sessions, messages" in counts.detail
    assert all(v.ok for v in items if v.name != "canonical counts")


def test_a_backup_that_fails_stops_the_repair_before_any_change(seeded_home: Path) -> None:
    give_up_rebuild(seeded_home, RECIPES["averages-record"])
    before = store_digests(seeded_home)

    with FaultInjector(MODULE) as fi:
        rule = fi.fail("write", endswith(".bak"), errno.ENOSPC, count=None)
        report = repair_store(seeded_home)
        assert rule.fired >= 1

    assert not report.ok and "the backup could not be taken" in report.summary
    assert report.rebuild is None and report.transcripts is None  # nothing ran
    assert report.next_steps == [
        f"free space beside {_db(seeded_home)} (or fix the cause above), then run "
        f"`hermes-repo --home {seeded_home} sessions repair`"
    ]
    assert store_digests(seeded_home) == before
    assert not list(seeded_home.glob("*.bak"))  # no half-written file passing for a backup
    assert read_state(_db(seeded_home)).detached


# -- structural damage: never repaired in place --------------------------------------------


def test_damaged_canonical_table_is_not_repaired_in_place(seeded_home: Path) -> None:
    db = _db(seeded_home)
    damage.damage_first_leaf(db, "messages", module=MODULE)
    before = store_digests(seeded_home)

    result = run_cli_from_root("--home", seeded_home, "sessions", "repair")

    assert result.code == 1, result.stdout
    [line] = result.error_lines
    assert line.startswith("error: ") and "not repaired in place" in line
    assert f"hermes-repo sessions salvage --source {db} --inspect-only" in line
    assert f"hermes-repo sessions salvage --source {db} --output" in line
    assert store_digests(seeded_home) == before  # the live file keeps its bytes
    [backup] = seeded_home.glob(f"state.db.{BACKUP_LABEL}-*.bak")  # and the backup is kept
    assert str(backup) in line
    assert backup.stat().st_size == db.stat().st_size  # every page, damaged one included
    assert list_snapshots(seeded_home) == []  # no verified snapshot of a damaged file
    assert not (seeded_home / "state.db.fts-rebuild.json").exists()  # no rebuild tried

    fixed = run_cli_from_root("--home", seeded_home, "doctor", "--fix", "--json")
    assert fixed.code == 1
    out = json.loads(fixed.stdout)
    assert out["repair"]["damage"] == "structural" and out["repair"]["ok"] is False
    assert any("--inspect-only" in step for step in out["repair"]["next_steps"])
    assert "file-damaged" in [f["code"] for f in out["findings"]]
    assert store_digests(seeded_home) == before


def test_not_a_database_is_reported_and_left_as_it_is(seeded_home: Path) -> None:
    db = _db(seeded_home)
    damage.write_notadb_header(db, module=MODULE)
    before = store_digests(seeded_home)

    report = repair_store(seeded_home)

    assert isinstance(report, RepairReport)
    assert report.damage == "structural" and not report.ok
    assert [f.code for f in report.findings] == ["file-not-a-database"]
    assert report.backup is None  # SQLite cannot read it, so neither can its backup API
    assert any("NOTADB" in note for note in report.notes)
    assert any("--inspect-only" in step for step in report.next_steps)
    assert store_digests(seeded_home) == before
    assert not list(seeded_home.glob("*.bak"))
