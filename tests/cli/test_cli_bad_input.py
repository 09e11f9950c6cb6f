"""The CLI meets poison values: lone surrogates, unstorable values and odd stored times."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import StateStore

Cli = Callable[..., Any]


def write_lines(path: Path, records: list[Any]) -> Path:
    # json.dumps writes lone surrogates (and big ints, NaN) as Python's JSON does.
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="ascii")
    return path


def session_line(sid: str, **fields: Any) -> dict[str, Any]:
    return {"session": {"id": sid, **fields}}


def message_line(sid: str, **message: Any) -> dict[str, Any]:
    return {"session_id": sid, "message": message}


@pytest.mark.parametrize(
    ("message", "words"),
    [
        ({"role": "user", "content": "x", "token_count": 2**64}, "64-bit"),
        ({"role": "user", "content": "x", "timestamp": 1772713800000}, "divide by 1000"),
        ({"role": "user", "content": "x", "timestamp": float("nan")}, "NaN"),
        ({"role": "user", "content": "x", "finish_reason": {"a": 1}}, "finish_reason"),
        ({"role": "user", "content": [float("inf")]}, "NaN"),
    ],
)
def test_an_unstorable_value_in_an_import_is_one_error_line_naming_file_and_line(
    home: Path, cli: Cli, tmp_path: Path, message: dict[str, Any], words: str
) -> None:
    file = write_lines(
        tmp_path / "bad.jsonl",
        [
            session_line("ok"),
            message_line("ok", role="user", content="kept"),
            session_line("b"),
            message_line("b", **message),
        ],
    )
    result = cli("--home", home, "import", file)
    assert result.code == 1
    assert "Traceback" not in result.stderr
    assert len(result.error_lines) == 1, result.stderr
    assert result.error_lines[0].startswith(f"error: {file}:4: ")
    assert words in result.error_lines[0]
    with StateStore.open(home) as store:
        assert [m["content"] for m in store.load_conversation("ok").messages] == ["kept"]


def test_an_implausible_session_time_in_an_import_is_refused_at_its_line(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    file = write_lines(tmp_path / "t.jsonl", [session_line("t", started_at=1e400)])
    result = cli("--home", home, "import", file)
    assert result.code == 1 and "Traceback" not in result.stderr
    assert result.error_lines[0].startswith(f"error: {file}:1: session started_at")


def test_lone_surrogates_import_and_export_exactly(home: Path, cli: Cli, tmp_path: Path) -> None:
    title = "notes of caf\udce9"
    messages = [
        {"role": "user", "content": "cut \ud83d", "uid": "m1"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "part \udc80"}],
            "reasoning": "think \ud800",
            "tool_calls": [{"id": "c", "function": {"name": "ls", "arguments": '{"p": "\udce9"}'}}],
            "uid": "m2",
            "timestamp": 1772713800.5,
        },
    ]
    file = write_lines(
        tmp_path / "s.jsonl",
        [session_line("sur", title=title, model="m\udc80")]
        + [message_line("sur", **m) for m in messages],
    )
    result = cli("--home", home, "import", file)
    assert result.code == 0, result.stderr
    with StateStore.open(home) as store:
        loaded = store.load_conversation("sur").messages
        with store.unit_of_work() as uow:
            assert uow.sessions.require("sur").title == title
    assert [{k: v for k, v in m.items() if k != "timestamp"} for m in loaded] == [
        {k: v for k, v in m.items() if k != "timestamp"} for m in messages
    ]

    exported = cli("--home", home, "sessions", "export", "sur")
    assert exported.code == 0, exported.stderr
    lines = exported.stdout.splitlines()
    assert "\\ud83d" in lines[0]  # the JSON escape, not a crash
    assert [json.loads(line) for line in lines] == loaded

    md = cli("--home", home, "sessions", "export", "sur", "--format", "markdown")
    assert md.code == 0, md.stderr
    assert "cut \ufffd" in md.stdout and "notes of caf\ufffd" in md.stdout

    for args in (("sessions", "list"), ("sessions", "show", "sur"), ("search", "cut")):
        shown = cli("--home", home, *args)
        assert shown.code == 0, (args, shown.stderr)
        assert "Traceback" not in shown.stderr
    listed = cli("--home", home, "sessions", "list", "--json")
    assert json.loads(listed.stdout)[0]["title"] == title
    shown = cli("--home", home, "sessions", "show", "sur", "--json")
    assert json.loads(shown.stdout)["messages"] == loaded
    # Undecodable bytes in argv arrive as lone surrogates (surrogateescape).
    found = cli("--home", home, "search", "cut \udce9", "--json")
    assert found.code == 0, found.stderr
    assert [hit["session_id"] for hit in json.loads(found.stdout)["hits"]] == ["sur"]


def test_a_session_declared_twice_keeps_repeated_messages_without_uids(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    same = {"role": "user", "content": "again", "timestamp": 1772713800.0}
    file = write_lines(
        tmp_path / "twice.jsonl",
        [
            session_line("twice"),
            message_line("twice", **same),
            session_line("other"),
            message_line("other", **same),
            session_line("twice"),
            message_line("twice", **same),
            message_line("twice", **same),
        ],
    )
    assert cli("--home", home, "import", file).code == 0
    again = cli("--home", home, "import", file, "--json")
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout)["messages_inserted"] == 0
    with StateStore.open(home) as store:
        assert len(store.load_conversation("twice").messages) == 3
        assert len(store.load_conversation("other").messages) == 1


# Values an older version or raw SQL may have stored: none may break a listing.
ODD_TIMES = [1772713800000.0, 1e400, -5.0, True, 253402300800.0]


def test_odd_stored_times_render_in_every_listing(home: Path, cli: Cli) -> None:
    with StateStore.open(home) as store:
        module = store.driver.module
        path = store.path
    con = module.connect(str(path), isolation_level=None)
    try:
        for i, when in enumerate(ODD_TIMES):
            sid = f"odd{i}"
            con.execute(
                "INSERT INTO sessions (id, source, started_at, ended_at, end_reason) "
                "VALUES (?, 'cli', ?, ?, 'done')",
                (sid, when, when),
            )
            con.execute(
                "INSERT INTO messages (session_id, uid, role, content, timestamp) "
                "VALUES (?, ?, 'user', 'oddtime words', ?)",
                (sid, f"u{i}", when),
            )
            con.execute("UPDATE sessions SET message_count = 1 WHERE id = ?", (sid,))
    finally:
        con.close()
    commands: list[tuple[str, ...]] = [("sessions", "list"), ("search", "oddtime")]
    for i in range(len(ODD_TIMES)):
        commands += [
            ("sessions", "show", f"odd{i}"),
            ("sessions", "export", f"odd{i}", "--format", "markdown"),
        ]
    for args in commands:
        result = cli("--home", home, *args)
        assert result.code == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr
    listing = cli("--home", home, "sessions", "list").stdout
    assert "invalid time" in listing
    assert "invalid time" in cli("--home", home, "search", "oddtime").stdout


def test_pending_recover_sets_unstorable_records_aside_and_recovers_every_file(
    home: Path, cli: Cli
) -> None:
    folder = home / "sessions"
    folder.mkdir(mode=0o700)

    def spool_line(message: dict[str, Any]) -> str:
        return json.dumps({"_fallback_timestamp": 1772713800.0, "message": message}) + "\n"

    (folder / "a.pending.jsonl").write_text(
        spool_line({"role": "user", "content": "big", "uid": "a1", "token_count": 2**64})
        + spool_line({"role": "user", "content": "cut \ud83d", "uid": "a2"}),
        encoding="ascii",
    )
    (folder / "b.pending.jsonl").write_text(
        spool_line({"role": "user", "content": "other", "uid": "b1"}), encoding="ascii"
    )
    result = cli("--home", home, "pending", "replay", "--json")
    assert result.code == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    assert (report["files"], report["inserted"], report["kept"]) == (2, 2, 1)
    kept = [json.loads(line) for line in (folder / "a.rejected.jsonl").read_text().splitlines()]
    assert len(kept) == 1 and "64-bit" in kept[0]["_rejected"]
    with StateStore.open(home) as store:
        assert [m["content"] for m in store.load_conversation("a").messages] == ["cut \ud83d"]
        assert [m["content"] for m in store.load_conversation("b").messages] == ["other"]
