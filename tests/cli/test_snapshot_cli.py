"""`hermes-repo snapshot create|list|restore` through the installed console script."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.schema import migrate
from tests.support.processes import reaped

# The store's own SQLite: a standard `sqlite3` connection next to a pysqlite3 store in
# this process would be a second copy of SQLite, blind to the store's locks.
DRIVER = select_driver().module

Cli = Callable[..., Any]
SCRIPT = Path(sys.executable).parent / "hermes-repo"


def count(db: Path, table: str) -> int:
    conn = DRIVER.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


def assert_one_error_line(result: Any, *needles: str) -> str:
    assert result.code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.error_lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]
    return str(lines[0])


def add_session(home: Path) -> None:
    with StateStore.open(home) as store:
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli", title="after the snapshot")
            uow.commit()
        store.append_message(sid, {"role": "user", "content": "not in the snapshot"})


def create(cli: Cli, home: Path, *args: str) -> dict[str, Any]:
    result = cli("--home", home, "snapshot", "create", "--json", *args)
    assert result.code == 0, result.stderr
    snap = json.loads(result.stdout)
    assert isinstance(snap, dict)
    return snap


@contextlib.contextmanager
def holder(home: Path) -> Iterator[None]:
    """Another process with the store open until the block ends."""
    code = textwrap.dedent(
        """
        import sys
        from hermes_repo import StateStore
        store = StateStore.open(sys.argv[1])
        print("ready", flush=True)
        sys.stdin.read()
        store.close()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(home)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    with reaped([proc]):
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "ready"
            yield
        finally:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)


def test_create_list_and_restore_round_trip(imported_home: Path, cli: Cli) -> None:
    db = imported_home / "state.db"
    sessions = count(db, "sessions")

    made = cli("--home", imported_home, "snapshot", "create", "--label", "nightly", "--keep", "3")
    assert made.code == 0, made.stderr
    assert made.stdout.startswith("snapshot ")
    assert f"revision {migrate.head_revision()}" in made.stdout
    assert made.stderr == ""

    listed = cli("--home", imported_home, "snapshot", "list", "--json")
    assert listed.code == 0, listed.stderr
    [snap] = json.loads(listed.stdout)
    assert snap["ok"] and snap["label"] == "nightly"
    assert snap["revision"] == migrate.head_revision()
    assert snap["counts"]["sessions"] == sessions
    assert snap["counts"]["messages"] == count(db, "messages")
    assert snap["id"] in made.stdout

    table = cli("--home", imported_home, "snapshot", "list")
    assert table.code == 0, table.stderr
    assert snap["id"] in table.stdout and "nightly" in table.stdout
    assert migrate.head_revision() in table.stdout

    add_session(imported_home)
    assert count(db, "sessions") == sessions + 1

    restored = cli("--home", imported_home, "snapshot", "restore", snap["id"], "--yes")
    assert restored.code == 0, restored.stderr
    assert restored.stderr == ""
    assert f"restored snapshot {snap['id']}" in restored.stdout
    assert "previous store: kept as snapshot" in restored.stdout
    assert count(db, "sessions") == sessions

    after = json.loads(cli("--home", imported_home, "snapshot", "list", "--json").stdout)
    assert [s["label"] for s in after] == ["pre-restore", "nightly"]
    assert after[0]["counts"]["sessions"] == sessions + 1


def test_create_keeps_at_most_keep(home: Path, cli: Cli) -> None:
    ids = [create(cli, home, "--keep", "2")["id"] for _ in range(4)]
    listed = json.loads(cli("--home", home, "snapshot", "list", "--json").stdout)
    assert [s["id"] for s in listed] == ids[:1:-1]


def test_restore_needs_yes_without_a_terminal(home: Path, cli: Cli) -> None:
    snap = create(cli, home)
    add_session(home)
    before = count(home / "state.db", "sessions")

    result = cli("--home", home, "snapshot", "restore", snap["id"])  # stdin: /dev/null

    assert_one_error_line(result, "not a terminal", "--yes")
    assert count(home / "state.db", "sessions") == before


