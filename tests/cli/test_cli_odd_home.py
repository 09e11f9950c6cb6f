"""The CLI with ``--home`` / ``HERMES_HOME`` naming a folder full of URL syntax."""

from __future__ import annotations

from pathlib import Path

from tests.cli.conftest import Cli
from tests.support.stores import paths_under


def test_cli_works_with_an_oddly_named_home(tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "bots" / "a?b#c%41 d é"
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_text(
        '{"session": {"id": "odd-1", "source": "cli"}}\n'
        '{"session_id": "odd-1", "message": '
        '{"role": "user", "content": "hello from an odd folder"}}\n',
        encoding="utf-8",
    )
    before = paths_under(tmp_path)
    imported = cli("--home", home, "import", jsonl)
    assert imported.code == 0, imported.stderr
    listed = cli("--home", home, "sessions", "list", "--json")
    assert listed.code == 0, listed.stderr
    assert "odd-1" in listed.stdout
    found = cli("--home", home, "search", "odd", "--json")
    assert found.code == 0, found.stderr
    assert '"session_id": "odd-1"' in found.stdout
    doctor = cli("--home", home, "doctor")
    assert "state.db" in doctor.stdout + doctor.stderr
    assert doctor.code == 0, doctor.stdout + doctor.stderr
    snap = cli("--home", home, "snapshot", "create")
    assert snap.code == 0, snap.stderr
    out = tmp_path / "bots" / "export?x#y.jsonl"
    exported = cli("--home", home, "sessions", "export", "odd-1", "-o", out)
    assert exported.code == 0, exported.stderr
    assert "hello from an odd folder" in out.read_text(encoding="utf-8")
    for args in (("db", "current"), ("db", "check"), ("sessions", "repair")):
        ran = cli("--home", home, *args)
        assert ran.code == 0, (args, ran.stdout, ran.stderr)
    # Salvage reads its private copy by file: URI, and builds the new store by path.
    recovered = tmp_path / "bots" / "rec?x#y%41"
    salvage = cli(
        "sessions", "salvage", "--source", home / "state.db", "--output", recovered / "new.db"
    )
    assert salvage.code == 0, salvage.stdout + salvage.stderr
    assert (recovered / "new.db").read_bytes()[:16] == b"SQLite format 3\x00"
    # The same home through HERMES_HOME.
    env_listed = cli("sessions", "list", "--json", env={"HERMES_HOME": str(home)})
    assert env_listed.code == 0 and "odd-1" in env_listed.stdout, env_listed.stderr
    created = paths_under(tmp_path) - before
    inside = ("bots", "bots/a?b#c%41 d é", "bots/export?x#y.jsonl", "cwd", "bots/rec?x#y%41")
    strays = sorted(
        p
        for p in created
        if p not in inside and not p.startswith(("bots/a?b#c%41 d é/", "bots/rec?x#y%41/"))
    )
    assert strays == []
    assert (home / "state.db").read_bytes()[:16] == b"SQLite format 3\x00"


def test_a_relative_home_that_looks_like_a_file_uri_stays_that_folder(
    tmp_path: Path, cli: Cli
) -> None:
    # SQLite (built with SQLITE_USE_URI) reads a file name starting with "file:" as a
    # URI: a relative home "file:odd" sent the snapshot's plain connect() to "odd".
    cwd = tmp_path / "cwd"
    upgraded = cli("--home", "file:odd", "db", "upgrade")
    assert upgraded.code == 0, upgraded.stderr
    snap = cli("--home", "file:odd", "snapshot", "create")
    assert snap.code == 0, snap.stderr
    assert list((cwd / "file:odd" / "state-snapshots").glob("*.db"))
    repaired = cli("--home", "file:odd", "sessions", "repair")
    assert repaired.code == 0, repaired.stdout + repaired.stderr
    assert sorted(p.name for p in cwd.iterdir()) == ["file:odd"]
