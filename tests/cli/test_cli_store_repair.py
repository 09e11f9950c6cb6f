"""`sessions repair` and `doctor --fix` on the store itself, through the console script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Cli
from tests.support import damage
from tests.support.fts_checks import (
    MODULE,
    give_up_rebuild,
    read_state,
    repair_originals,
)
from tests.support.holding import held_by_another_process
from tests.support.stores import store_digests


def _averages(db: Path) -> None:
    damage.fts_delete_averages(db, module=MODULE)


@pytest.fixture
def stale_home(seeded_home: Path) -> Path:
    """A store whose index is detached and whose automatic rebuild gave up."""
    give_up_rebuild(seeded_home, _averages)
    return seeded_home


def test_repair_and_doctor_fix_refuse_naming_the_holder(
    stale_home: Path, tmp_path: Path, cli: Cli
) -> None:
    before = store_digests(stale_home)
    with held_by_another_process(stale_home, tmp_path / "signals") as holder:
        repair = cli("--home", stale_home, "sessions", "repair")
        fix = cli("--home", stale_home, "doctor", "--fix", "--json")
        assert store_digests(stale_home) == before

    for result, command in ((repair, "sessions repair"), (fix, "doctor --fix")):
        assert result.code == 1, result.stdout
        assert result.stdout == ""  # refused before doing or printing anything
        [line] = result.error_lines
        assert line.startswith("error: ")
        assert f"pid {holder.pid}" in line
        assert "Stop every process using the store" in line
        assert f"hermes-repo --home {stale_home} {command}" in line
    assert store_digests(stale_home) == before
    assert not list(stale_home.glob("*.bak"))
    assert not (stale_home / "state-snapshots").exists()


def test_check_only_reports_the_index_and_the_transcripts_and_writes_nothing(
    stale_home: Path, cli: Cli
) -> None:
    before = store_digests(stale_home)

    text = cli("--home", stale_home, "sessions", "repair", "--check-only")
    as_json = cli("--home", stale_home, "sessions", "repair", "--check-only", "--json")

    # A repair is needed (the report says so): exit 1, with no error line.
    assert text.code == as_json.code == 1, (text.stderr, as_json.stderr)
    assert text.stderr == as_json.stderr == ""
    assert store_digests(stale_home) == before
    assert "1 of 1 session(s) violate" in text.stdout  # the transcript table is kept
    assert "[fts-stale]" in text.stdout
    assert f"`hermes-repo --home {stale_home} sessions repair`" in text.stdout
    report = json.loads(as_json.stdout)
    assert report["ok"] is False and report["damage"] == "index"
    assert report["sessions_violating"] == 1  # transcript keys as before
    assert [f["code"] for f in report["findings"]] == ["fts-stale"]
    assert report["backup"] is None and report["snapshot"] is None


def test_doctor_fix_repairs_then_reports_a_healthy_store(stale_home: Path, cli: Cli) -> None:
    before = read_state(stale_home / "state.db")

    result = cli("--home", stale_home, "doctor", "--fix")

    assert result.code == 0, (result.stdout, result.stderr)
    assert "repair backup: " in result.stdout
    assert "repaired and verified" in result.stdout
    assert "healthy: nothing to fix" in result.stdout
    after = read_state(stale_home / "state.db")
    originals = repair_originals(stale_home / "state.db")  # the audit copies it added
    assert after.live
    assert (after.sessions, after.messages) == (before.sessions, before.messages + originals)
    assert cli("--home", stale_home, "doctor").code == 0


def test_doctor_reports_a_file_that_is_not_a_database(home: Path, cli: Cli) -> None:
    damage.write_notadb_header(home / "state.db", module=MODULE)

    result = cli("--home", home, "doctor")

    assert result.code == 1
    assert "NOT an SQLite database (NOTADB)" in result.stdout
    assert "[file-not-a-database]" in result.stdout
    assert f"sessions salvage --source {home / 'state.db'} --inspect-only" in result.stdout
    assert result.stdout.count("finding(s):") == 1 and "1 finding(s):" in result.stdout
