"""The journal mode is a property of the FILE, shared by every process that opens it.

A store switches the file to what its SQLite wants (WAL with the WAL-reset fix, a
rollback journal without it) only while it holds the store alone; otherwise the file
keeps its mode, and ``health()``, ``doctor`` and ``db current`` report the mode the file
has, with the risk and the fix. Each direction runs the two drivers in two processes.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.ops.doctor import diagnose
from hermes_repo.store import journal_notes
from tests.cli.conftest import run_cli
from tests.support.holding import held_by_another_process

pytestmark = pytest.mark.skipif(
    select_driver("stdlib").has_wal_reset_fix,
    reason="the standard sqlite3 here has the WAL-reset fix: both drivers want WAL",
)


def _file_mode(db: Path) -> str:
    # Header bytes 18-19 (file format write/read versions): 2 in WAL mode, 1 otherwise.
    return "wal" if db.read_bytes()[18] == 2 else "delete"


def test_a_process_without_the_fix_joining_a_wal_store_reports_wal_and_the_risk(
    home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    db = home / "state.db"
    StateStore.open(home, driver="pysqlite3").close()  # alone: the file is switched to WAL
    assert _file_mode(db) == "wal"
    monkeypatch.setenv("HERMES_REPO_DRIVER", "pysqlite3")  # the holder's driver
    with held_by_another_process(home, tmp_path / "signals"):
        monkeypatch.setenv("HERMES_REPO_DRIVER", "stdlib")
        with caplog.at_level(logging.WARNING, logger="hermes_repo"):
            store = StateStore.open(home)
        try:
            health = store.health()
            assert health.driver == "stdlib" and not health.sqlite_has_wal_fix
            assert health.journal_mode == "wal" and _file_mode(db) == "wal"
            assert not [n for n in health.notes if "uses journal_mode=DELETE" in n]
            [note] = [n for n in health.notes if "journal_mode" in n]
            assert "uses journal_mode=WAL" in note and "can corrupt" in note
            assert "pip install pysqlite3" in note and "to itself" in note
            assert "journal_mode=WAL" in caplog.text  # said at open, not only on request
        finally:
            store.close()

        doctor = diagnose(home, driver=select_driver("stdlib"))
        [finding] = [f for f in doctor.findings if f.code == "sqlite-wal-reset-bug"]
        assert "pip install pysqlite3" in finding.fix and "journal_mode=DELETE" in finding.fix

        current = run_cli(
            "--home",
            home,
            "db",
            "current",
            "--json",
            cwd=tmp_path,
            env={"HERMES_REPO_DRIVER": "stdlib"},
        )
        assert current.code == 0, current.stderr
        assert json.loads(current.stdout)["journal_mode"] == "wal"

    # Alone again, the process without the fix moves the file to a rollback journal.
    with StateStore.open(home, driver="stdlib") as store:
        assert store.health().journal_mode == "delete"
        assert not [n for n in store.health().notes if "can corrupt" in n]
    assert _file_mode(db) == "delete"


def test_a_fixed_process_joining_a_rollback_journal_store_leaves_it_so(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = home / "state.db"
    StateStore.open(home, driver="stdlib").close()  # alone: a rollback journal
    assert _file_mode(db) == "delete"
    monkeypatch.setenv("HERMES_REPO_DRIVER", "stdlib")  # the holder: without the fix
    with held_by_another_process(home, tmp_path / "signals"):
        # Switching to WAL now would put the holder, whose SQLite has the bug, in WAL.
        with StateStore.open(home, driver="pysqlite3") as store:
            health = store.health()
            assert health.journal_mode == "delete"
            [note] = [n for n in health.notes if "journal_mode" in n]
            assert "journal_mode=DELETE, not WAL" in note
        assert _file_mode(db) == "delete"
        current = run_cli(
            "--home",
            home,
            "db",
            "current",
            "--json",
            cwd=tmp_path,
            env={"HERMES_REPO_DRIVER": "pysqlite3"},
        )
        assert json.loads(current.stdout)["journal_mode"] == "delete"
        assert _file_mode(db) == "delete"  # reporting never switches it

    with StateStore.open(home, driver="pysqlite3") as store:  # alone: WAL
        assert store.health().journal_mode == "wal"
        assert store.health().notes == []
    assert _file_mode(db) == "wal"


# -- two copies of SQLite in one process ---------------------------------------------------

_TWO_COPIES = textwrap.dedent(
    """
    import json, sqlite3, sys
    from hermes_repo import StateStore
    from hermes_repo.ops.doctor import diagnose

    home = sys.argv[1]
    store = StateStore.open(home, driver="pysqlite3")
    before = store.health().notes
    # The hazard under test, made as harmless as it can be: this connection runs no
    # statement that takes a lock, and it is closed only after the store is.
    other = sqlite3.connect(home + "/state.db")
    unrelated = sqlite3.connect(":memory:")
    during = store.health().notes
    codes = [f.code for f in diagnose(home, driver=store.driver).findings]
    store.close()
    other.close()
    unrelated.close()
    print(json.dumps({"before": before, "during": during, "codes": codes}))
    """
)


def test_a_standard_sqlite3_connection_on_the_store_in_the_same_process_is_noted(
    home: Path,
) -> None:
    # In a subprocess: the test process itself never opens the store with two copies.
    proc = subprocess.run(
        [sys.executable, "-c", _TWO_COPIES, str(home)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert not [n for n in out["before"] if "sqlite3" in n]
    [note] = [n for n in out["during"] if "`sqlite3`" in n]
    assert note.startswith("1 connection(s) of the standard `sqlite3` module")
    assert "another copy of SQLite" in note and "select_driver().module" in note
    assert "two-sqlite-copies" in out["codes"]


def test_a_forced_wal_on_a_sqlite_without_the_fix_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stdlib = select_driver("stdlib")
    monkeypatch.setenv("HERMES_REPO_JOURNAL_MODE", "WAL")
    [note] = journal_notes(stdlib, "wal")
    assert "HERMES_REPO_JOURNAL_MODE=WAL" in note and "unset it" in note
    monkeypatch.delenv("HERMES_REPO_JOURNAL_MODE")
    [note] = journal_notes(stdlib, "wal")
    assert "another process" in note and "pip install pysqlite3" in note
