"""`hermes-repo import` with a Hermes Agent state.db: detection, --format, --dry-run, --json."""

from __future__ import annotations

import json
import shutil
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
    }
    assert report["tables"]["messages"]["kept_in_extra"] > 0

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
    assert check.code == 0, check.stderr
    report = json.loads(check.stdout)
    by_session = {s["session_id"]: s["by_rule"] for s in report["sessions"]}
    # S4: two consecutive user rows and a duplicate tool result, as Hermes wrote them.
    assert by_session["20260302_083000_f90eab"] == {"merge_user": 1, "duplicate_tool_result": 1}
