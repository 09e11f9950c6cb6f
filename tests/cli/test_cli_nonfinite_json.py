"""Stored infinite times (old rows, raw SQL) never make `Infinity` in JSON output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hermes_repo import StateStore
from tests.cli.conftest import Cli


def _strict(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


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
    (listed,) = _strict(outputs[("sessions", "list", "--json")].stdout)
    assert listed["started_at"] == "inf" or listed["started_at"] is None
    shown = _strict(outputs[("sessions", "show", "inf1", "--json")].stdout)
    assert shown["messages"][0]["timestamp"] == "-inf"
    assert shown["messages"][0]["content"] == "boundless words"
    _strict(outputs[("search", "boundless", "--json")].stdout)
    (exported,) = [
        _strict(line) for line in outputs[("sessions", "export", "inf1")].stdout.splitlines()
    ]
    assert exported["timestamp"] == "-inf" and exported["content"] == "boundless words"
