"""A ``-wal`` whose header is damaged while it holds committed frames.

SQLite reads such a log as empty and the next read-write open deletes it: the committed
messages in it are gone without a word. The store saves the log (with the database) as
one set before any open, says so (doctor, health, a CRITICAL log line with the next
command), and ``sessions salvage`` reads the frames without their header.

The committed frames are real: a writer process appends and ends with ``os._exit``
(no close, so no checkpoint), as a crashed agent does.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.ops.doctor import diagnose
from hermes_repo.salvage import salvage
from hermes_repo.salvage.pagescan import PageSource
from hermes_repo.walcheck import saved_sets
from tests.cli.conftest import run_cli
from tests.support import damage
from tests.support.stores import WAL_ONLY_MESSAGES, store_with_wal_only_session

MODULE = select_driver().module
pytestmark = pytest.mark.skipif(
    select_driver().journal_mode != "WAL",
    reason="a -wal exists only in WAL mode; the rollback-journal driver has none to damage",
)
ROOT = Path(__file__).resolve().parents[2]


def _salvaged_wal_messages(source: Path, out: Path) -> int:
    salvage(source, out)
    con = MODULE.connect(f"{out.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return int(
            con.execute("SELECT count(*) FROM messages WHERE session_id = 'walonly'").fetchone()[0]
        )
    finally:
        con.close()


def test_doctor_reports_a_damaged_wal_header_and_saves_the_log(home: Path) -> None:
    db = store_with_wal_only_session(home)
    wal = damage.zero_wal_header(db)
    digest = damage.file_digest(wal)

    report = diagnose(home)

    assert not report.healthy
    [finding] = [f for f in report.findings if f.code == "wal-header-damaged"]
    assert "sessions salvage --source" in finding.fix and "db replace" in finding.fix
    [saved] = saved_sets(db)
    assert damage.file_digest(saved) == digest
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    saved_db = saved.with_name(saved.name[: -len("-wal")])
    assert stat.S_IMODE(saved_db.stat().st_mode) == 0o600
    assert damage.file_digest(wal) == digest  # the doctor still changes nothing
    diagnose(home)
    assert saved_sets(db) == [saved]  # the same bytes are saved once


def test_open_saves_the_log_before_sqlite_discards_it_and_says_so(
    home: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = store_with_wal_only_session(home)
    wal = damage.zero_wal_header(db)
    digest = damage.file_digest(wal)

    with caplog.at_level(logging.CRITICAL, logger="hermes_repo.walcheck"):
        store = StateStore.open(home)
    try:
        [line] = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
        assert "damaged header" in line and "sessions salvage --source" in line
        assert any("damaged header" in note for note in store.health().notes)
        with store.unit_of_work() as uow:
            assert not uow.sessions.exists("walonly")  # SQLite discarded the frames
    finally:
        store.close()
    assert not wal.exists() or damage.file_digest(wal) != digest  # the live log is gone

    [saved] = saved_sets(db)
    assert damage.file_digest(saved) == digest
    saved_db = saved.with_name(saved.name[: -len("-wal")])
    assert _salvaged_wal_messages(saved_db, tmp_path / "out" / "state.db") == WAL_ONLY_MESSAGES

    later = diagnose(home)  # after the open, the saved set is still a finding
    assert "wal-saved" in [f.code for f in later.findings]


def test_the_page_scanner_reads_frames_whose_header_is_damaged(home: Path, tmp_path: Path) -> None:
    db = store_with_wal_only_session(home)
    intact = PageSource(db, Path(f"{db}-wal"))
    try:
        frames = intact.wal.committed_frames
    finally:
        intact.close()
    wal = damage.zero_wal_header(db)
    src = PageSource(db, wal)
    try:
        assert src.wal.header_damaged == "bad WAL magic number"
        assert src.wal.ignored is None and src.wal.committed_frames == frames > 0
    finally:
        src.close()
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copyfile(db, copy / "state.db")
    shutil.copyfile(wal, copy / "state.db-wal")
    assert (
        _salvaged_wal_messages(copy / "state.db", tmp_path / "out" / "state.db")
        == WAL_ONLY_MESSAGES
    )


def test_db_commands_save_the_log_before_their_own_open(home: Path) -> None:
    db = store_with_wal_only_session(home)
    wal = damage.zero_wal_header(db)
    digest = damage.file_digest(wal)

    result = run_cli("--home", home, "db", "current", cwd=Path(os.sep))

    assert result.code == 0, result.stderr
    assert "damaged header" in result.stderr and "sessions salvage --source" in result.stderr
    [saved] = saved_sets(db)
    assert damage.file_digest(saved) == digest


def test_a_log_that_cannot_be_saved_stops_the_open_instead_of_being_discarded(
    home: Path,
) -> None:
    """The copy fails for real: the opening process may write no file past 8 KiB."""
    db = store_with_wal_only_session(home)
    wal = damage.zero_wal_header(db)
    assert wal.stat().st_size > 8192
    digest = damage.file_digest(wal)
    script = textwrap.dedent(
        f"""
        import resource, signal
        from hermes_repo import StateStore
        from hermes_repo.walcheck import WalSaveError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
        try:
            StateStore.open({str(home)!r})
        except WalSaveError as exc:
            print("refused:", exc)
        else:
            print("opened")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert out.startswith("refused:") and "could not be saved" in out, out
    assert damage.file_digest(wal) == digest  # SQLite never saw it
