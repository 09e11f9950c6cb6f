"""``sessions salvage``: salvage of real stores with real damage.

A store built by the migrations is filled once (3 sessions x 1000 messages: short and
long text, rows larger than a page so their payload runs into overflow chains, CJK,
multimodal parts, tool calls, archived and display-only rows, a parent chain), closed,
checkpointed, and copied per test. Each test damages its copy the way a disk or a bad
checkpoint does (a leaf page, an interior page, an index root, the header, pages with a
newer copy in the WAL) and checks that:

* ``inspect`` changes no byte of the source and creates nothing beside it;
* ``recover`` yields a store that opens at head, passes ``integrity_check``, holds every
  row that was on an undamaged page with every column byte-identical, and searches.

The rows allowed to be missing are computed from the damaged page itself (its cell
rowids read before the damage) and cross-checked with SQLite: a point lookup of each of
those ids fails after the damage, and of no other id.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.salvage import RECOVERED_SOURCE, SalvageError, inspect, salvage
from hermes_repo.schema import migrate
from tests.support import damage
from tests.support.spooling import fts_integrity_errors

MODULE = select_driver().module
SESSIONS = ("alpha", "beta", "gamma")
PER_SESSION = 1000
SEARCH_TERM = "zanzibarite"  # planted in a few messages, nowhere else
CJK_TERM = "数据库恢复"
SIDECARS = ("-wal", "-shm", "-journal")


# -- the filled store --------------------------------------------------------------------


_LONG_WORDS = ("overflow", "chain", "page", "payload", "spill", "record", "cell", "leaf")


def _messages(session_index: int) -> list[dict[str, Any]]:
    rng = random.Random(1000 + session_index)
    out: list[dict[str, Any]] = []
    for i in range(PER_SESSION):
        kind = i % 10
        words = " ".join(rng.choice(("alpha", "beta", "delta", "kappa", "omega")) for _ in range(8))
        if kind == 0:
            # Larger than a 4096-byte page: the payload spills into an overflow chain.
            content: Any = f"long {i} " + " ".join(
                rng.choice(_LONG_WORDS) for _ in range(rng.randint(700, 1800))
            )
        elif kind == 3:
            content = f"{CJK_TERM} 第{i}条消息，数据完整性检查。{words}"
        elif kind == 5:
            content = [
                {"type": "text", "text": f"part {i} {words}"},
                {"type": "image_url", "image_url": {"url": f"https://example.org/{i}.png"}},
            ]
        else:
            content = f"message {i} of session {session_index}: {words}"
        if i % 97 == 1 and isinstance(content, str):
            content = f"{content} {SEARCH_TERM}"
        msg: dict[str, Any] = {
            "role": "user" if i % 2 == 0 else "assistant",
            "content": content,
            "timestamp": 1_700_000_000.0 + session_index * 10_000 + i * 1.25,
        }
        if kind == 7 and msg["role"] == "assistant":
            msg["tool_calls"] = [
                {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
            ]
            msg["reasoning"] = "thinking " * rng.randint(1, 40)
        if i % 53 == 0:
            msg["display_only"] = True
        out.append(msg)
    return out


@dataclass(frozen=True)
class Filled:
    """The filled, checkpointed template and its rows as SQLite reads them."""

    db: Path
    sessions: dict[str, tuple[Any, ...]]
    messages: dict[int, tuple[Any, ...]]
    session_columns: tuple[str, ...]
    message_columns: tuple[str, ...]


def _read_rows(
    db: Path,
) -> tuple[
    dict[str, tuple[Any, ...]], dict[int, tuple[Any, ...]], tuple[str, ...], tuple[str, ...]
]:
    con = MODULE.connect(f"{db.as_uri()}?mode=ro", uri=True)
    try:
        s_cur = con.execute("SELECT * FROM sessions ORDER BY id")
        s_cols = tuple(d[0] for d in s_cur.description)
        sessions = {r[0]: tuple(r) for r in s_cur}
        m_cur = con.execute("SELECT * FROM messages ORDER BY id")
        m_cols = tuple(d[0] for d in m_cur.description)
        messages = {r[0]: tuple(r) for r in m_cur}
    finally:
        con.close()
    return sessions, messages, s_cols, m_cols


@pytest.fixture(scope="session")
def filled(template_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Filled:
    home = tmp_path_factory.mktemp("recover-template")
    shutil.copyfile(template_home / "state.db", home / "state.db")
    with StateStore.open(home) as store:
        with store.unit_of_work() as uow:
            for i, sid in enumerate(SESSIONS):
                uow.sessions.create(
                    "cli",
                    id=sid,
                    title=f"session {sid} — 会话",
                    parent_session_id=SESSIONS[0] if i == 2 else None,
                    started_at=1_700_000_000.0 + i,
                )
                uow.messages.append_many(sid, _messages(i))
            uow.meta.set("recover-test", "kept")
            uow.commit()
        with store.engine.begin() as conn:
            # A few archived audit rows: recovery must keep them, inactive.
            conn.exec_driver_sql(
                "UPDATE messages SET active = 0, archived_at = 1.5, archive_reason = 'test' "
                "WHERE id % 211 = 0"
            )
            # As a repair does: the counters mirror the active messages.
            conn.exec_driver_sql(
                "UPDATE sessions SET message_count = (SELECT count(*) FROM messages AS m "
                "WHERE m.session_id = sessions.id AND m.active = 1), "
                "tool_call_count = (SELECT coalesce(sum(json_array_length(m.tool_calls)), 0) "
                "FROM messages AS m WHERE m.session_id = sessions.id AND m.active = 1)"
            )
    db = home / "state.db"
    damage.checkpoint_and_close(db, module=MODULE)
    sessions, messages, s_cols, m_cols = _read_rows(db)
    assert len(messages) == len(SESSIONS) * PER_SESSION
    return Filled(db, sessions, messages, s_cols, m_cols)


@pytest.fixture
def source(filled: Filled, tmp_path: Path) -> Path:
    """A private copy of the filled store, ready to be damaged (nothing has it open)."""
    folder = tmp_path / "damaged"
    folder.mkdir()
    db = folder / "state.db"
    shutil.copyfile(filled.db, db)
    return db


# -- helpers -----------------------------------------------------------------------------


def rowids_on_leaf(db: Path, pgno: int) -> set[int]:
    """Rowids of the cells of table-leaf page ``pgno``, read off the page itself."""
    size = damage.page_size(db)
    with open(db, "rb") as f:
        f.seek((pgno - 1) * size)
        page = f.read(size)
    assert page[0] == 13, "not a table leaf"
    n = int.from_bytes(page[3:5], "big")
    out = set()
    for i in range(n):
        off = int.from_bytes(page[8 + 2 * i : 10 + 2 * i], "big")
        _payload, pos = damage.varint(page, off)
        rowid, _ = damage.varint(page, pos)
        out.add(rowid)
    return out


def unreadable_ids(db: Path, ids: Iterator[int] | list[int]) -> set[int]:
    """Ids whose point lookup SQLite refuses (read on a copy: the source stays untouched)."""
    scratch = db.parent.parent / "oracle"
    scratch.mkdir(exist_ok=True)
    copy = scratch / "state.db"
    shutil.copyfile(db, copy)
    con = MODULE.connect(f"{copy.as_uri()}?mode=ro", uri=True)
    bad = set()
    try:
        for i in ids:
            try:
                con.execute("SELECT content, uid FROM messages WHERE id = ?", (i,)).fetchall()
            except MODULE.DatabaseError:
                bad.add(i)
    finally:
        con.close()
        shutil.rmtree(scratch)
    return bad


def snapshot(folder: Path) -> dict[str, str | None]:
    """sha256 of every file in ``folder`` (names included: a new file shows up)."""
    return {p.name: damage.file_digest(p) for p in sorted(folder.iterdir())}


def check_recovered(
    filled: Filled,
    output: Path,
    *,
    lost: frozenset[int] | set[int] = frozenset(),
    changed: dict[int, tuple[Any, ...]] | None = None,
    sessions_lost: bool = False,
) -> None:
    """The output opens at head, is intact, and holds exactly the expected rows."""
    # Read-write: FTS5's 'integrity-check' is spelled as an INSERT (it writes nothing).
    con = MODULE.connect(f"{output.as_uri()}?mode=rw", uri=True, isolation_level=None)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert con.execute("PRAGMA foreign_key_check").fetchall() == []
        assert fts_integrity_errors(con) == {}
    finally:
        con.close()
    sessions, messages, s_cols, m_cols = _read_rows(output)
    assert m_cols == filled.message_columns and s_cols == filled.session_columns
    expected = dict(filled.messages)
    expected.update(changed or {})
    for i in lost:
        expected.pop(i)
    assert messages.keys() == expected.keys()
    # Every column of every row, byte for byte (uids, content, floats, JSON text).
    assert messages == expected
    counters = {s_cols.index("message_count"), s_cols.index("tool_call_count")}
    for sid, row in filled.sessions.items():
        got = sessions[sid]
        if sessions_lost:
            assert got[s_cols.index("source")] == RECOVERED_SOURCE
            continue
        keep = [v for i, v in enumerate(row) if i not in counters or not lost]
        assert [v for i, v in enumerate(got) if i not in counters or not lost] == keep
        active = [m for m in messages.values() if m[1] == sid and m[m_cols.index("active")] == 1]
        assert got[s_cols.index("message_count")] == len(active)
    home = output.parent
    with StateStore.open(home) as store:
        health = store.health()
        assert health.revision == migrate.head_revision()
        assert not health.fts_stale
        hits = store.search(SEARCH_TERM, limit=100)
        content, active = m_cols.index("content"), m_cols.index("active")
        assert hits
        assert {h.message_id for h in hits} == {
            i for i, m in expected.items() if SEARCH_TERM in (m[content] or "") and m[active]
        }
        assert store.search(CJK_TERM, limit=5)


# -- inspect changes nothing ---------------------------------------------------------------


def test_inspect_reads_a_copy_and_changes_nothing(filled: Filled, source: Path) -> None:
    leaf = damage.btree_pages(source, "messages", "leaf", module=MODULE)[3]
    lost = rowids_on_leaf(source, leaf)
    damage.overwrite_page(source, leaf, module=MODULE)
    _commit_in_wal(source, [(1, "newer copy in the WAL")])
    before = snapshot(source.parent)
    assert set(before) == {"state.db", "state.db-wal"}

    report = inspect(source)

    assert snapshot(source.parent) == before  # same bytes, and no -shm / -journal beside it
    messages = report.tables["messages"]
    assert report.header == "valid" and report.sql_error is None
    assert report.wal.present and report.wal.committed_frames > 0
    assert messages.claimed == len(filled.messages)  # count(*) answers from an index
    assert messages.known_missing == len(lost)
    assert set(messages.missing_sample) <= lost
    assert messages.recoverable == len(filled.messages) - len(lost)
    assert messages.sql_errors and messages.sql_gaps
    assert not report.complete
    assert report.scanner_used and report.scan is not None
    assert any(pgno == leaf for _name, pgno, _why in report.scan.broken_pages)


# -- recover -------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_recover_damaged_messages_leaf_loses_only_that_leaf(
    filled: Filled, source: Path, tmp_path: Path, which: str
) -> None:
    leaves = damage.btree_pages(source, "messages", "leaf", module=MODULE)
    leaf = {"first": leaves[0], "middle": leaves[len(leaves) // 2], "last": leaves[-1]}[which]
    on_leaf = rowids_on_leaf(source, leaf)
    assert on_leaf
    damage.overwrite_page(source, leaf, module=MODULE)
    # SQLite agrees: exactly the ids of that leaf became unreadable.
    assert unreadable_ids(source, list(filled.messages)) == on_leaf
    before = snapshot(source.parent)

    output = tmp_path / "recovered" / "state.db"
    result = salvage(source, output)

    assert snapshot(source.parent) == before
    assert result.integrity == "ok"
    assert result.after["messages"] == len(filled.messages) - len(on_leaf)
    assert result.after["sessions"] == len(SESSIONS)
    # "recover-test", and the store's identity (store_id, store_created_at): the
    # recovered store is the same store, so its spool still replays into it.
    assert result.after["state_meta"] == 3
    messages = result.before.tables["messages"]
    assert messages.claimed == len(filled.messages)
    assert messages.known_missing == len(on_leaf)
    assert result.rejected == 0 and not result.placeholders
    check_recovered(filled, output, lost=on_leaf)


def test_recover_damaged_messages_root_keeps_every_row(
    filled: Filled, source: Path, tmp_path: Path
) -> None:
    root = damage.root_page(source, "messages", module=MODULE)
    assert root in damage.btree_pages(source, "messages", "internal", module=MODULE)
    damage.damage_root(source, "messages", module=MODULE)
    # No SQL read of a message works any more: every path goes through the root.
    assert unreadable_ids(source, [1, 1500, 3000]) == {1, 1500, 3000}

    output = tmp_path / "recovered" / "state.db"
    result = salvage(source, output)

    messages = result.before.tables["messages"]
    assert messages.sql_rows == 0
    assert messages.scan_only == len(filled.messages)  # all from orphan leaves, by shape
    assert result.before.scanner_used
    assert result.before.scan is not None and result.before.scan.orphan_leaves > 0
    assert not result.before.unassigned
    check_recovered(filled, output)


def test_recover_damaged_index_root_keeps_every_row(
    filled: Filled, source: Path, tmp_path: Path
) -> None:
    damage.damage_root(source, "ix_messages_session_id_id", module=MODULE)

    output = tmp_path / "recovered" / "state.db"
    result = salvage(source, output)

    assert result.before.tables["messages"].sql_rows == len(filled.messages)
    check_recovered(filled, output)


def test_recover_notadb_header_through_the_page_scanner(
    filled: Filled, source: Path, tmp_path: Path
) -> None:
    damage.write_notadb_header(source, module=MODULE)
    with open(source, "rb") as f:
        assert f.read(16) == damage.NOTADB_HEADER

    report = inspect(source)
    assert report.header == "notadb"
    assert report.sql_error is not None and "not a database" in report.sql_error
    assert report.tables["messages"].recoverable == len(filled.messages)
    assert report.tables["sessions"].recoverable == len(SESSIONS)

    output = tmp_path / "recovered" / "state.db"
    result = salvage(source, output)

    assert result.before.tables["messages"].sql_rows == 0
    assert result.before.messages_sequence == max(filled.messages)
    check_recovered(filled, output)


def test_recover_damaged_sessions_page_makes_placeholders(
    filled: Filled, source: Path, tmp_path: Path
) -> None:
    # Three sessions fit on one page: the root is the only leaf.
    assert damage.btree_pages(source, "sessions", "leaf", module=MODULE) == [
        damage.root_page(source, "sessions", module=MODULE)
    ]
    damage.damage_root(source, "sessions", module=MODULE)

    output = tmp_path / "recovered" / "state.db"
    result = salvage(source, output)

    assert result.placeholders == sorted(SESSIONS)
    assert result.after["messages"] == len(filled.messages)
    check_recovered(filled, output, sessions_lost=True)


def _commit_in_wal(db: Path, updates: list[tuple[int, str]]) -> None:
    """Commit ``updates`` (id, new content) in a process that dies without a checkpoint,
    so the newest copies of the pages stay in the ``-wal``."""
    code = textwrap.dedent(
        f"""
        import os, sys
        import {MODULE.__name__} as m
        con = m.connect(sys.argv[1], isolation_level=None)
        con.execute("PRAGMA journal_mode = WAL")
        con.execute("PRAGMA wal_autocheckpoint = 0")
        con.execute("BEGIN IMMEDIATE")
        for i, text in {updates!r}:
            con.execute("UPDATE messages SET content = ? WHERE id = ?", (text, i))
        con.execute("COMMIT")
        os._exit(0)  # no close: no checkpoint, the WAL keeps the newest pages
        """
    )
    subprocess.run([sys.executable, "-c", code, str(db)], check=True)
    shm = db.with_name(db.name + "-shm")
    if shm.exists():
        shm.unlink()  # as after a reboot; SQLite rebuilds it from the WAL


def _wal_pages(db: Path) -> set[int]:
    wal = db.with_name(db.name + "-wal").read_bytes()
    size = int.from_bytes(wal[8:12], "big")
    return {int.from_bytes(wal[at : at + 4], "big") for at in range(32, len(wal) - size, 24 + size)}


def test_recover_prefers_the_newest_page_copy_in_the_wal(
    filled: Filled, source: Path, tmp_path: Path
) -> None:
    leaf = damage.btree_pages(source, "messages", "leaf", module=MODULE)[0]
    root = damage.root_page(source, "messages", module=MODULE)
    ids = sorted(rowids_on_leaf(source, leaf))[:3]
    updates = [(i, f"rewritten after the checkpoint {i} 新しい内容 {SEARCH_TERM}") for i in ids]
    _commit_in_wal(source, updates)
    in_wal = _wal_pages(source)
    assert leaf in in_wal and root not in in_wal
    # Damage the main file's copies, with no checkpoint: the root (SQL can no longer scan
    # messages) and the old copy of the leaf (only its WAL copy is intact).
    size = damage.page_size(source)
    rng = random.Random(7)
    with open(source, "r+b") as f:
        for pgno in (root, leaf):
            f.seek((pgno - 1) * size)
            f.write(rng.randbytes(size))
    before = snapshot(source.parent)

    output = tmp_path / "recovered" / "state.db"
    result = salvage(source, output)

    assert snapshot(source.parent) == before
    assert result.before.wal.pages >= 1
    assert result.before.scan is not None and result.before.scan.pages_from_wal >= 1
    col = filled.message_columns.index("content")
    changed = {}
    for i, text in updates:
        row = list(filled.messages[i])
        row[col] = text
        changed[i] = tuple(row)
    check_recovered(filled, output, changed=changed)


def test_a_hot_journal_is_rolled_back_in_the_copy_never_in_the_source(
    filled: Filled, source: Path, tmp_path: Path
) -> None:
    # A writer in rollback-journal mode dies mid-transaction after its small cache
    # spilled changed pages into the main file: the -journal beside it is hot.
    code = textwrap.dedent(
        f"""
        import os, sys
        import {MODULE.__name__} as m
        con = m.connect(sys.argv[1], isolation_level=None)
        con.execute("PRAGMA journal_mode = DELETE")
        con.execute("PRAGMA cache_size = 5")
        con.execute("BEGIN IMMEDIATE")
        con.execute("UPDATE messages SET content = 'never committed' WHERE id < 2000")
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", code, str(source)], check=True)
    journal = source.with_name("state.db-journal")
    assert journal.exists() and journal.stat().st_size > 0
    assert b"never committed" in source.read_bytes()
    before = snapshot(source.parent)

    output = tmp_path / "recovered" / "state.db"
    result = salvage(source, output)

    assert snapshot(source.parent) == before  # the hot journal is still there, unapplied
    assert result.before.hot_journal
    check_recovered(filled, output)


