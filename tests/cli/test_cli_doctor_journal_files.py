"""doctor and repair name a symlink or folder planted at -wal/-shm/-journal, and its fix.

Before: the doctor reported ``store-unreadable ... SQLITE_CANTOPEN`` and sent the
operator to ``sessions salvage --inspect-only`` (a salvage of an undamaged store);
``sessions repair`` and ``doctor --fix`` did the same.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hermes_repo.ops.doctor import diagnose
from tests.cli.conftest import Cli


def _plant(home: Path, suffix: str, kind: str, tmp_path: Path) -> Path:
    side = home / f"state.db{suffix}"
    if kind == "symlink":
        target = tmp_path / "elsewhere"
        target.write_bytes(b"")
        side.symlink_to(target)
    else:
        side.mkdir()
    return side


@pytest.mark.parametrize("suffix", ["-wal", "-shm", "-journal"])
@pytest.mark.parametrize("kind", ["symlink", "folder"])
def test_doctor_names_a_planted_journal_file_and_says_move_it_away(
    home: Path, tmp_path: Path, suffix: str, kind: str
) -> None:
    side = _plant(home, suffix, kind, tmp_path)
    report = diagnose(home)
    codes = [f.code for f in report.findings]
    assert codes == ["journal-file-unsafe"], [f.to_dict() for f in report.findings]
    [finding] = report.findings
    assert str(side) in finding.summary
    assert finding.fix.startswith("Move it away")
    assert "salvage" not in finding.fix and "recover" not in finding.fix


def test_repair_refuses_with_the_journal_file_named(home: Path, tmp_path: Path, cli: Cli) -> None:
    side = _plant(home, "-wal", "symlink", tmp_path)
    for args in (("sessions", "repair"), ("sessions", "repair", "--check-only")):
        result = cli("--home", home, *args)
        text = result.stdout + result.stderr
        # The check too: what it prints says the store needs work first.
        assert result.code != 0, text
        assert str(side) in text and "Move it away" in text, text
        assert "CANTOPEN" not in text and "--inspect-only" not in text, text
    assert side.is_symlink()  # nothing was changed
    doctor = cli("--home", home, "doctor")
    assert doctor.code != 0 and "journal-file-unsafe" in doctor.stdout + doctor.stderr
