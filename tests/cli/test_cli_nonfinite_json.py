"""Stored infinite times (old rows, raw SQL) never make `Infinity` in JSON output."""

from __future__ import annotations

from pathlib import Path

from hermes_repo import StateStore
from tests.cli.conftest import Cli
from tests.support.strict_json import strict_json


def test_stored_infinite_times_render_as_strings_in_json_output_and_export(
    home: Path, cli: Cli
) -> None:
    with StateStore.open(home) as store:
        module = store.driver.module
        path = store.path
    con = module.connect(str(path), isolation_level=None)
    try:
        con.execute(
            "INSERT INTO sessions (id, source, started_at, ended_at, message_count) "
            "VALUES ('inf1', 'cli', ?, ?, 1)",
            (float("inf"), float("-inf")),
        )
        con.execute(
            "INSERT INTO messages (session_id, uid, role, content, timestamp) "
            "VALUES ('inf1', 'u1', 'user', 'boundless words', ?)",
            (float("-inf"),),
        )
    finally:
        con.close()
    outputs = {
        args: cli("--home", home, *args)
        for args in [
            ("sessions", "list", "--json"),
            ("sessions", "show", "inf1", "--json"),
            ("search", "boundless", "--json"),
            ("sessions", "export", "inf1"),
        ]
    }
    for args, result in outputs.items():
        assert result.code == 0, (args, result.stderr)
        assert "Infinity" not in result.stdout, args
    (listed,) = strict_json(outputs[("sessions", "list", "--json")].stdout)
    assert listed["started_at"] == "inf" or listed["started_at"] is None
    shown = strict_json(outputs[("sessions", "show", "inf1", "--json")].stdout)
    assert shown["messages"][0]["timestamp"] == "-inf"
    assert shown["messages"][0]["content"] == "boundless words"
    strict_json(outputs[("search", "boundless", "--json")].stdout)
    (exported,) = [
        strict_json(line) for line in outputs[("sessions", "export", "inf1")].stdout.splitlines()
    ]
    assert exported["timestamp"] == "-inf" and exported["content"] == "boundless words"
