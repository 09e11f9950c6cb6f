"""``hermes-repo pending`` and a spool of another store: an operator's command without
``--url`` on a server host never drains the server's spool into a SQLite file, and
``pending list`` names the store each file belongs to with the command that replays it
there; a line nested beyond the parser is listed as a bad line, never an error."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from hermes_repo import StateStore
from hermes_repo.transcript import spool
from tests.cli.conftest import Cli
from tests.support.pg import PgServer
from tests.support.spooling import stored


@pytest.fixture
def server_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    """A fresh store database (not exported: each command says --url or not)."""
    name = pg_server.new_name("own")
    yield pg_server.create(name, template=pg_template).render_as_string(hide_password=False)
    pg_server.drop(name)


def test_a_server_spool_survives_commands_without_url_and_pending_list_names_its_store(
    home: Path, server_url: str, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERMES_REPO_URL", raising=False)
    os.remove(home / "state.db")  # a server host: its home holds no SQLite file
    with StateStore.open(home, url=server_url, replay=False) as server:
        owner = spool.SpoolOwner(server.store_id, server.store_identity.target)
        messages = [{"role": "user", "content": f"m {i}", "uid": f"u{i}"} for i in range(2)]
        path = spool.append_messages(home, "s", messages, owner=owner)
        server_id = server.store_id
    before = path.read_bytes()

    # The operator forgets --url: the read finds no SQLite store there and makes none;
    # the spool stays.
    listed = cli("--home", home, "sessions", "list")
    assert listed.code == 1 and "no store at" in listed.stderr, listed.stderr
    assert not (home / "state.db").exists()
    assert path.read_bytes() == before

    result = cli("--home", home, "pending", "list", "--json")
    assert result.code == 0, result.stderr
    [row] = json.loads(result.stdout)
    [owner_row] = row["stores"]
    assert owner_row["store_id"] == server_id and owner_row["replayed_here"] is False
    assert "belongs to store" in owner_row["why_not_here"]
    command = owner_row["replay_with"]
    url = make_url(server_url)
    assert command.startswith(f"hermes-repo --home {home} --url ")
    assert command.endswith(" pending replay")
    assert f"{url.host}:{url.port}/{url.database}" in command
    table = cli("--home", home, "pending", "list")
    assert table.code == 0 and server_id[:12] in table.stdout and "--url" in table.stdout

    recover = cli("--home", home, "pending", "replay", "--json")
    assert recover.code == 0, recover.stderr
    report = json.loads(recover.stdout)
    assert report["inserted"] == 0 and report["foreign"] == 2
    assert path.read_bytes() == before

    # Following the listed command to the letter replays it where it belongs.
    done = cli("--home", home, "--url", server_url, "pending", "replay", "--json")
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["inserted"] == 2
    assert not path.exists()
    monkeypatch.setenv("HERMES_REPO_URL", server_url)
    assert [r["uid"] for r in stored(home, "s")] == ["u0", "u1"]


def test_a_line_nested_beyond_the_parser_is_a_bad_line_in_pending_list_and_doctor(
    home: Path, cli: Cli
) -> None:
    folder = spool.sessions_dir(home)
    folder.mkdir(mode=0o700, exist_ok=True)
    good = json.dumps({"_fallback_timestamp": 1.0, "message": {"role": "user", "content": "ok"}})
    deep = b'{"message": {"role": "user", "content": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}"
    (folder / "s.pending.jsonl").write_bytes(good.encode() + b"\n" + deep + b"\n")
    result = cli("--home", home, "pending", "list", "--json")
    assert result.code == 0, result.stderr
    [row] = json.loads(result.stdout)
    assert (row["records"], row["bad_lines"]) == (1, 1)
    doctor = cli("--home", home, "doctor", "--json")
    assert "Traceback" not in doctor.stderr and "RecursionError" not in doctor.stderr
    recover = cli("--home", home, "pending", "replay", "--json")
    assert recover.code == 0, recover.stderr
    assert (json.loads(recover.stdout)["inserted"], json.loads(recover.stdout)["kept"]) == (1, 1)


def test_db_current_says_the_store_id(home: Path, cli: Cli) -> None:
    with StateStore.open(home) as store:
        store_id = store.store_id
    result = cli("--home", home, "db", "current", "--json")
    assert result.code == 0, result.stderr
    assert store_id is not None and json.loads(result.stdout)["store_id"] == store_id
    assert f"store id: {store_id}" in cli("--home", home, "db", "current").stdout


def test_pending_recover_advice_on_a_server_names_its_url_without_the_password(
    home: Path, server_url: str, cli: Cli
) -> None:
    folder = spool.sessions_dir(home)
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / "s.pending.jsonl").symlink_to(home / "elsewhere.jsonl")  # never followed
    url = make_url(server_url).set(password="s3cret-pw").render_as_string(hide_password=False)
    result = cli("--home", home, "--url", url, "pending", "replay")
    assert result.code == 1
    assert "s3cret-pw" not in result.stderr
    advice = result.stderr.replace("\n", " ")
    assert "hermes-repo --url " in advice and "pending replay" in advice
    assert f"{make_url(server_url).host}:{make_url(server_url).port}" in advice
