"""``diagnose(home)``: the file-health checks (header, quick_check, quarantine, spool
files, snapshots, holders), on real files, writing nothing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeVar

import pytest

from hermes_repo import StateStore, WriteFailedError
from hermes_repo.maintenance.snapshots import create_snapshot
from hermes_repo.ops.doctor import (
    DoctorReport,
    HeaderFacts,
    HolderFacts,
    QuarantineFacts,
    QuickCheckFacts,
    SnapshotFacts,
    SpoolFacts,
    diagnose,
)
from hermes_repo.transcript import spool
from tests.support import damage
from tests.support.fts_checks import MODULE, SEED_SESSION
from tests.support.holding import held_by_another_process

T = TypeVar("T")


def _section(report: DoctorReport, key: str, kind: type[T]) -> T:
    section = report.sections[key]
    assert isinstance(section, kind)
    return section


def test_healthy_store_reports_every_section_and_no_finding(seeded_home: Path) -> None:
    report = diagnose(seeded_home)

    assert report.healthy, report.findings
    header = _section(report, "header", HeaderFacts)
    assert header.ok and header.magic == "SQLite format 3"
    checks = _section(report, "quick_check", QuickCheckFacts)
    assert checks.tables == dict.fromkeys(("sessions", "messages", "state_meta"), "ok")
    assert not _section(report, "quarantine", QuarantineFacts).quarantined
    assert _section(report, "spool", SpoolFacts).pending_files == 0
    assert _section(report, "snapshots", SnapshotFacts).count == 0
    assert _section(report, "holders", HolderFacts).pids == []


def test_not_a_database_header_is_one_finding_with_the_salvage_commands(
    seeded_home: Path,
) -> None:
    db = seeded_home / "state.db"
    damage.write_notadb_header(db, module=MODULE)
    before = damage.file_digest(db)

    report = diagnose(seeded_home)

    # One finding, not one per check that cannot read the file.
    assert [f.code for f in report.findings] == ["file-not-a-database"]
    header = _section(report, "header", HeaderFacts)
    assert not header.ok and header.magic.startswith("NOT A DATABASE")
    fix = report.findings[0].fix
    assert f"hermes-repo sessions salvage --source {db} --inspect-only" in fix
    # One salvage folder per incident, named by the damaged file's time.
    assert re.search(
        rf"--output {re.escape(str(seeded_home))}/recovered-\d{{8}}T\d{{6}}\.\d{{6}}Z/state\.db",
        fix,
    )
    assert damage.file_digest(db) == before


def test_damaged_messages_page_fails_quick_check_and_names_the_newest_snapshot(
    seeded_home: Path,
) -> None:
    snap = create_snapshot(seeded_home, label="nightly")
    db = seeded_home / "state.db"
    damage.damage_first_leaf(db, "messages", module=MODULE)

    report = diagnose(seeded_home)

    assert [f.code for f in report.findings] == ["file-damaged"]  # no FTS noise on top
    checks = _section(report, "quick_check", QuickCheckFacts)
    assert set(checks.damaged) == {"messages"}
    fix = report.findings[0].fix
    assert "--inspect-only" in fix
    assert f"hermes-repo --home {seeded_home} snapshot restore {snap.id}" in fix
    assert _section(report, "snapshots", SnapshotFacts).newest_id == snap.id


def test_quarantined_store_is_a_finding_of_this_process(seeded_home: Path) -> None:
    db = seeded_home / "state.db"
    # The rightmost leaf of `messages`: the next append reads it and meets the damage.
    last = damage.btree_pages(db, "messages", "leaf", module=MODULE)[-1]
    damage.overwrite_page(db, last, module=MODULE)
    with StateStore.open(seeded_home) as store:
        with pytest.raises(WriteFailedError):
            store.append_message(SEED_SESSION, {"role": "user", "content": "meets the damage"})
        assert store.quarantined
        report = diagnose(seeded_home)

    codes = [f.code for f in report.findings]
    assert "quarantined" in codes and "file-damaged" in codes
    facts = _section(report, "quarantine", QuarantineFacts)
    assert facts.quarantined and facts.error
    finding = next(f for f in report.findings if f.code == "quarantined")
    assert "--inspect-only" in finding.fix and "restart this process" in finding.fix


def test_pending_rejected_and_salvage_spool_files_are_counted_with_their_commands(
    seeded_home: Path,
) -> None:
    msgs = [{"role": "user", "content": f"spooled {i}"} for i in range(3)]
    spool.append_messages(seeded_home, "s-pending", msgs)
    spool.append_messages(seeded_home, "s-salvage", msgs[:2], suffix=spool.HOLD_SUFFIX)
    rejected = spool.pending_name("s-rejected", spool.REJECTED_SUFFIX)
    spool.append_lines(seeded_home, rejected, [b'{"torn": '])

    report = diagnose(seeded_home)

    facts = _section(report, "spool", SpoolFacts)
    assert (facts.pending_files, facts.pending_records) == (1, 3)
    assert (facts.salvage_files, facts.salvage_records) == (1, 2)
    assert (facts.rejected_files, facts.rejected_lines) == (1, 1)
    by_code = {f.code: f for f in report.findings}
    assert set(by_code) == {"pending-transcripts", "salvage-transcripts", "rejected-spool-lines"}
    assert by_code["salvage-transcripts"].severity == "error"  # in no database at all
    recover = f"hermes-repo --home {seeded_home} pending replay"
    assert recover in by_code["pending-transcripts"].fix
    assert recover in by_code["salvage-transcripts"].fix
    assert "s-salvage.jsonl" in by_code["salvage-transcripts"].summary


def test_a_holder_is_a_fact_and_a_finding_only_when_it_blocks_a_fix(
    seeded_home: Path, tmp_path: Path
) -> None:
    with held_by_another_process(seeded_home, tmp_path / "signals") as holder:
        healthy = diagnose(seeded_home)
        salvage = [{"role": "user", "content": "written while the file was damaged"}]
        spool.append_messages(seeded_home, "s-salvage", salvage, suffix=spool.HOLD_SUFFIX)
        blocked = diagnose(seeded_home)

    assert healthy.healthy  # a running gateway is normal
    assert _section(healthy, "holders", HolderFacts).pids == [holder.pid]
    assert [f.code for f in blocked.findings] == ["salvage-transcripts", "store-held"]
    assert str(holder.pid) in blocked.findings[1].summary
