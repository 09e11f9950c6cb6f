"""Stored text never drives the reader's terminal: every human-facing output shows
control characters escaped, and ``--json`` keeps them exact.

Before: a chat message holding ``ESC ] 0 ; pwned BEL`` retitled the window of whoever ran
`search`, `sessions show`, `sessions list` or read the Markdown export; OSC 52 wrote
their clipboard, ``ESC [ 2 J`` cleared the screen, the 8-bit CSI U+009B did the same
without an ESC, and U+202E reversed the rest of the line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.controls import escape_controls
from tests.cli.conftest import Cli, Result

TITLE_SET = "\x1b]0;pwned\x07"
CLIPBOARD = "\x1b]52;c;SGVsbG8=\x07"
CLEAR = "\x1b[2J"
CSI_8BIT = "\x9b31m"
RLO = "\u202e"
HOSTILE = f"needle [bold]x[/bold] {RLO}gnp.exe {CSI_8BIT} {TITLE_SET} {CLIPBOARD} {CLEAR}"
TITLE = f"title {TITLE_SET}{CLEAR}{CSI_8BIT}{RLO} [link=http://evil]t[/link]"
# ESC, BEL, the C1 range and the bidi overrides/isolates: none may reach a terminal raw.
RAW = ["\x1b", "\x07", "\x9b", "\x90", "\x9d", "\u202e", *map(chr, range(0x80, 0xA0))]


def _no_raw_controls(result: Result) -> None:
    out = result.stdout + result.stderr
    found = sorted({f"U+{ord(ch):04X}" for ch in out if ch in RAW})
    assert not found, f"raw control characters {found} in {out!r}"


def _hostile_session(home: Path) -> str:
    with StateStore.open(home) as store:
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli", title=TITLE, model=f"m{CLEAR}")
            uow.commit()
        store.append_message(sid, {"role": "user", "content": HOSTILE})
        store.append_message(sid, {"role": "assistant", "content": f"ok {CSI_8BIT}done"})
        store.append_message(
            sid, {"role": "tool", "content": f"tool {CLIPBOARD}", "tool_name": f"t{TITLE_SET}"}
        )
    return sid


@pytest.fixture
def hostile(home: Path, backend: str) -> tuple[Path, str]:
    return home, _hostile_session(home)


def test_search_shows_escape_sequences_escaped(cli: Cli, hostile: tuple[Path, str]) -> None:
    home, _sid = hostile
    result = cli("--home", home, "search", "needle")
    assert result.code == 0, result.stderr
    _no_raw_controls(result)
    # The snippet is a window around the hit: its start holds these.
    assert "\\u202egnp.exe" in result.stdout and "\\x9b31m" in result.stdout
    # Rich markup in the text is text, not styling.
    assert "[bold]x[/bold]" in result.stdout


def test_search_json_round_trips_the_control_characters(
    cli: Cli, hostile: tuple[Path, str]
) -> None:
    home, _sid = hostile
    result = cli("--home", home, "search", "needle", "--json")
    assert result.code == 0, result.stderr
    _no_raw_controls(result)  # JSON writes them as \u001b escapes itself
    snippets = " ".join(hit["snippet"] for hit in json.loads(result.stdout)["hits"])
    assert TITLE_SET in snippets and CSI_8BIT in snippets and RLO in snippets


def test_sessions_list_shows_a_hostile_title_escaped(cli: Cli, hostile: tuple[Path, str]) -> None:
    home, sid = hostile
    result = cli("--home", home, "sessions", "list")
    assert result.code == 0, result.stderr
    _no_raw_controls(result)
    assert sid in result.stdout and "\\x1b]0;pwned\\x07" in result.stdout
    assert "[link=http://evil]t[/link]" in result.stdout
    listed = cli("--home", home, "sessions", "list", "--json")
    assert json.loads(listed.stdout)[0]["title"] == TITLE


def test_sessions_show_escapes_title_content_and_tool_name(
    cli: Cli, hostile: tuple[Path, str]
) -> None:
    home, sid = hostile
    result = cli("--home", home, "sessions", "show", sid)
    assert result.code == 0, result.stderr
    _no_raw_controls(result)
    for shown in ("\\x1b]52;c;SGVsbG8=\\x07", "\\x1b[2J", "\\x9b31m", "\\u202e", "t\\x1b]0;"):
        assert shown in result.stdout
    exact = json.loads(cli("--home", home, "sessions", "show", sid, "--json").stdout)
    assert exact["session"]["title"] == TITLE and exact["session"]["model"] == f"m{CLEAR}"
    assert exact["messages"][0]["content"] == HOSTILE
    assert exact["messages"][2]["tool_name"] == f"t{TITLE_SET}"


def test_markdown_export_escapes_controls_and_jsonl_keeps_them(
    cli: Cli, hostile: tuple[Path, str], tmp_path: Path
) -> None:
    home, sid = hostile
    markdown = cli("--home", home, "sessions", "export", sid, "--format", "markdown")
    assert markdown.code == 0, markdown.stderr
    _no_raw_controls(markdown)
    # Everything else is as stored: the escaped text, line for line.
    assert escape_controls(HOSTILE) in markdown.stdout
    assert f"# {escape_controls(TITLE)}" in markdown.stdout
    out = tmp_path / "t.md"
    written = cli("--home", home, "sessions", "export", sid, "--format", "markdown", "-o", out)
    assert written.code == 0, written.stderr
    assert not any(ch in RAW for ch in out.read_text(encoding="utf-8"))
    jsonl = cli("--home", home, "sessions", "export", sid)
    _no_raw_controls(jsonl)
    lines = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert lines[0]["content"] == HOSTILE


def test_error_and_hint_lines_escape_a_hostile_argument(cli: Cli, home: Path) -> None:
    missing = f"no-such{TITLE_SET}{CSI_8BIT}"
    for args in (("sessions", "show", missing), ("sessions", "export", missing)):
        result = cli("--home", home, *args)
        assert result.code == 1
        _no_raw_controls(result)
        assert result.stderr.startswith("error: ")
    usage = cli("--home", home, "sessions", "list", f"--bogus{TITLE_SET}")
    assert usage.code == 2 and "--bogus\\x1b]0;pwned\\x07" in usage.stderr
    _no_raw_controls(usage)
    searched = cli("--home", home, "search", f"nothing{CLEAR}here")
    assert searched.code == 0, searched.stderr
    _no_raw_controls(searched)


def test_pending_list_and_doctor_escape_a_hostile_spool_file_name(cli: Cli, home: Path) -> None:
    sessions = home / "sessions"
    sessions.mkdir(exist_ok=True)
    (sessions / f"x{TITLE_SET}{CSI_8BIT}.pending.jsonl").write_text("{}\n", encoding="utf-8")
    for args in (("pending", "list"), ("doctor",)):
        result = cli("--home", home, *args)
        assert result.code in (0, 1), result.stderr
        assert "Traceback" not in result.stderr
        _no_raw_controls(result)
    listed = cli("--home", home, "pending", "list", "--json")
    assert any(TITLE_SET in row["file"] for row in json.loads(listed.stdout))
