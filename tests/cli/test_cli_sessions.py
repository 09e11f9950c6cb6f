"""`hermes-repo sessions list|show|export` through the installed console script."""

from __future__ import annotations

import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_repo import StateStore
from hermes_repo.engine import select_driver

# The store's own SQLite: a standard `sqlite3` connection next to a pysqlite3 store in
# this process would be a second copy of SQLite, blind to the store's locks.
DRIVER = select_driver().module

Cli = Callable[..., Any]
KYOTO = "sample-kyoto-trip"
DASHBOARD = "sample-dashboard-review"


def archive_one_message(home: Path, session_id: str) -> str:
    """Mark one message inactive the way a repair would, with plain SQLite."""
    conn = DRIVER.connect(home / "state.db")
    try:
        uid, content = conn.execute(
            "SELECT uid, content FROM messages WHERE session_id = ? AND role = 'user' "
            "ORDER BY id LIMIT 1",
            (session_id,),
        ).fetchone()
        conn.execute(
            "UPDATE messages SET active = 0, archived_at = 1.0, archive_reason = 'test' "
            "WHERE uid = ?",
            (uid,),
        )
        conn.commit()
    finally:
        conn.close()
    return str(content)


def test_sessions_list_shows_every_session_most_recent_first(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "sessions", "list", "--json")

    assert result.code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["id"] for r in rows] == [
        DASHBOARD,
        KYOTO,
        "sample-retry-tests",
        "sample-wal-locked",
    ]
    kyoto = rows[1]
    assert kyoto["source"] == "telegram" and kyoto["message_count"] == 13
    assert kyoto["title"] == "京都三日游行程"


def test_sessions_list_filters_by_source_and_limits(shared_home: Path, cli: Cli) -> None:
    by_source = json.loads(
        cli("--home", shared_home, "sessions", "list", "--source", "cli", "--json").stdout
    )
    limited = json.loads(
        cli("--home", shared_home, "sessions", "list", "--limit", "1", "--json").stdout
    )

    assert {r["id"] for r in by_source} == {"sample-retry-tests", "sample-wal-locked"}
    assert [r["id"] for r in limited] == [DASHBOARD]


def test_sessions_list_table_shows_whole_ids_and_titles(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "sessions", "list")

    assert result.code == 0, result.stderr
    for text in (DASHBOARD, KYOTO, "京都三日游行程", "telegram"):
        assert text in result.stdout


def test_sessions_list_on_an_empty_store_says_so(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "sessions", "list")

    assert result.code == 0
    assert "no sessions" in result.stdout


def test_sessions_show_json_equals_the_library_load(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "sessions", "show", DASHBOARD, "--json")

    assert result.code == 0, result.stderr
    shown = json.loads(result.stdout)
    with StateStore.open(shared_home) as store:
        assert shown["messages"] == store.load_conversation(DASHBOARD).messages
    assert shown["session"]["id"] == DASHBOARD
    assert isinstance(shown["messages"][0]["content"], list)  # image parts kept as parts


def test_sessions_show_hides_archived_rows_unless_asked(imported_home: Path, cli: Cli) -> None:
    archived = archive_one_message(imported_home, KYOTO)

    plain = json.loads(cli("--home", imported_home, "sessions", "show", KYOTO, "--json").stdout)
    full = json.loads(
        cli(
            "--home", imported_home, "sessions", "show", KYOTO, "--json", "--include-inactive"
        ).stdout
    )
    table = cli("--home", imported_home, "sessions", "show", KYOTO, "--include-inactive")

    assert archived not in [m.get("content") for m in plain["messages"]]
    assert len(full["messages"]) == len(plain["messages"]) + 1
    inactive = [m for m in full["messages"] if m.get("active") is False]
    assert [m["content"] for m in inactive] == [archived]
    assert "[archived: test]" in table.stdout


def test_sessions_show_table_lists_roles_and_tool_names(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "sessions", "show", KYOTO)

    assert result.code == 0, result.stderr
    assert "京都三日游行程" in result.stdout
    assert "tool (web_search)" in result.stdout
    assert "[calls web_search]" in result.stdout


def test_sessions_show_of_a_missing_session_fails_with_one_line(
    shared_home: Path, cli: Cli
) -> None:
    result = cli("--home", shared_home, "sessions", "show", "no-such-session")

    assert result.code == 1
    assert "Traceback" not in result.stderr
    assert result.error_lines == [
        "error: session 'no-such-session' does not exist; "
        "list sessions with `hermes-repo sessions list`"
    ]


def test_jsonl_export_round_trips_to_the_library_load(shared_home: Path, cli: Cli) -> None:
    for sid in (KYOTO, DASHBOARD, "sample-wal-locked"):
        result = cli("--home", shared_home, "sessions", "export", sid)

        assert result.code == 0, result.stderr
        exported = [json.loads(line) for line in result.stdout.splitlines()]
        with StateStore.open(shared_home) as store:
            assert exported == store.load_conversation(sid).messages


def test_export_to_a_file_is_private_and_reimportable_content(
    shared_home: Path, cli: Cli, tmp_path: Path
) -> None:
    out = tmp_path / "kyoto.jsonl"

    result = cli("--home", shared_home, "sessions", "export", KYOTO, "--output", out)

    assert result.code == 0, result.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert str(out) in result.stderr and result.stdout == ""
    assert len(out.read_text(encoding="utf-8").splitlines()) == 13
    assert not list(tmp_path.glob(".*.tmp"))


def test_markdown_export_is_a_readable_transcript_with_role_headings(
    shared_home: Path, cli: Cli
) -> None:
    result = cli(
        "--home", shared_home, "sessions", "export", "sample-wal-locked", "--format", "markdown"
    )

    assert result.code == 0, result.stderr
    md = result.stdout
    assert md.startswith("# Why does my agent say 'database is locked'?\n")
    assert "## System" in md and "## User" in md and "## Assistant" in md
    assert "## Tool · terminal" in md
    assert "**Tool call** `terminal`" in md and "```json" in md
    assert "BEGIN IMMEDIATE" in md


def test_markdown_export_shows_images_as_links(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "sessions", "export", DASHBOARD, "--format", "markdown")

    assert "![image](https://example.com/dashboards/write-latency.png)" in result.stdout
    assert "display only" in result.stdout


def test_export_of_a_missing_session_fails_with_one_line(
    shared_home: Path, cli: Cli, tmp_path: Path
) -> None:
    out = tmp_path / "none.jsonl"

    result = cli("--home", shared_home, "sessions", "export", "ghost", "-o", out)

    assert result.code == 1
    assert result.error_lines == [
        "error: session 'ghost' does not exist; list sessions with `hermes-repo sessions list`"
    ]
    assert not out.exists()


def test_export_into_a_missing_folder_names_the_file_asked_for(
    shared_home: Path, cli: Cli, tmp_path: Path
) -> None:
    out = tmp_path / "no" / "such" / "folder" / "x.md"

    result = cli("--home", shared_home, "sessions", "export", KYOTO, "-o", out)

    assert result.code == 1
    assert result.error_lines == [
        f"error: cannot write {out}: No such file or directory; "
        "check that its folder exists and is writable"
    ]
