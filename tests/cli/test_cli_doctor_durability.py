"""`doctor` on PostgreSQL says whether commits wait for a synchronous standby.

The single server is real (the test cluster), and so is a primary with a streaming
standby (``pg_basebackup -R`` on loopback ports), first asynchronous, then named
synchronous, then stopped. :func:`classify` is also checked on every combination of
settings, on values a real server reports for a session's ``synchronous_commit``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from hermes_repo.engine_pg import resolve_url
from hermes_repo.ops.doctor.durability import (
    DurabilityFacts,
    Standby,
    check_durability,
    classify,
    durability_findings,
)
from hermes_repo.ops.doctor.server import diagnose_server
from hermes_repo.ops.doctor.server_context import ServerContext
from tests.cli.conftest import Cli
from tests.support import pg
from tests.support.pg import PgServer

SYNC = Standby("standby1", "streaming", "sync")
ASYNC = Standby("standby1", "streaming", "async")
POTENTIAL = Standby("standby2", "streaming", "potential")
HIDDEN = Standby("standby1", None, None)  # a user without pg_monitor sees no state


@pytest.mark.parametrize(
    ("commit", "names", "recovery", "standbys", "verdict"),
    [
        ("on", "", False, [], "single-server"),
        ("off", "", False, [], "single-server"),
        ("on", "standby1", False, [], "sync-standby-missing"),
        ("local", "standby1", False, [], "single-server"),  # commits do not wait
        ("on", "", False, [ASYNC], "asynchronous"),
        ("local", "standby1", False, [SYNC], "asynchronous"),
        ("off", "FIRST 1 (standby1)", False, [SYNC], "asynchronous"),
        ("on", "standby1", False, [SYNC], "synchronous"),
        ("remote_apply", "ANY 1 (standby1, standby2)", False, [SYNC, POTENTIAL], "synchronous"),
        ("on", "standby9", False, [ASYNC], "sync-standby-missing"),  # names none streaming
        ("on", "standby1", False, [HIDDEN], "unknown"),
        ("on", "", True, [], "standby"),
    ],
)
def test_the_verdict_follows_the_settings_and_the_standbys(
    commit: str, names: str, recovery: bool, standbys: list[Standby], verdict: str
) -> None:
    assert classify(commit, names, recovery, standbys) == verdict


@pytest.fixture
def store_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    name = pg_server.new_name("durability")
    url = pg_server.create(name, template=pg_template).render_as_string(hide_password=False)
    yield url
    pg_server.drop(name)


def test_one_server_is_a_note_not_a_finding(store_url: str, tmp_path: Path) -> None:
    target = resolve_url(store_url)
    assert target is not None

    report = diagnose_server(tmp_path, target)

    facts = report.to_dict()["durability"]
    assert facts["verdict"] == "single-server" and facts["standbys"] == []
    assert facts["in_recovery"] is False and facts["commits_wait_for_standby"] is False
    assert not [f for f in report.findings if f.code in {"failover-may-lose-writes"}]
    assert any("failover is not protected" in note for note in report.notes)
    assert report.healthy


@pytest.mark.parametrize(
    ("commit", "verdict", "finding"),
    [
        ("local", "asynchronous", "failover-may-lose-writes"),
        ("off", "asynchronous", "failover-may-lose-writes"),
        ("on", "synchronous", None),
        ("remote_apply", "synchronous", None),
    ],
)
def test_a_commit_that_does_not_wait_is_a_warning_naming_the_setting(
    store_url: str, tmp_path: Path, commit: str, verdict: str, finding: str | None
) -> None:
    # The settings are the server's own answer for a session with this
    # synchronous_commit; the standby is the row a primary lists for a sync standby.
    target = resolve_url(store_url)
    assert target is not None
    ctx = ServerContext(tmp_path, target)
    try:
        ctx.server_connection().exec_driver_sql(f"SET synchronous_commit = {commit}")
        ((read_commit, names, recovery),) = ctx.rows(
            "SELECT current_setting('synchronous_commit'), "
            "current_setting('synchronous_standby_names'), pg_is_in_recovery()"
        )
        single = check_durability(ctx)
    finally:
        ctx.close()
    assert read_commit == commit and names == "" and recovery is False
    assert single.section is not None and single.findings == []  # one server: a note

    got = classify(read_commit, "standby1", recovery, [SYNC])
    assert got == verdict
    facts = DurabilityFacts(read_commit, "standby1", recovery, [SYNC], got)
    found = durability_findings(facts)
    assert [f.code for f in found] == ([finding] if finding else [])
    for f in found:
        assert f.severity == "warning"
        assert "synchronous_commit = on" in f.fix and "synchronous_standby_names" in f.fix
        assert f"synchronous_commit is {commit}" in f.summary


def test_an_empty_standby_list_with_streaming_standbys_names_the_setting() -> None:
    facts = DurabilityFacts("on", "", False, [ASYNC], "asynchronous")
    (finding,) = durability_findings(facts)
    assert "synchronous_standby_names is empty" in finding.summary
    assert "synchronous_standby_names = 'FIRST 1 (standby1)'" in finding.fix


def test_doctor_json_has_the_durability_key(cli: Cli, store_url: str, tmp_path: Path) -> None:
    result = cli("--home", tmp_path, "--url", store_url, "doctor", "--json")
    report = json.loads(result.stdout)
    assert report["durability"]["verdict"] == "single-server"
    assert set(report["durability"]) >= {
        "synchronous_commit",
        "synchronous_standby_names",
        "in_recovery",
        "standbys",
        "verdict",
        "commits_wait_for_standby",
    }
    plain = cli("--home", tmp_path, "--url", store_url, "doctor")
    assert "durability" in plain.stdout and "note: one PostgreSQL server" in plain.stdout


def _sql(url: str, *statements: str) -> None:
    plain = url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def _verdict(url: str, home: Path) -> dict[str, Any]:
    target = resolve_url(url)
    assert target is not None
    report = diagnose_server(home, target).to_dict()
    durability: dict[str, Any] = report["durability"]
    # The database holds no store (the store's own findings are not this test's).
    ours = {"sync-standby-missing", "failover-may-lose-writes", "durability-unreadable"}
    durability["codes"] = [f["code"] for f in report["findings"] if f["code"] in ours]
    return durability


@pytest.mark.pg
def test_a_real_standby_missing_then_synchronous_then_not_waited_for(tmp_path: Path) -> None:
    # Each step is made deterministic without a clock: settings change by a restart or
    # by a database setting (read by every new session), and the standby is known to
    # stream once a commit that waits for it has returned.
    primary, standby = tmp_path / "primary", tmp_path / "standby"
    primary_port, standby_port = pg.free_port(), pg.free_port()
    url = pg.start(primary, primary_port)
    try:
        _sql(
            url,
            "ALTER SYSTEM SET synchronous_standby_names = 'standby1'",
            # The throwaway server runs with synchronous_commit=off on its command line:
            # a database setting overrides it for the sessions of that database.
            "ALTER DATABASE postgres SET synchronous_commit = on",
        )
        pg.stop(primary)
        pg.start(primary, primary_port)

        # A synchronous standby named, none connected: every commit would wait.
        found = _verdict(url, tmp_path)
        assert found["verdict"] == "sync-standby-missing", found
        assert found["codes"] == ["sync-standby-missing"]

        standby.mkdir()
        pg._hand_to_server_user(standby)
        conninfo = f"host=127.0.0.1 port={primary_port} user=postgres application_name=standby1"
        subprocess.run(
            pg._as_server_user(
                [
                    pg.find_binary("pg_basebackup"),
                    "-d",
                    conninfo,
                    "-D",
                    str(standby / "data"),
                    "-R",
                    "-X",
                    "stream",
                ]
            ),
            check=True,
            capture_output=True,
        )
        pg.start(standby, standby_port)  # standby.signal: it streams from the primary
        _sql(url, "CREATE TABLE durability_probe ()")  # returns once standby1 has it

        found = _verdict(url, tmp_path)
        assert found["verdict"] == "synchronous" and found["codes"] == [], found
        assert found["commits_wait_for_standby"] is True
        assert [(s["name"], s["sync_state"]) for s in found["standbys"]] == [("standby1", "sync")]

        # Commits that no longer wait (synchronous_commit = local): a failover may lose
        # what was acknowledged, and the warning names the settings.
        _sql(url, "ALTER DATABASE postgres SET synchronous_commit = local")
        found = _verdict(url, tmp_path)
        assert found["verdict"] == "asynchronous", found
        assert found["codes"] == ["failover-may-lose-writes"]
    finally:
        pg.stop(standby)
        pg.stop(primary)