def _restore_on_a_terminal(home: Path, snapshot_id: str, answer: bytes) -> tuple[int, str, str]:
    """Run restore with a pseudo-terminal as stdin and type ``answer`` at the prompt."""
    leader, follower = os.openpty()
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)
    try:
        proc = subprocess.Popen(
            [str(SCRIPT), "--home", str(home), "snapshot", "restore", snapshot_id],
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        os.close(follower)
        follower = -1
        with reaped([proc]):
            os.write(leader, answer)
            out, err = proc.communicate(timeout=120)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    return proc.returncode, out.decode(), err.decode()


def test_restore_asks_on_a_terminal(home: Path, cli: Cli) -> None:
    snap = create(cli, home)
    add_session(home)
    db = home / "state.db"
    before = count(db, "sessions")

    code, out, err = _restore_on_a_terminal(home, snap["id"], b"n\n")
    assert code == 1
    assert "Replace" in out and snap["id"] in out
    assert err.strip() == "error: restore cancelled at the prompt; nothing changed"
    assert count(db, "sessions") == before

    code, out, err = _restore_on_a_terminal(home, snap["id"], b"y\n")
    assert code == 0, err
    assert f"restored snapshot {snap['id']}" in out
    assert count(db, "sessions") == before - 1


def test_restore_refusals_are_one_line_errors(home: Path, cli: Cli) -> None:
    snap = create(cli, home)

    assert_one_error_line(
        cli("--home", home, "snapshot", "restore", "20200101T000000Z-abcdef", "--yes"),
        "no snapshot 20200101T000000Z-abcdef",
        "hermes-repo snapshot list",
    )
    assert_one_error_line(
        cli("--home", home, "snapshot", "restore", "../state", "--yes"), "not a snapshot id"
    )
    with holder(home):
        assert_one_error_line(
            cli("--home", home, "snapshot", "restore", snap["id"], "--yes"),
            "another process",
            f"hermes-repo --home {shlex.quote(str(home))} snapshot restore {snap['id']}",
        )

    manifest = Path(snap["manifest"])
    data = json.loads(manifest.read_text())
    data["revision"] = "ffffffffffff"
    manifest.write_text(json.dumps(data))
    assert_one_error_line(
        cli("--home", home, "snapshot", "restore", snap["id"], "--yes"),
        "schema revision ffffffffffff",
        migrate.head_revision(),
    )

    other = create(cli, home)
    with open(other["path"], "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))
    assert_one_error_line(
        cli("--home", home, "snapshot", "restore", other["id"], "--yes"), "sha256"
    )


def test_create_errors_are_one_line(tmp_path: Path, cli: Cli) -> None:
    empty = tmp_path / "no-store"
    empty.mkdir()
    assert_one_error_line(cli("--home", empty, "snapshot", "create"), "no store")
    assert not (empty / "state.db").exists()

    usage = cli("--home", empty, "snapshot", "create", "--keep", "0")
    assert usage.code == 2


def test_list_without_snapshots_says_how_to_take_one(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "snapshot", "list")
    assert result.code == 0, result.stderr
    assert "no snapshots" in result.stdout and "snapshot create" in result.stdout
    assert json.loads(cli("--home", home, "snapshot", "list", "--json").stdout) == []


def test_restore_json_reports_where_the_previous_store_went(home: Path, cli: Cli) -> None:
    snap = create(cli, home)
    result = cli("--home", home, "snapshot", "restore", snap["id"], "--yes", "--json")
    assert result.code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["restored"]["id"] == snap["id"]
    assert data["safety_snapshot"]["label"] == "pre-restore"
    assert data["moved_aside"] == []
    assert data["counts"] == snap["counts"]


def test_every_snapshot_command_help_has_a_summary_and_an_example(cli: Cli) -> None:
    for command in (["snapshot"], ["snapshot", "create"], ["snapshot", "list"]):
        result = cli(*command, "--help")
        assert result.code == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[2].strip(), command
        assert "hermes-repo " in result.stdout.split("Example:", 1)[1], command
    restore = cli("snapshot", "restore", "--help")
    assert "--yes" in restore.stdout and "Example:" in restore.stdout
