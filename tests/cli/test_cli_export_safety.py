"""`sessions export -o` never writes over a database or the store's own files, and a
failed export leaves the target as it was and names it.

Before: `-o ~/.hermes/state.db` replaced the live database with JSON Lines and exited
0; a full disk said "No space left on device:;" without the file's name.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest

from tests.cli.conftest import Cli
from tests.support.disks import small_tmpfs
from tests.support.stores import home_with_session

HEADER = b"SQLite format 3\x00"


def _session(home: Path, *, messages: int = 3, size: int = 10) -> str:
    return home_with_session(home, [f"{i}:" + "x" * size for i in range(messages)])


def _only_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert "Traceback" not in stderr
    return lines[0]


def _store_still_works(cli: Cli, home: Path, sid: str) -> None:
    assert (home / "state.db").read_bytes()[:16] == HEADER
    listed = cli("--home", home, "sessions", "list", "--json")
    assert listed.code == 0 and sid in listed.stdout, listed.stderr


@pytest.mark.parametrize(
    "target", ["state.db", "state.db-wal", "state.db-shm", "sessions/x.jsonl", "state-snapshots/a"]
)
def test_export_refuses_the_stores_own_files(home: Path, cli: Cli, target: str) -> None:
    sid = _session(home)
    (home / "sessions").mkdir(exist_ok=True)
    (home / "state-snapshots").mkdir(exist_ok=True)
    path = home / target
    before = path.read_bytes() if path.exists() else None
    result = cli("--home", home, "sessions", "export", sid, "-o", path)
    assert result.code == 1
    line = _only_error_line(result.stderr)
    assert str(path) in line and "choose another file" in line
    assert (path.read_bytes() if path.exists() else None) == before
    _store_still_works(cli, home, sid)


def test_export_refuses_any_sqlite_database(home: Path, cli: Cli, tmp_path: Path) -> None:
    sid = _session(home)
    other = tmp_path / "other.db"
    shutil.copyfile(home / "state.db", other)
    before = other.read_bytes()
    link = tmp_path / "innocent.jsonl"
    link.symlink_to(home / "state.db")
    for target in (other, link):
        result = cli("--home", home, "sessions", "export", sid, "-o", target)
        assert result.code == 1
        assert str(target) in _only_error_line(result.stderr)
    assert other.read_bytes() == before
    assert link.is_symlink()
    _store_still_works(cli, home, sid)


def test_export_replaces_an_ordinary_file_whole_and_private(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    sid = _session(home, messages=3)
    out = tmp_path / "out" / "t.jsonl"
    out.parent.mkdir()
    out.write_text("old export\n")
    os.chmod(out, 0o644)
    result = cli("--home", home, "sessions", "export", sid, "-o", out)
    assert result.code == 0, result.stderr
    lines = out.read_text().splitlines()
    assert len(lines) == 3 and all(line.startswith('{"role":"user"') for line in lines)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert sorted(p.name for p in out.parent.iterdir()) == ["t.jsonl"]


def test_export_onto_a_full_disk_names_the_file_and_leaves_it(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    sid = _session(home, messages=12, size=20_000)  # ~240 KB of JSON Lines
    with small_tmpfs(tmp_path / "small", kib=64) as disk:
        out = disk / "t.jsonl"
        out.write_text("previous export\n")
        result = cli("--home", home, "sessions", "export", sid, "-o", out)
        assert result.code == 1
        line = _only_error_line(result.stderr)
        assert str(out) in line and "No space left on device" in line
        assert "free space" in line
        # The previous export is intact and no half-written temporary file is left.
        assert out.read_text() == "previous export\n"
        assert sorted(p.name for p in disk.iterdir()) == ["t.jsonl"]
    _store_still_works(cli, home, sid)


def test_export_refuses_a_fifo_or_device_without_blocking(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    # Reading the header of a FIFO would block, and the final rename would replace it.
    sid = _session(home)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = cli("--home", home, "sessions", "export", sid, "-o", fifo)
    assert result.code == 1
    line = _only_error_line(result.stderr)
    assert str(fifo) in line and "not a regular file" in line
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