def test_rows_that_fit_no_table_are_counted_not_dropped(filled: Filled, source: Path) -> None:
    # The FTS data b-tree loses its root: its leaves become orphans whose rows have the
    # shape of no canonical table. The report must say so.
    name = "messages_fts_data"
    assert damage.root_page(source, name, module=MODULE) in damage.btree_pages(
        source, name, "internal", module=MODULE
    )
    damage.damage_root(source, name, module=MODULE)

    report = inspect(source)

    assert sum(n for like, n in report.unassigned.items() if name in like) > 0
    assert report.tables["messages"].recoverable == len(filled.messages)
    assert report.complete


def test_inspect_notes_a_live_holder_of_the_source(source: Path) -> None:
    with StateStore.open(source.parent):
        report = inspect(source)
    assert any("another process has the source store open" in n for n in report.notes)


def test_recover_refuses_an_existing_output(source: Path, tmp_path: Path) -> None:
    output = tmp_path / "out.db"
    output.write_bytes(b"precious")
    with pytest.raises(SalvageError, match="already exists"):
        salvage(source, output)
    assert output.read_bytes() == b"precious"
    with pytest.raises(SalvageError, match="is the source"):
        salvage(source, source)


def test_recover_of_an_undamaged_store_skips_the_scanner(
    filled: Filled, source: Path, tmp_path: Path
) -> None:
    output = tmp_path / "recovered" / "state.db"
    events: list[str] = []
    result = salvage(source, output, progress=lambda e: events.append(e.phase))
    assert not result.before.scanner_used
    assert result.before.complete
    assert result.counters_fixed == 0
    assert {"copy", "read", "index"} <= set(events)
    check_recovered(filled, output)


