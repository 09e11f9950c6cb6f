"""Importing Hermes Agent state.db files: the two real fixtures and hand-made layouts.

Every expectation is read from the source file itself (with the standard sqlite3, on a
private copy) or from the fixture README's stated facts; the store is checked through
its public API and its own file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.errors import ImportSourceError
from tests.support import damage

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hermes"
V6 = "hermes_state_v6-aebf322.db"
V16 = "hermes_state_v16-5e01a5d.db"

# Every test runs on both backends: the import goes through the write core only.
pytestmark = pytest.mark.usefixtures("backend")
JSON_PREFIX = "\x00json:"

# Facts stated in the fixture README (what Hermes wrote).
README_COUNTS = {
    V6: {"sessions": 7, "messages": 195, "user": 58, "assistant": 88, "tool": 49},
    V16: {"sessions": 7, "messages": 200, "user": 63, "assistant": 88, "tool": 49},
}
S1 = {V6: "20260301_101500_233152", V16: "20260301_101500_1e08e9"}
S4 = {V6: "20260302_083000_8e166e", V16: "20260302_083000_f90eab"}


@pytest.fixture
def source_dir(tmp_path: Path) -> Path:
    """A folder holding private copies of both fixtures (opening a fixture in place
    could leave -wal/-shm files in the repository)."""
    folder = tmp_path / "hermes-home"
    folder.mkdir()
    for name in (V6, V16):
        shutil.copyfile(FIXTURES / name, folder / name)
    return folder


def _rows(path: Path, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
    conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


class _Row(tuple[Any, ...]):
    """A result row readable by position and by column name, like sqlite3.Row."""

    keys: tuple[str, ...] = ()

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self.keys.index(key))
        return tuple.__getitem__(self, key)


def _store_rows(store: StateStore, sql: str, args: tuple[Any, ...] = ()) -> list[_Row]:
    # Through the store's own driver: a second SQLite library in this process (the
    # standard sqlite3 on the same file) would break the POSIX locks of the first.
    with store.engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            sql = sql.replace("%", "%%").replace("?", "%s")  # psycopg's placeholders
        result = conn.exec_driver_sql(sql, args)
        keys = tuple(result.keys())
        rows = []
        for r in result:
            row = _Row(r)
            row.keys = keys
            rows.append(row)
        return rows


def _digest(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


@pytest.mark.parametrize("name", [V6, V16])
def test_fixture_imports_with_exact_counts_per_session_and_role(
    store: StateStore, source_dir: Path, name: str
) -> None:
    src = source_dir / name
    report = store.import_hermes_db(src)

    expected = {
        (r["session_id"], r["role"]): r["n"]
        for r in _rows(src, "SELECT session_id, role, count(*) AS n FROM messages GROUP BY 1, 2")
    }
    got = {
        (r["session_id"], r["role"]): r["n"]
        for r in _store_rows(
            store, "SELECT session_id, role, count(*) AS n FROM messages GROUP BY 1, 2"
        )
    }
    assert got == expected
    facts = README_COUNTS[name]
    assert sum(got.values()) == facts["messages"]
    for role in ("user", "assistant", "tool"):
        assert sum(n for (_, r), n in got.items() if r == role) == facts[role]
    assert report.sessions.read == report.sessions.imported == facts["sessions"]
    assert report.messages.read == report.messages.imported == facts["messages"]
    assert report.schema_version == (6 if name == V6 else 16)
    # The counters are recomputed from the rows: active messages and their tool calls.
    for row in _store_rows(store, "SELECT * FROM sessions"):
        active = _store_rows(
            store,
            "SELECT tool_calls FROM messages WHERE session_id = ? AND active = 1",
            (row["id"],),
        )
        assert row["message_count"] == len(active)
        calls = sum(len(json.loads(a["tool_calls"])) for a in active if a["tool_calls"])
        assert row["tool_call_count"] == calls


@pytest.mark.parametrize("name", [V6, V16])
def test_100kb_tool_output_and_multimodal_content_come_back_byte_exact(
    store: StateStore, source_dir: Path, name: str
) -> None:
    src = source_dir / name
    store.import_hermes_db(src)

    (big,) = _rows(src, "SELECT content, tool_name FROM messages WHERE id = 3")
    assert len(big["content"]) == 102_400 and big["tool_name"] == "terminal"
    messages = store.load_conversation(S1[name], include_inactive=True).messages
    (mine,) = [m for m in messages if m["uid"] == f"hermes:{S1[name]}:3"]
    assert mine["content"].encode() == big["content"].encode()
    assert mine["tool_name"] == "terminal"

    multimodal = _rows(
        src,
        "SELECT id, session_id, content FROM messages WHERE content LIKE ?",
        (JSON_PREFIX + "%",),
    )
    if name == V6:
        assert multimodal == []  # v6 could not store it (README)
        return
    assert [r["id"] for r in multimodal] == [120]
    row = multimodal[0]
    parts = json.loads(row["content"][len(JSON_PREFIX) :])
    loaded = store.load_conversation(row["session_id"]).messages
    (mine,) = [m for m in loaded if m["uid"] == f"hermes:{row['session_id']}:120"]
    assert isinstance(mine["content"], list) and mine["content"] == parts
    assert any(p.get("type") == "image_url" for p in mine["content"])


def test_search_finds_imported_english_chinese_and_japanese(
    store: StateStore, source_dir: Path
) -> None:
    store.import_hermes_db(source_dir / V16)
    sid = S4[V16]

    for query in ("部署", "ロールバック", "Vault", "服务器部署"):
        hits = store.search(query, limit=50)
        assert sid in {h.session_id for h in hits}, query
    two_chars = store.search("日志", limit=50)  # shorter than a trigram
    assert sid in {h.session_id for h in two_chars}


def test_load_conversation_gives_messages_in_source_order(
    store: StateStore, source_dir: Path
) -> None:
    src = source_dir / V16
    store.import_hermes_db(src)
    for s in _rows(src, "SELECT id FROM sessions"):
        sid = s["id"]
        source_ids = [
            r["id"]
            for r in _rows(src, "SELECT id FROM messages WHERE session_id = ? ORDER BY id", (sid,))
        ]
        loaded = store.load_conversation(sid, include_inactive=True).messages
        assert [m["uid"] for m in loaded] == [f"hermes:{sid}:{i}" for i in source_ids]


def test_undone_rows_stay_inactive_and_out_of_the_replay(
    store: StateStore, source_dir: Path
) -> None:
    src = source_dir / V16
    store.import_hermes_db(src)
    sid = S1[V16]
    inactive = [r["id"] for r in _rows(src, "SELECT id FROM messages WHERE active = 0")]
    assert inactive == [40, 41]

    replay = {m["uid"] for m in store.load_conversation(sid).messages}
    audit = store.load_conversation(sid, include_inactive=True).messages
    for mid in inactive:
        uid = f"hermes:{sid}:{mid}"
        assert uid not in replay
        (row,) = [m for m in audit if m["uid"] == uid]
        assert row["active"] is False and "hermes" in row["archive_reason"]
    (counter,) = _store_rows(store, "SELECT message_count FROM sessions WHERE id = ?", (sid,))
    assert counter[0] == len(replay) == 43 - 2


@pytest.mark.parametrize("name", [V6, V16])
def test_parent_chains_end_reasons_titles_and_times_are_kept(
    store: StateStore, source_dir: Path, name: str
) -> None:
    src = source_dir / name
    store.import_hermes_db(src)
    cols = (
        "id, source, user_id, model, title, parent_session_id, started_at, ended_at, "
        "end_reason, input_tokens, output_tokens"
    )
    expected = {r["id"]: tuple(r) for r in _rows(src, f"SELECT {cols} FROM sessions")}
    got = {r["id"]: tuple(r) for r in _store_rows(store, f"SELECT {cols} FROM sessions")}
    assert got == expected
    chain = [r for r in expected.values() if r[5] is not None]
    assert len(chain) == 3  # S2 -> S1, S3 -> S2, S7 -> S3
    assert {r[8] for r in expected.values()} >= {"compression", "session_reset"}


def _source_values(src: Path, table: str) -> list[dict[str, Any]]:
    return [dict(r) for r in _rows(src, f"SELECT * FROM {table}")]


@pytest.mark.parametrize("name", [V6, V16])
def test_every_source_value_is_in_a_column_or_in_extra(
    store: StateStore, source_dir: Path, name: str
) -> None:
    src = source_dir / name
    store.import_hermes_db(src)

    for row in _source_values(src, "messages"):
        sid = row["session_id"]
        loaded = store.load_conversation(sid, include_inactive=True).messages
        (msg,) = [m for m in loaded if m["uid"] == f"hermes:{sid}:{row['id']}"]
        for key, value in row.items():
            if value is None or key in ("id", "session_id"):
                continue
            if key == "active":
                assert msg.get("active", True) is bool(value)
            elif key == "content" and value.startswith(JSON_PREFIX):
                assert msg["content"] == json.loads(value[len(JSON_PREFIX) :])
            elif key in ("tool_calls", "reasoning_details"):
                assert msg[key] == json.loads(value), key
            else:
                assert msg[key] == value, (row["id"], key)

    for row in _source_values(src, "sessions"):
        with store.unit_of_work() as uow:
            mine = uow.sessions.require(row["id"])
            extra = json.loads(mine.extra) if mine.extra else {}
        for key, value in row.items():
            if value is None:
                continue
            assert getattr(mine, key, None) == value or extra.get(key) == value, key

    if name == V16:
        with store.unit_of_work() as uow:
            s4 = json.loads(uow.sessions.require(S4[V16]).extra or "{}")
            meta = json.loads(uow.meta.get("hermes_import.state_meta") or "{}")
            modes = json.loads(uow.meta.get("hermes_import.telegram_dm_topic_mode") or "[]")
        (binding,) = s4["hermes_tables"]["telegram_dm_topic_bindings"]
        assert binding["thread_id"] == "42" and binding["session_id"] == S4[V16]
        assert meta == {str(r["key"]): r["value"] for r in _source_values(src, "state_meta")}
        assert modes == _source_values(src, "telegram_dm_topic_mode")


@pytest.mark.parametrize("name", [V6, V16])
def test_importing_the_same_file_twice_adds_nothing(
    store: StateStore, source_dir: Path, name: str
) -> None:
    src = source_dir / name
    store.import_hermes_db(src)
    before = _store_rows(store, "SELECT id, uid, session_id FROM messages ORDER BY id")

    again = store.import_hermes_db(src)

    assert again.sessions.imported == again.messages.imported == 0
    assert again.messages.already_present == README_COUNTS[name]["messages"]
    assert again.sessions.already_present == README_COUNTS[name]["sessions"]
    after = _store_rows(store, "SELECT id, uid, session_id FROM messages ORDER BY id")
    assert [tuple(r) for r in after] == [tuple(r) for r in before]


def test_a_later_copy_adds_only_the_new_sessions_and_messages(
    store: StateStore, source_dir: Path
) -> None:
    src = source_dir / V16
    store.import_hermes_db(src)
    # Hermes goes on: a new message in S4, and a new session with two messages,
    # written in Hermes' own shape with plain SQL.
    conn = sqlite3.connect(src)
    with conn:
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp, platform_message_id)"
            " VALUES (?, 'user', '还有一个问题', 1772700000.5, 'tg-999')",
            (S4[V16],),
        )
        conn.execute(
            "INSERT INTO sessions (id, source, started_at, title, cwd)"
            " VALUES ('20260305_090000_abcdef', 'cli', 1772701200.0, 'Later', '/srv')"
        )
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            [
                ("20260305_090000_abcdef", "user", "hello again", 1772701201.0),
                ("20260305_090000_abcdef", "assistant", "welcome back", 1772701202.0),
            ],
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for side in ("-wal", "-shm"):
        Path(f"{src}{side}").unlink(missing_ok=True)

    report = store.import_hermes_db(src)

    assert (report.sessions.imported, report.sessions.already_present) == (1, 7)
    assert (report.messages.imported, report.messages.already_present) == (3, 200)
    s4 = store.load_conversation(S4[V16]).messages
    assert s4[-1]["content"] == "还有一个问题" and s4[-1]["platform_message_id"] == "tg-999"
    later = store.load_conversation("20260305_090000_abcdef").messages
    assert [m["content"] for m in later] == ["hello again", "welcome back"]
    (total,) = _store_rows(store, "SELECT count(*) FROM messages")
    assert total[0] == 203


def test_a_later_undo_or_restore_in_hermes_follows_but_a_repair_here_stays(
    store: StateStore, source_dir: Path
) -> None:
    src = source_dir / V16
    store.import_hermes_db(src)
    s1, s4 = S1[V16], S4[V16]
    # Here: the repair archives S4's duplicate tool result (127).
    assert store.load_conversation(s4, repair=True).repairs > 0
    (repaired,) = _store_rows(
        store, "SELECT active FROM messages WHERE uid = ?", (f"hermes:{s4}:127",)
    )
    assert repaired[0] == 0
    # There: Hermes restores 40/41 and undoes 43; 127 stays active in Hermes.
    conn = sqlite3.connect(src)
    with conn:
        conn.execute("UPDATE messages SET active = 1 WHERE id IN (40, 41)")
        conn.execute("UPDATE messages SET active = 0 WHERE id = 43")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for side in ("-wal", "-shm"):
        Path(f"{src}{side}").unlink(missing_ok=True)

    report = store.import_hermes_db(src)

    assert report.messages.updated == 3 and report.messages.imported == 0
    states = {
        r["uid"]: r["active"]
        for r in _store_rows(
            store, "SELECT uid, active FROM messages WHERE session_id IN (?, ?)", (s1, s4)
        )
    }
    assert (states[f"hermes:{s1}:40"], states[f"hermes:{s1}:41"]) == (1, 1)
    assert states[f"hermes:{s1}:43"] == 0
    assert states[f"hermes:{s4}:127"] == 0  # archived by this store's repair: kept so
    (counter,) = _store_rows(store, "SELECT message_count FROM sessions WHERE id = ?", (s1,))
    assert counter[0] == 43 - 1


_KILLER = textwrap.dedent(
    """
    import os, sys, time
    from hermes_repo import StateStore
    from hermes_repo.hermes_import import run

    run.BATCH_ROWS = 50  # a unit of work per few sessions, as on a large file

    def progress(done, total):
        if done >= 100:  # a few sessions are committed, the rest are not
            print("midway", flush=True)
            time.sleep(600)

    with StateStore.open(sys.argv[1]) as store:
        store.import_hermes_db(sys.argv[2], progress=progress)
    """
)


def test_an_interrupted_import_is_finished_by_running_it_again(
    home: Path, source_dir: Path
) -> None:
    src = source_dir / V16
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLER, str(home), str(src)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "midway", proc.stderr.read() if proc.stderr else ""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    with StateStore.open(home) as store:
        (partial,) = _store_rows(store, "SELECT count(*) FROM sessions")
        assert 0 < partial[0] < 7
        report = store.import_hermes_db(src)
        assert report.sessions.imported == 7 - partial[0], report
        (total,) = _store_rows(store, "SELECT count(*), count(DISTINCT uid) FROM messages")
        assert tuple(total) == (200, 200)


@pytest.mark.parametrize("dry_run", [False, True])
def test_the_source_file_and_its_folder_are_left_exactly_as_they_were(
    store: StateStore, source_dir: Path, dry_run: bool
) -> None:
    before = _digest(source_dir)
    for name in (V6, V16):
        store.import_hermes_db(source_dir / name, dry_run=dry_run)
    assert _digest(source_dir) == before
    assert sorted(p.name for p in source_dir.iterdir()) == sorted([V6, V16])


def test_a_live_source_with_a_wal_is_read_consistently_and_left_alone(
    store: StateStore, source_dir: Path
) -> None:
    src = source_dir / V16
    writer = sqlite3.connect(src)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")  # keep the new row in the -wal
        with writer:
            writer.execute(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES (?, 'user', 'only in the wal', 1772700000.0)",
                (S4[V16],),
            )
        assert Path(f"{src}-wal").stat().st_size > 0
        listing = sorted(p.name for p in source_dir.iterdir())
        digest = _digest(source_dir)

        report = store.import_hermes_db(src)

        assert report.messages.imported == 201
        assert store.load_conversation(S4[V16]).messages[-1]["content"] == "only in the wal"
        assert sorted(p.name for p in source_dir.iterdir()) == listing
        assert _digest(source_dir) == digest  # -wal and -shm included
    finally:
        writer.close()


def test_a_stopped_source_with_an_unmerged_wal_is_read_whole_and_left_alone(
    store: StateStore, source_dir: Path, tmp_path: Path
) -> None:
    # A Hermes that stopped without a checkpoint: state.db, -wal (holding a row) and
    # -shm as the running process left them, copied byte for byte.
    live = source_dir / V16
    writer = sqlite3.connect(live)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        with writer:
            writer.execute(
                "INSERT INTO messages (session_id, role, content, timestamp)"
                " VALUES (?, 'user', 'left in the wal', 1772700000.0)",
                (S4[V16],),
            )
        stopped = tmp_path / "stopped"
        stopped.mkdir()
        for suffix in ("", "-wal", "-shm"):
            shutil.copyfile(f"{live}{suffix}", stopped / f"state.db{suffix}")
    finally:
        writer.close()
    before = _digest(stopped)

    report = store.import_hermes_db(stopped / "state.db")

    assert report.messages.imported == 201
    assert store.load_conversation(S4[V16]).messages[-1]["content"] == "left in the wal"
    assert _digest(stopped) == before  # names and bytes: nothing merged, added or removed


_BUSY_HERMES = textwrap.dedent(
    """
    import sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    n = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp)"
            " VALUES (?, 'user', ?, 1772700000.0)", (sys.argv[2], f"busy {n}"))
        conn.execute("COMMIT")
        n += 1
        if n == 50:
            print("writing", flush=True)
    """
)


def test_a_source_being_written_by_a_running_hermes_is_read_as_one_whole_state(
    store: StateStore, source_dir: Path
) -> None:
    src = source_dir / V16
    proc = subprocess.Popen(
        [sys.executable, "-c", _BUSY_HERMES, str(src), S4[V16]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "writing"
        report = store.import_hermes_db(src)
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    assert report.messages.imported == report.messages.read >= 250
    # Whole commits only, in order: the busy rows imported are exactly busy 0..k-1.
    busy = [
        m["content"]
        for m in store.load_conversation(S4[V16]).messages
        if str(m.get("content", "")).startswith("busy ")
    ]
    assert busy == [f"busy {i}" for i in range(len(busy))] and len(busy) >= 50


def _nothing_written(store: StateStore) -> None:
    assert [tuple(r) for r in _store_rows(store, "SELECT count(*) FROM sessions")] == [(0,)]
    assert [tuple(r) for r in _store_rows(store, "SELECT count(*) FROM messages")] == [(0,)]
    keys = _store_rows(store, "SELECT key FROM state_meta WHERE key LIKE 'hermes_import.%'")
    assert keys == []


def test_a_truncated_file_is_refused_and_nothing_written(
    store: StateStore, source_dir: Path
) -> None:
    bad = source_dir / "truncated.db"
    bad.write_bytes((source_dir / V16).read_bytes()[: 300 * 1024])
    with pytest.raises(ImportSourceError, match=r"truncated.*declares \d+ pages.*restore it"):
        store.import_hermes_db(bad)
    _nothing_written(store)


def test_a_file_damaged_past_its_first_sessions_is_refused_and_nothing_written(
    store: StateStore, source_dir: Path
) -> None:
    src = source_dir / V16
    last_leaf = damage.btree_pages(src, "messages", "leaf")[-1]  # the last session's rows
    damage.overwrite_page(src, last_leaf, seed=13)
    for side in ("-wal", "-shm"):
        Path(f"{src}{side}").unlink(missing_ok=True)
    with pytest.raises(ImportSourceError, match=r"is damaged|the file is damaged"):
        store.import_hermes_db(src)
    _nothing_written(store)


def test_a_sqlite_file_that_is_not_hermes_is_refused_and_nothing_written(
    store: StateStore, source_dir: Path
) -> None:
    other = source_dir / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes (body) VALUES ('x')")
    conn.commit()
    conn.close()
    with pytest.raises(ImportSourceError, match=r"not a Hermes Agent store.*found: notes"):
        store.import_hermes_db(other)
    _nothing_written(store)


def test_a_text_file_is_refused_and_nothing_written(store: StateStore, source_dir: Path) -> None:
    text = source_dir / "notes.txt"
    text.write_text("not a database\n")
    with pytest.raises(ImportSourceError, match=r"not an SQLite database.*--format jsonl"):
        store.import_hermes_db(text)
    _nothing_written(store)


def test_a_dry_run_reports_everything_and_writes_nothing(
    store: StateStore, source_dir: Path
) -> None:
    dry = store.import_hermes_db(source_dir / V16, dry_run=True)
    _nothing_written(store)
    real = store.import_hermes_db(source_dir / V16)
    assert dry.as_dict()["tables"] == real.as_dict()["tables"]
    assert dry.dry_run and not real.dry_run


def _hand_made(path: Path) -> None:
    """An upgraded-in-place layout: unknown columns appended at the end, no title
    column, no schema_version table, columns in an unusual order."""
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE sessions (source TEXT NOT NULL, id TEXT PRIMARY KEY, started_at REAL NOT NULL,
            ended_at REAL, end_reason TEXT, future_flag INTEGER, origin_json TEXT);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
            timestamp REAL NOT NULL, role TEXT NOT NULL, content TEXT,
            display_kind TEXT, display_identity BLOB);
        INSERT INTO sessions VALUES
            ('cli', 'hand_1', 1772000000.0, 1772000100.0, 'user_exit', 3, '{"a":1}');
        INSERT INTO messages (session_id, timestamp, role, content, display_kind, display_identity)
            VALUES ('hand_1', 1772000001.0, 'user', 'hi', 'chat', x'00ff'),
                   ('hand_1', 1772000002.0, 'assistant', 'hello', NULL, NULL);
        """
    )
    conn.commit()
    conn.close()


