"""`sessions export -o` refuses the files of ANY store, not only its own `--home`'s.

Before: only the `SQLite format 3` header and the store's own folder were checked, so
`-o OTHER/state.db-wal` replaced another store's live log (its committed messages
lost, and the doctor then called that store healthy) and `-o
OTHER/sessions/<sid>.pending.jsonl` replaced a spooled, unrecovered message.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_repo import StateStore
from tests.cli.conftest import Cli
from tests.support.stores import home_with_session


@pytest.fixture
def other(tmp_path: Path, home: Path) -> Iterator[tuple[Path, StateStore, str]]:
    """A second store B, open, with committed messages still in its -wal."""
    dest = tmp_path / "other"
    dest.mkdir(mode=0o700)
    shutil.copyfile(home / "state.db", dest / "state.db")
    store = StateStore.open(dest)
    try:
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="agent")
            uow.commit()
        for i in range(50):
            store.append_message(sid, {"role": "user", "content": f"kept {i}"})
        yield dest, store, sid
    finally:
        store.close()


def _refused(cli: Cli, home: Path, sid: str, target: Path) -> str:
    before = target.read_bytes() if target.exists() else None
    result = cli("--home", home, "sessions", "export", sid, "-o", target)
    lines = result.error_lines
    assert result.code == 1 and len(lines) == 1 and lines[0].startswith("error: "), result
    assert str(target) in lines[0] and "choose another file for -o" in lines[0]
    assert (target.read_bytes() if target.exists() else None) == before
    return lines[0]


def test_export_refuses_another_stores_wal_and_shm(
    home: Path, cli: Cli, other: tuple[Path, StateStore, str]
) -> None:
    sid = home_with_session(home, ["export me"])
    b_home, b_store, b_sid = other
    wal = b_home / "state.db-wal"
    assert wal.stat().st_size > 0  # the 50 messages are in the log, not yet in state.db
    _refused(cli, home, sid, wal)
    _refused(cli, home, sid, b_home / "state.db-shm")
    _refused(cli, home, sid, b_home / "state.db-journal")  # not there yet: still B's name
    assert len(b_store.load_conversation(b_sid).messages) == 50


def test_export_refuses_a_wal_or_shm_by_its_first_bytes(
    home: Path, cli: Cli, other: tuple[Path, StateStore, str], tmp_path: Path
) -> None:
    sid = home_with_session(home, ["export me"])
    b_home, _, _ = other
    loose = tmp_path / "loose"
    loose.mkdir()
    for name, kind in (("state.db-wal", "-wal"), ("state.db-shm", "-shm")):
        copy = loose / f"blob-{kind.strip('-')}.jsonl"  # a harmless name, no database beside
        shutil.copyfile(b_home / name, copy)
        assert kind in _refused(cli, home, sid, copy)


def test_export_refuses_another_stores_spool_files(
    home: Path, cli: Cli, other: tuple[Path, StateStore, str], tmp_path: Path
) -> None:
    sid = home_with_session(home, ["export me"])
    b_home, _, _ = other
    spool = b_home / "sessions"
    spool.mkdir(exist_ok=True)
    pending = spool / "S1.pending.jsonl"
    pending.write_text('{"role": "user", "content": "spooled, not yet recovered"}\n')
    _refused(cli, home, sid, pending)
    _refused(cli, home, sid, spool / "S2.rejected.jsonl")
    _refused(cli, home, sid, spool / "notes.jsonl")
    _refused(cli, home, sid, b_home / "notes.jsonl")  # any file in another store's folder


def test_export_refuses_the_journal_of_any_database(home: Path, cli: Cli, tmp_path: Path) -> None:
    sid = home_with_session(home, ["export me"])
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copyfile(home / "state.db", plain / "app.db")
    for suffix in ("-wal", "-shm", "-journal"):
        _refused(cli, home, sid, plain / f"app.db{suffix}")
    link = tmp_path / "innocent.jsonl"
    link.symlink_to(plain / "app.db-wal")  # a dangling link to a database's log
    _refused(cli, home, sid, link)


def test_export_still_writes_an_ordinary_file(home: Path, cli: Cli, tmp_path: Path) -> None:
    sid = home_with_session(home, ["export me"])
    out = tmp_path / "exports" / "s.jsonl"
    out.parent.mkdir()
    result = cli("--home", home, "sessions", "export", sid, "-o", out)
    assert result.code == 0, result.stderr
    assert "export me" in out.read_text()
