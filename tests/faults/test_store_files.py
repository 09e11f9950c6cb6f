"""The store knows its files by identity: a ``-wal`` or ``state.db`` removed, renamed or
replaced under an open store stops its acknowledged writes, an orphaned ``-wal`` is set
aside before SQLite can discard it, and quarantine follows the file, not its path.

Real files, a real writer process (killed with SIGKILL where the case is about what
survives a crash), both SQLite drivers: the ``-wal`` cases apply where the store runs in
WAL mode (the bundled SQLite), the database-file cases to both journal modes.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateDbCorruptError, StateStore, StoreFileReplacedError, quarantine
from hermes_repo.engine import select_driver
from hermes_repo.ops.doctor import diagnose
from hermes_repo.ops.replace import replace_store
from hermes_repo.walcheck import orphaned_sets
from tests.support import damage
from tests.support.processes import reaped
from tests.support.spooling import convo, pending_files, stored
from tests.support.stores import copy_store, fill_early_and_late

WAL = select_driver().journal_mode == "WAL"
needs_wal = pytest.mark.skipif(not WAL, reason="the -wal exists in WAL mode only")
TIMEOUT_S = 30.0
SID = "files-1"

WRITER = textwrap.dedent(
    """
    import json, os, sys
    from hermes_repo import StateStore
    store = StateStore.open(sys.argv[1], replay=False)
    writer = store.transcript_writer(sys.argv[2])
    print(json.dumps({"pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] == "flush":
            r = writer.flush(cmd["messages"])
            print(json.dumps({"written": list(r.written_uids), "spooled": list(r.spooled_uids),
                              "error": r.error}), flush=True)
        elif cmd["op"] == "append":
            try:
                store.append_message(sys.argv[2], cmd["message"])
                print(json.dumps({"ok": True}), flush=True)
            except Exception as exc:
                print(json.dumps({"ok": False, "type": type(exc).__name__,
                                  "error": str(exc)}), flush=True)
    """
)


class Writer:
    """A process with the store open and a transcript writer, driven line by line."""

    def __init__(self, home: Path, procs: list[subprocess.Popen[str]]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(home), SID],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(self.proc)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self._reply()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def _reply(self) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=TIMEOUT_S)
        except queue.Empty:
            self.proc.kill()
            _, err = self.proc.communicate()
            pytest.fail(f"the writer process did not answer: {err}")
        out = json.loads(line)
        assert isinstance(out, dict)
        return out

    def flush(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "flush", "messages": messages}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def append(self, message: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": "append", "message": message}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=TIMEOUT_S)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    with reaped(started):
        yield started


def _acknowledged(writer: Writer, batches: int, size: int = 5) -> list[str]:
    acked: list[str] = []
    for b in range(batches):
        result = writer.flush(convo(size, start=b * size))
        assert result["error"] is None and len(result["written"]) == size, result
        acked += result["written"]
    return acked


@needs_wal
def test_a_removed_wal_is_noticed_the_flush_spools_and_a_kill_loses_nothing_acknowledged(
    home: Path, procs: list[subprocess.Popen[str]]
) -> None:
    writer = Writer(home, procs)
    acked = _acknowledged(writer, batches=6)
    (home / "state.db-wal").unlink()

    # Another process is told what happened (not "free disk space"), and neither its
    # open nor its doctor makes a new -wal that would keep the writer from its rescue.
    with pytest.raises(StoreFileReplacedError, match=rf"pid {writer.proc.pid}\b"):
        StateStore.open(home)
    [finding] = [f for f in diagnose(home).findings if f.code == "wal-removed"]
    assert "Stop those processes cleanly" in finding.fix
    assert not (home / "state.db-wal").exists()

    refused = writer.flush(convo(5, start=100))
    assert refused["written"] == [] and len(refused["spooled"]) == 5
    assert "state.db-wal was removed while the store was open" in refused["error"]
    assert "hermes-repo --home" in refused["error"] and "doctor" in refused["error"]
    # Every later write fails fast the same way, the raw API too.
    later = writer.flush(convo(3, start=200))
    assert later["written"] == [] and len(later["spooled"]) == 3
    raw = writer.append({"role": "user", "content": "raw"})
    assert raw["ok"] is False and raw["type"] == "StoreFileReplacedError"
    assert pending_files(home) == [f"{SID}.pending.jsonl"]
    writer.kill()

    rows = stored(home, SID)
    assert set(acked) <= {r["uid"] for r in rows}, "an acknowledged write was lost"
    with StateStore.open(home) as store:  # replays the spool, each message once
        assert store.last_replay is not None and not store.last_replay.errors
    final = [r["uid"] for r in stored(home, SID)]
    assert len(final) == len(set(final))
    assert set(final) == set(acked) | set(refused["spooled"]) | set(later["spooled"])
    assert pending_files(home) == []


def test_a_renamed_state_db_refuses_writes_and_its_wal_is_set_aside_not_discarded(
    home: Path, procs: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    writer = Writer(home, procs)
    acked = _acknowledged(writer, batches=6)
    moved = home / "moved-away.db"
    os.rename(home / "state.db", moved)

    refused = writer.flush(convo(5, start=100))
    assert refused["written"] == [] and len(refused["spooled"]) == 5
    assert "moved" in refused["error"], refused["error"]
    later = writer.flush(convo(3, start=200))
    assert later["written"] == [] and len(later["spooled"]) == 3
    writer.kill()
    wal_left = (home / "state.db-wal").exists() and (home / "state.db-wal").stat().st_size > 0
    assert wal_left == WAL  # the committed writes of WAL mode sit in the -wal at the path

    with StateStore.open(home, replay=False) as store:
        assert store.health().counts["messages"] == 0  # a new store at the path
        saved = orphaned_sets(home / "state.db")
        if WAL:
            [wal] = saved
            assert oct(wal.stat().st_mode & 0o777) == "0o600"
            assert any("set aside" in n for n in store.health().notes)
        else:
            assert saved == []

    # The moved database and the saved -wal together hold every acknowledged row.
    pair = tmp_path / "pair"
    pair.mkdir()
    shutil.copyfile(moved, pair / "state.db")
    if WAL:
        shutil.copyfile(saved[0], pair / "state.db-wal")
    rows = {r["uid"] for r in stored(pair, SID)}
    assert set(acked) <= rows, "an acknowledged write is in neither file"


@needs_wal
def test_the_doctor_sets_an_orphaned_wal_aside_while_its_writer_still_runs(home: Path) -> None:
    with StateStore.open(home, replay=False) as store:  # the agent, still running
        flushed = store.transcript_writer(SID).flush(convo(6))
        assert flushed.written == 6
        os.rename(home / "state.db", home / "moved-away.db")
        (home / "state.db").touch()  # an empty file at the name: SQLite would drop the -wal

        report = diagnose(home)
        [finding] = [f for f in report.findings if f.code == "wal-orphaned"]
        assert "sessions salvage --source" in finding.fix and "db replace" in finding.fix
        [saved] = orphaned_sets(home / "state.db")
        assert saved.stat().st_size > 0 and not (home / "state.db-wal").exists()
        with pytest.raises(StoreFileReplacedError, match="replaced by another file"):
            store.append_message(SID, {"role": "user", "content": "refused"})
    # The agent's close neither checkpointed nor deleted the set-aside -wal.
    assert saved.stat().st_size > 0
    pair = home.parent / "pair"
    pair.mkdir()
    shutil.copyfile(home / "moved-away.db", pair / "state.db")
    shutil.copyfile(saved, pair / "state.db-wal")
    assert set(flushed.written_uids) <= {r["uid"] for r in stored(pair, SID)}


def test_a_replaced_state_db_is_noticed_before_a_new_connection_opens_it(
    home: Path, tmp_path: Path
) -> None:
    other = copy_store(home, tmp_path / "other") / "state.db"
    with StateStore.open(home, replay=False) as store:
        store.write(lambda uow: uow.sessions.ensure("s", source="cli"))
        store.engine.dispose()  # the next write needs a new connection
        os.replace(other, home / "state.db")
        with pytest.raises(StoreFileReplacedError, match=r"state\.db was replaced"):
            store.write(lambda uow: uow.sessions.ensure("t", source="cli"))
        with pytest.raises(StoreFileReplacedError):  # fails fast from now on
            store.append_message("s", {"role": "user", "content": "refused"})
        assert any("replaced" in n for n in store.health().notes)
    with StateStore.open(home, replay=False) as fresh:  # the file now at the path
        fresh.write(lambda uow: uow.sessions.ensure("s", source="cli"))


def test_db_replace_after_a_quarantine_opens_the_new_file_in_the_same_process(
    home: Path, tmp_path: Path
) -> None:
    recovered = copy_store(home, tmp_path / "recovered") / "state.db"
    db = fill_early_and_late(home, per_session=200)
    damage.damage_first_leaf(db, "messages", module=select_driver().module)
    with StateStore.open(home, replay=False) as store:
        with pytest.raises(StateDbCorruptError), store.unit_of_work() as uow:
            uow.connection.exec_driver_sql("UPDATE messages SET token_count = 1 WHERE id = 1")
        assert store.quarantined
    with pytest.raises(StateDbCorruptError, match="quarantined"):
        StateStore.open(home, replay=False)

    result = replace_store(home, recovered)
    [old] = [Path(p) for p in result.aside if not p.endswith(("-wal", "-shm", "-journal"))]
    with StateStore.open(home, replay=False) as store:  # the same process, the new file
        store.write(lambda uow: uow.sessions.ensure("after", source="cli"))
        assert not store.quarantined and not store.health().quarantined
    assert quarantine.is_quarantined(old), "the old file, moved aside, stays quarantined"
    quarantine.clear(old)


def test_quarantine_follows_the_file_not_its_path(home: Path, tmp_path: Path) -> None:
    db = home / "state.db"
    with StateStore.open(home, replay=False) as store:
        quarantine.enter(db, "a test's verdict", store.database.guard.key)
    moved = tmp_path / "elsewhere.db"
    os.rename(db, moved)
    assert quarantine.is_quarantined(moved) and not quarantine.is_quarantined(db)
    os.rename(moved, db)
    assert quarantine.is_quarantined(db)
    quarantine.clear(db)
    assert not quarantine.is_quarantined(db)


@needs_wal
def test_a_new_connection_is_refused_while_the_wal_of_the_open_ones_is_gone(home: Path) -> None:
    with StateStore.open(home, replay=False) as store:
        store.write(lambda uow: uow.sessions.ensure("s", source="cli"))
        with store.engine.connect():  # an open connection keeps its -wal: not SQLite's to delete
            (home / "state.db-wal").unlink()
            with pytest.raises(StoreFileReplacedError, match=r"state\.db-wal was removed"):
                store.write(lambda uow: uow.sessions.ensure("t", source="cli"))
            assert not (home / "state.db-wal").exists(), "a new -wal the others cannot see"
        with pytest.raises(StoreFileReplacedError):
            store.append_message("s", {"role": "user", "content": "refused"})
        assert store.load_conversation("s").messages == []  # reads go on


@needs_wal
def test_a_quiet_folder_stands_for_both_files_until_a_name_in_it_changes(home: Path) -> None:
    with StateStore.open(home, replay=False) as store:
        store.write(lambda uow: uow.sessions.ensure("s", source="cli"))
        store.append_message("s", {"role": "user", "content": "one"})
        hour_ago = os.stat(home).st_mtime - 3600
        os.utime(home, (hour_ago, hour_ago))  # the folder has been quiet for an hour
        store.append_message("s", {"role": "user", "content": "two"})
        files = store.database.guard.files
        assert files is not None and files._quiet is not None  # one stat per commit now
        (home / "state.db-wal").unlink()  # changes the folder's mtime
        with pytest.raises(StoreFileReplacedError, match=r"state\.db-wal was removed"):
            store.append_message("s", {"role": "user", "content": "three"})
    assert [m["content"] for m in stored(home, "s")][:2] == ["one", "two"]