# -- the command line ----------------------------------------------------------------------


SCRIPT = Path(sys.executable).parent / "hermes-repo"


def _cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=300,
        check=False,
    )


def test_cli_inspect_only_changes_nothing(filled: Filled, source: Path) -> None:
    damage.damage_first_leaf(source, "messages", module=MODULE)
    before = snapshot(source.parent)

    proc = _cli("sessions", "salvage", "--source", source, "--inspect-only", "--json")

    assert proc.returncode == 0, proc.stderr
    assert snapshot(source.parent) == before
    report = json.loads(proc.stdout)
    assert report["tables"]["messages"]["claimed"] == len(filled.messages)
    assert report["tables"]["messages"]["known_missing"] > 0
    assert report["complete"] is False

    human = _cli("sessions", "salvage", "--source", source, "--inspect-only")
    assert human.returncode == 0, human.stderr
    assert "messages" in human.stdout and "nothing was written" in human.stdout


def test_cli_output_prints_counts_before_and_after(
    filled: Filled, source: Path, tmp_path: Path
) -> None:
    damage.write_notadb_header(source, module=MODULE)
    output = tmp_path / "new" / "state.db"

    proc = _cli("sessions", "salvage", "--source", source, "--output", output, "--json")

    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["after"]["messages"] == len(filled.messages)
    assert result["before"]["header"] == "notadb"
    assert result["integrity"] == "ok"
    check_recovered(filled, output)

    again = _cli("sessions", "salvage", "--source", source, "--output", output)
    assert again.returncode == 1
    assert again.stderr.startswith("error: ") and "already exists" in again.stderr

    other = tmp_path / "other" / "state.db"
    human = _cli("sessions", "salvage", "--source", source, "--output", other)
    assert human.returncode == 0, human.stderr
    assert "written" in human.stdout and "integrity_check: ok" in human.stdout


def test_cli_needs_exactly_one_mode(source: Path, tmp_path: Path) -> None:
    neither = _cli("sessions", "salvage", "--source", source)
    both = _cli(
        "sessions", "salvage", "--source", source, "--inspect-only", "--output", tmp_path / "x.db"
    )
    assert neither.returncode == 2 and both.returncode == 2
    assert "exactly one" in neither.stderr
