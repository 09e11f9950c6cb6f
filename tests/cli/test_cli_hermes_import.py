"""`hermes-repo import` with a Hermes Agent state.db: detection, --format, --dry-run, --json."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from tests.cli.conftest import Cli

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "hermes" / "hermes_state_v16-5e01a5d.db"
)


def _copy(tmp_path: Path) -> Path:
    folder = tmp_path / "hermes"
    folder.mkdir()
    return Path(shutil.copyfile(FIXTURE, folder / "state.db"))


def test_import_recognises_a_hermes_state_db_by_its_header(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    src = _copy(tmp_path)
    result = cli("--home", home, "import", src, "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["format"] == "hermes-db" and report["schema_version"] == 16
    assert report["tables"]["messages"] == {
        "read": 200,
        "imported": 200,
        "already_present": 0,
        "kept_in_extra": report["tables"]["messages"]["kept_in_extra"],
        "updated": 0,
        "edited": 0,
        "archived": 0,
    }
    assert report["tables"]["messages"]["kept_in_extra"] > 0
    assert report["mapped_sessions"] == {} and report["skipped_tables"] == []

    again = cli("--home", home, "import", src)
    assert again.code == 0, again.stderr
    assert "messages 0 new, 200 already present" in again.stdout


def test_import_dry_run_writes_nothing(cli: Cli, home: Path, tmp_path: Path) -> None:
    src = _copy(tmp_path)
    result = cli("--home", home, "import", src, "--dry-run")
    assert result.code == 0, result.stderr
    assert result.stdout.startswith("would import") and "messages 200 new" in result.stdout
    listed = cli("--home", home, "sessions", "list", "--json")
    assert listed.code == 0, listed.stderr
    assert json.loads(listed.stdout) == []
    assert sorted(p.name for p in src.parent.iterdir()) == ["state.db"]


def test_import_refuses_a_text_file_forced_as_hermes_db_with_one_line(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    result = cli("--home", home, "import", text, "--format", "hermes-db")
    assert result.code == 1
    assert result.error_lines == [
        f"error: {text} is not an SQLite database (found a file starting with b'hello\\n'); "
        "pass a Hermes Agent state.db, or use --format jsonl for a JSON Lines file"
    ]


def test_import_of_malformed_sequences_keeps_them_for_an_explicit_repair(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    src = _copy(tmp_path)
    assert cli("--home", home, "import", src).code == 0
    check = cli("--home", home, "sessions", "repair", "--check-only", "--json")
    # Kept as Hermes wrote them: the check says a repair would change something.
    assert check.code == 1, check.stderr
    report = json.loads(check.stdout)
    by_session = {s["session_id"]: s["by_rule"] for s in report["sessions"]}
    # S4: two consecutive user rows and a duplicate tool result, as Hermes wrote them.
    assert by_session["20260302_083000_f90eab"] == {"merge_user": 1, "duplicate_tool_result": 1}


def test_sessions_export_gives_back_the_values_kept_in_extra(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    src = _copy(tmp_path)
    assert cli("--home", home, "import", src).code == 0
    sid = "20260303_190500_100786"  # S5: Codex reasoning and message items
    conn = sqlite3.connect(f"file:{src}?mode=ro&immutable=1", uri=True)
    try:
        source = conn.execute(
            "SELECT id, codex_reasoning_items, codex_message_items, platform_message_id "
            "FROM messages WHERE session_id = ? AND active = 1 ORDER BY id",
            (sid,),
        ).fetchall()
    finally:
        conn.close()

    result = cli("--home", home, "sessions", "export", sid)

    assert result.code == 0, result.stderr
    exported = [json.loads(line) for line in result.stdout.splitlines()]
    assert [m["uid"] for m in exported] == [f"hermes:{sid}:{r[0]}" for r in source]
    kept = 0
    for message, (_, reasoning, items, platform_id) in zip(exported, source, strict=True):
        for key, value in (
            ("codex_reasoning_items", reasoning),
            ("codex_message_items", items),
            ("platform_message_id", platform_id),
        ):
            assert message.get(key) == value
            kept += value is not None
    assert kept > 0


def test_import_refuses_an_empty_file_in_one_line_instead_of_importing_nothing(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "state.db"
    empty.write_bytes(b"")
    result = cli("--home", home, "import", empty)
    assert result.code == 1
    assert len(result.error_lines) == 1
    assert result.error_lines[0].startswith(f"error: {empty} is empty: nothing to import")
    listed = cli("--home", home, "sessions", "list", "--json")
    assert json.loads(listed.stdout) == []


def test_import_shows_the_sessions_stored_under_a_mapped_id(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    src = tmp_path / "state.db"
    conn = sqlite3.connect(src)
    conn.executescript(
        """
        CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL,
            role TEXT NOT NULL, content TEXT, timestamp REAL NOT NULL);
        INSERT INTO sessions VALUES ('my chat', 'api_server', 1772000000.0);
        INSERT INTO messages (session_id, role, content, timestamp)
            VALUES ('my chat', 'user', 'hi', 1772000001.0);
        """
    )
    conn.close()
    result = cli("--home", home, "import", src)
    assert result.code == 0, result.stderr
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("  session ")]
    mapped = line.split("stored as ")[1]
    assert line.startswith("  session 'my chat' stored as hermes-my_chat-")
    shown = cli("--home", home, "sessions", "show", mapped, "--json")
    assert shown.code == 0, shown.stderr


def test_import_refuses_a_file_that_is_neither_a_state_db_nor_json_lines_in_one_line(
    cli: Cli, home: Path, tmp_path: Path
) -> None:
    archive = tmp_path / "hermes-backup.zip"
    archive.write_bytes(b"PK\x03\x04\x14\x00\x00\x00\x08\x00state.db")
    result = cli("--home", home, "import", archive)
    assert result.code == 1
    assert result.error_lines == [
        f"error: {archive} is neither a Hermes Agent state.db (it does not start with "
        "SQLite's header) nor JSON Lines (it does not start with a JSON object); pass the "
        "state.db of a Hermes home, or a JSON Lines file"
    ]
