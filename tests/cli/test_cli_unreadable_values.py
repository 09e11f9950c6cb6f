"""Odd stored values and deep input through the installed console script: every command
keeps working, ``doctor`` names each value's row, and a JSONL line nested too deeply is
reported by its line number, never as a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from hermes_repo import StateStore
from hermes_repo.codec import INVALID_KEY, MAX_DEPTH
from tests.cli.conftest import Cli
from tests.support.odd_values import damaged_session


def test_every_command_reads_a_session_holding_odd_values_and_doctor_names_each_row(
    backend: str, home: Path, cli: Cli
) -> None:
    with StateStore.open(home) as store:
        sid, damaged, odd = damaged_session(store, backend)

    for args in (
        ("sessions", "show", sid),
        ("sessions", "export", sid, "--format", "markdown"),
        ("search", "alpha"),
    ):
        result = cli("--home", home, *args)
        assert result.code == 0 and "Traceback" not in result.stderr, (args, result.stderr)

    shown = json.loads(cli("--home", home, "sessions", "show", sid, "--json").stdout)
    exported = [
        json.loads(line)
        for line in cli("--home", home, "sessions", "export", sid).stdout.splitlines()
    ]
    assert shown["messages"] == exported
    assert sum(INVALID_KEY in m for m in exported) == len(damaged)

    doctor = cli("--home", home, "doctor", "--json")
    assert doctor.code == 1, doctor.stderr
    report = json.loads(doctor.stdout)
    assert "value-unreadable" in [f["code"] for f in report["findings"]]
    named = {(v["message_id"], v["field"]) for v in report["values"]["values"]}
    assert {(mid, field) for mid, field, _ in damaged} <= named
    assert {(mid, "timestamp") for mid in odd} <= named
    assert (None, "extra") in {(v["message_id"], v["field"]) for v in report["values"]["values"]}
    assert f"message {damaged[0][0]} of session {sid}" in json.dumps(report["findings"])

    check = cli("--home", home, "sessions", "repair", "--check-only")
    assert "the store needs a repair" in check.stdout, check.stdout
    repair = cli("--home", home, "sessions", "repair")
    assert repair.code == 0 and "Traceback" not in repair.stderr, repair.stderr
    assert "unreadable value(s) rewritten" in repair.stdout, repair.stdout
    after = [
        json.loads(line)
        for line in cli("--home", home, "sessions", "export", sid).stdout.splitlines()
    ]
    assert len(after) == len(exported) and not any(INVALID_KEY in m for m in after)
    # The fields that read before are untouched; the originals are archived rows.
    assert all(
        a["content"] == b["content"] for a, b in zip(after, exported, strict=True) if "content" in b
    )
    assert cli("--home", home, "doctor").code == 0


def deep_line(depth: int) -> str:
    message = '{"role": "user", "content": ' + "[" * depth + '"x"' + "]" * depth + "}"
    return '{"session_id": "s1", "message": ' + message + "}"


def test_a_jsonl_line_nested_1000_deep_is_reported_by_line_without_a_traceback(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    for depth, words in (
        (1000, "nested too deeply to read"),
        (MAX_DEPTH + 1, f"nested {MAX_DEPTH + 1} levels deep"),
    ):
        source = tmp_path / f"deep{depth}.jsonl"
        source.write_text('{"session": {"id": "s1"}}\n' + deep_line(depth) + "\n")
        result = cli("--home", home, "import", source)
        assert result.code == 1 and "Traceback" not in result.stderr, result.stderr
        (line,) = result.error_lines
        assert line.startswith(f"error: {source}:2: ") and words in line

    fine = tmp_path / "fine.jsonl"
    fine.write_text('{"session": {"id": "s1"}}\n' + deep_line(MAX_DEPTH) + "\n")
    assert cli("--home", home, "import", fine).code == 0
    exported = cli("--home", home, "sessions", "export", "s1").stdout
    assert json.loads(exported)["content"] == json.loads(deep_line(MAX_DEPTH))["message"]["content"]