def test_a_hand_made_layout_with_unknown_and_missing_columns_imports(
    store: StateStore, tmp_path: Path
) -> None:
    src = tmp_path / "hand.db"
    _hand_made(src)
    report = store.import_hermes_db(src)

    assert report.schema_version is None and any("schema_version" in w for w in report.warnings)
    assert (report.sessions.imported, report.messages.imported) == (1, 2)
    with store.unit_of_work() as uow:
        session = uow.sessions.require("hand_1")
        extra = json.loads(session.extra or "{}")
    assert session.title is None and session.end_reason == "user_exit"
    assert extra == {"future_flag": 3, "origin_json": '{"a":1}'}
    first, second = store.load_conversation("hand_1").messages
    assert (first["content"], first["display_kind"]) == ("hi", "chat")
    assert first["display_identity"] == {"$base64": "AP8="}
    assert second["content"] == "hello" and "display_kind" not in second
    assert "display_identity" not in second and "extra" not in second


def test_values_no_column_can_hold_are_kept_and_warned_about(
    store: StateStore, tmp_path: Path
) -> None:
    # A garbage (millisecond) timestamp, a role this store has no place for, a parent
    # the source lost, and messages whose session the source lost.
    src = tmp_path / "odd.db"
    conn = sqlite3.connect(src)
    conn.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL,
            parent_session_id TEXT, started_at REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
            role TEXT NOT NULL, content TEXT, timestamp REAL NOT NULL);
        INSERT INTO sessions VALUES ('odd_1', 'cli', 'gone_0', 1772000000.0);
        INSERT INTO messages (session_id, role, content, timestamp) VALUES
            ('odd_1', 'user', 'first', 1772000001.0),
            ('odd_1', 'user', 'late clock', 1772000002000.0),
            ('odd_1', 'session_meta', '{"k": 1}', 1772000003.0),
            ('nobody', 'user', 'orphan', 1772000004.0);
        """
    )
    conn.commit()
    conn.close()

    report = store.import_hermes_db(src)

    assert (report.sessions.imported, report.messages.imported) == (1, 3)
    text = " | ".join(report.warnings)
    assert "milliseconds" in text and "'session_meta'" in text
    assert "gone_0" in text and "1 message(s) name a session the source does not hold" in text
    with store.unit_of_work() as uow:
        session = uow.sessions.require("odd_1")
        assert session.parent_session_id is None
        assert json.loads(session.extra or "{}") == {"parent_session_id": "gone_0"}
    first, late, meta = store.load_conversation("odd_1").messages
    assert first["content"] == "first"
    # The garbage time is given back as it was; the row kept its place and a usable time.
    assert late["content"] == "late clock" and late["hermes_timestamp"] == 1772000002000.0
    assert meta["role"] == "session_meta" and meta["display_only"] is True
    (stored,) = _store_rows(
        store, "SELECT role, timestamp FROM messages WHERE uid = 'hermes:odd_1:2'"
    )
    assert tuple(stored) == ("user", 1772000001.0)
