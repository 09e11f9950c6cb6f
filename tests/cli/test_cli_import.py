"""`hermes-repo import FILE`: the JSONL import format, idempotency and bad lines."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hermes_repo import StateStore

Cli = Callable[..., Any]
SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "sample_sessions.jsonl"


def sample_records() -> list[dict[str, Any]]:
    lines = SAMPLES.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def expected_by_session() -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for record in sample_records():
        if "session" in record:
            out[record["session"]["id"]] = []
        else:
            out[record["session_id"]].append(record["message"])
    return out


def stored(home: Path) -> dict[str, list[dict[str, Any]]]:
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        ids = [s.id for s in uow.sessions.list(limit=1000)]
        return {sid: uow.messages.list(sid, include_inactive=True) for sid in ids}


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records
        ),
        encoding="utf-8",
    )
    return path


def test_the_samples_cover_english_chinese_tool_calls_and_image_parts() -> None:
    messages = [m for ms in expected_by_session().values() for m in ms]
    assert 3 <= len(expected_by_session()) <= 5 and 40 <= len(messages) <= 80
    assert any("tool_calls" in m for m in messages)
    assert any(m["role"] == "tool" for m in messages)
    assert any(isinstance(m.get("content"), list) for m in messages)
    assert any("京都" in str(m.get("content")) for m in messages)


def test_import_of_the_samples_stores_every_session_and_message(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "import", SAMPLES, "--json")

    assert result.code == 0, result.stderr
    expected = expected_by_session()
    report = json.loads(result.stdout)
    assert report["sessions_created"] == len(expected)
    assert report["messages_inserted"] == sum(map(len, expected.values()))
    got = stored(home)
    assert set(got) == set(expected)
    for sid, messages in expected.items():
        # Byte-for-byte: what the file holds is what the store returns.
        assert got[sid] == messages


def test_imported_sessions_keep_their_declared_fields(home: Path, cli: Cli) -> None:
    assert cli("--home", home, "import", SAMPLES).code == 0
    declared = {r["session"]["id"]: r["session"] for r in sample_records() if "session" in r}

    with StateStore.open(home) as store, store.unit_of_work() as uow:
        for sid, fields in declared.items():
            row = uow.sessions.require(sid)
            for key, value in fields.items():
                assert getattr(row, key) == value, (sid, key)


def test_reimporting_the_same_file_adds_nothing(home: Path, cli: Cli) -> None:
    assert cli("--home", home, "import", SAMPLES).code == 0
    before = stored(home)

    again = cli("--home", home, "import", SAMPLES, "--json")

    assert again.code == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["messages_inserted"] == 0
    assert report["sessions_created"] == 0
    assert report["messages_skipped"] == sum(map(len, before.values()))
    assert stored(home) == before


def test_reimporting_messages_without_uids_adds_nothing(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    file = write_jsonl(
        tmp_path / "no-uids.jsonl",
        [
            {"session": {"id": "plain"}},
            {"session_id": "plain", "message": {"role": "user", "content": "again"}},
            {"session_id": "plain", "message": {"role": "assistant", "content": "ok"}},
            # The same message twice is two messages, not a duplicate.
            {"session_id": "plain", "message": {"role": "user", "content": "again"}},
        ],
    )

    first = cli("--home", home, "import", file)
    second = cli("--home", home, "import", file)

    assert first.code == second.code == 0, (first.stderr, second.stderr)
    contents = [m["content"] for m in stored(home)["plain"]]
    assert contents == ["again", "ok", "again"]


def test_a_bad_line_stops_the_import_naming_file_and_line_and_keeps_earlier_sessions(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    records: list[Any] = list(sample_records())
    # Corrupt the role of a message in the third session of the samples.
    third = [i for i, r in enumerate(records) if "session" in r][2]
    failing_sid = records[third]["session"]["id"]
    bad_index = third + 3
    records[bad_index] = {
        "session_id": failing_sid,
        "message": {**records[bad_index]["message"], "role": "robot"},
    }
    file = write_jsonl(tmp_path / "bad.jsonl", records)

    result = cli("--home", home, "import", file)

    assert result.code == 1
    assert "Traceback" not in result.stderr
    assert len(result.error_lines) == 1, result.stderr
    line = result.error_lines[0]
    assert line.startswith(f"error: {file}:{bad_index + 1}: ")
    assert "robot" in line and failing_sid in line
    got = stored(home)
    expected = expected_by_session()
    assert failing_sid not in got  # not half-imported
    earlier = [r["session"]["id"] for r in records[:third] if "session" in r]
    assert set(got) == set(earlier)
    for sid in earlier:
        assert got[sid] == expected[sid]


def test_a_failed_import_can_be_rerun_after_the_fix_without_duplicates(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    records: list[Any] = list(sample_records())
    good = write_jsonl(tmp_path / "good.jsonl", records)
    broken = write_jsonl(tmp_path / "broken.jsonl", [*records[:30], "{not json", *records[30:]])

    assert cli("--home", home, "import", broken).code == 1
    assert cli("--home", home, "import", good).code == 0

    assert stored(home) == expected_by_session()


def test_invalid_json_is_reported_with_its_line_number(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    file = write_jsonl(tmp_path / "x.jsonl", [{"session": {"id": "a"}}, "", '{"session_id": "a",'])

    result = cli("--home", home, "import", file)

    assert result.code == 1
    assert result.error_lines == [result.error_lines[0]]
    assert f"{file}:3: invalid JSON" in result.error_lines[0]
    assert "a" not in stored(home)


def test_a_message_for_an_undeclared_session_is_refused(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    file = write_jsonl(
        tmp_path / "x.jsonl",
        [
            {"session": {"id": "declared"}},
            {"session_id": "elsewhere", "message": {"role": "user", "content": "hi"}},
        ],
    )

    result = cli("--home", home, "import", file)

    assert result.code == 1
    assert f"{file}:2: unknown session 'elsewhere'" in result.stderr
    assert stored(home) == {}


def test_a_session_whose_parent_is_unknown_is_refused(home: Path, cli: Cli, tmp_path: Path) -> None:
    file = write_jsonl(
        tmp_path / "x.jsonl", [{"session": {"id": "child", "parent_session_id": "ghost"}}]
    )

    result = cli("--home", home, "import", file)

    assert result.code == 1
    assert "parent session 'ghost' does not exist" in result.stderr


def test_a_session_id_that_could_escape_the_store_folder_is_refused(
    home: Path, cli: Cli, tmp_path: Path
) -> None:
    file = write_jsonl(tmp_path / "x.jsonl", [{"session": {"id": "../../etc"}}])

    result = cli("--home", home, "import", file)

    assert result.code == 1
    assert f"{file}:1:" in result.stderr and "not allowed" in result.stderr


def test_import_help_documents_the_format_and_the_unit_of_work(cli: Cli) -> None:
    result = cli("import", "--help")

    assert result.code == 0
    text = " ".join(result.stdout.split())
    assert '{"session": {"id":' in text and '{"session_id":' in text
    assert "own unit of work" in text
    assert "Example" in text
