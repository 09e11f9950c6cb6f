"""`hermes-repo sessions repair [--check-only]` and `sessions show --repair`, run for real."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_repo import StateStore
from tests.support.stores import store_digests
from tests.support.transcripts import EXPECTED_ARCHIVED, MALFORMED, seed

Cli = Callable[..., Any]


def seed_violations(home: Path) -> tuple[str, list[int], str]:
    """Two sessions that break the transcript rules: ``MALFORMED`` and two user turns."""
    with StateStore.open(home) as store:
        sid, ids = seed(store, MALFORMED)
        users, _ = seed(store, [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    return sid, ids, users


def test_check_only_reports_violations_as_json_exits_1_and_writes_nothing(
    home: Path, cli: Cli
) -> None:
    sid, _, users = seed_violations(home)
    before = store_digests(home)
    result = cli("--home", home, "sessions", "repair", "--check-only", "--json")
    # A repair is needed: the exit code says so, as the report does.
    assert result.code == 1, result.stderr
    assert store_digests(home) == before
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["sessions_violating"] == 2 and report["rows_violating"] == 5
    assert report["alternation"] == {"sessions": 2, "rows": 3}
    assert report["tool_pairing"] == {"sessions": 1, "rows": 2}
    assert {s["session_id"] for s in report["sessions"]} == {sid, users}


def test_check_only_prints_a_table_with_one_header_per_rule(home: Path, cli: Cli) -> None:
    sid, _, users = seed_violations(home)
    result = cli("--home", home, "sessions", "repair", "--check-only")
    assert result.code == 1, result.stderr
    assert "2 of 2 session(s) violate" in result.stdout
    assert sid in result.stdout and users in result.stdout
    header = next(line for line in result.stdout.splitlines() if "session" in line.split())
    row = next(line for line in result.stdout.splitlines() if line.split()[:1] == [sid])
    # The id, the row count and one count per rule: as many headers as values.
    assert header.split() == ["session", "rows", "user", "asst", "unmerg", "orphan", "dup"]
    assert len(row.split()) == len(header.split())
    assert "alternation (user, asst, unmerg turns): 2 session(s), 3 row(s)" in result.stdout
    assert "tool pairing (orphan, dup results): 1 session(s), 2 row(s)" in result.stdout


def test_repair_fixes_every_violating_session_then_check_passes(home: Path, cli: Cli) -> None:
    seed_violations(home)
    result = cli("--home", home, "sessions", "repair", "--json")
    assert result.code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["sessions_repaired"] == 2
    assert summary["repairs"] == len(EXPECTED_ARCHIVED) + 1
    check = cli("--home", home, "sessions", "repair", "--check-only")
    assert check.code == 0 and check.stdout.startswith("ok: 2 session(s)")
    again = cli("--home", home, "sessions", "repair")
    assert again.code == 0
    assert "repaired 0 session(s): 0 row(s) archived" in again.stdout


def test_show_repair_applies_and_reports_the_changes(home: Path, cli: Cli) -> None:
    sid, ids, _ = seed_violations(home)
    result = cli("--home", home, "sessions", "show", sid, "--repair", "--json")
    assert result.code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["repair"]["repairs"] == 4
    assert out["repair"]["updated_ids"] == [ids[1], ids[4]]
    assert out["session"]["message_count"] == 8  # counters read after the repair
    assert len(out["messages"]) == 8

    text = cli("--home", home, "sessions", "show", sid, "--repair")
    assert text.code == 0, text.stderr
    assert "repair: 0 row(s) archived, 0 row(s) updated" in text.stdout

    audit = cli("--home", home, "sessions", "show", sid, "--include-inactive")
    assert f"merge_user into #{ids[1]}" in audit.stdout


def test_show_without_repair_writes_nothing(home: Path, cli: Cli) -> None:
    sid, _, _ = seed_violations(home)
    before = store_digests(home)
    result = cli("--home", home, "sessions", "show", sid, "--json")
    assert result.code == 0, result.stderr
    assert len(json.loads(result.stdout)["messages"]) == len(MALFORMED)
    assert store_digests(home) == before


def test_show_repair_of_an_unknown_session_is_one_error_line(home: Path, cli: Cli) -> None:
    seed_violations(home)
    result = cli("--home", home, "sessions", "show", "no_such_session", "--repair")
    assert result.code == 1
    assert result.error_lines == [
        "error: session 'no_such_session' does not exist; list sessions with "
        "`hermes-repo sessions list`"
    ]


def test_doctor_and_check_only_name_the_same_sessions_and_only_the_check_fails(
    home: Path, cli: Cli
) -> None:
    sid, _, users = seed_violations(home)

    doctor = cli("--home", home, "doctor", "--json")
    check = cli("--home", home, "sessions", "repair", "--check-only")

    # The check answers "would a repair change something?": yes, exit 1. The doctor
    # answers "is the store sound?": yes (a repairing load tidies these as it reads),
    # and lists the same sessions in its transcripts section.
    assert check.code == 1, check.stderr
    assert doctor.code == 0, doctor.stderr
    report = json.loads(doctor.stdout)
    assert report["findings"] == []
    assert report["healthy"] is True
    assert report["notes"] == [
        "2 session(s) break role alternation or tool pairing; a repairing load tidies them "
        "when it reads them (or `hermes-repo sessions repair` now): nothing to do"
    ]
    assert report["transcripts"]["sessions_violating"] == 2
    assert set(report["transcripts"]["sessions"]) == {sid, users}

    repaired = cli("--home", home, "sessions", "repair")
    assert repaired.code == 0, repaired.stderr

    assert json.loads(cli("--home", home, "doctor", "--json").stdout)["transcripts"] == {
        "rows_checked": report["transcripts"]["rows_checked"] - (len(EXPECTED_ARCHIVED) + 1),
        "sessions_violating": 0,
        "sessions": [],
    }
    assert cli("--home", home, "sessions", "repair", "--check-only").code == 0
    assert json.loads(cli("--home", home, "doctor", "--json").stdout)["notes"] == []


def test_doctor_says_transcripts_to_tidy_need_nothing_done_and_exits_0(
    home: Path, cli: Cli
) -> None:
    seed_violations(home)

    doctor = cli("--home", home, "doctor")

    # Exit 0 and words that agree with it: a note saying nothing is to be done, no
    # finding, no "finding(s)" count, and the healthy line.
    assert doctor.code == 0, doctor.stderr
    out = " ".join(doctor.stdout.split())
    assert (
        "note: 2 session(s) break role alternation or tool pairing; a repairing load "
        "tidies them when it reads them (or `hermes-repo sessions repair` now): "
        "nothing to do" in out
    )
    assert "violations 2 session(s), tidied when read: nothing to do" in out
    assert "finding(s)" not in out
    assert out.endswith("healthy: nothing to fix")
