"""``hermes-repo doctor`` through the installed console script."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hermes_repo import StateStore
from tests.cli.conftest import Cli
from tests.support import damage
from tests.support.fts_checks import MODULE, SEED_SESSION, seed_store


def test_healthy_store_exits_zero(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "doctor")
    assert result.code == 0, result.stderr
    assert "healthy: nothing to fix" in result.stdout
    assert "full-text search" in result.stdout and "all 6 present" in result.stdout

    as_json = cli("--home", home, "doctor", "--json")
    assert as_json.code == 0
    report = json.loads(as_json.stdout)
    assert report["healthy"] is True and report["findings"] == []
    assert report["store"]["at_head"] is True
    assert report["fts"]["stale"] is False


@pytest.mark.subprocess_cli  # the doctor names the holders other than itself: another process
def test_detached_index_exits_one_and_prints_the_repair_command(home: Path, cli: Cli) -> None:
    seed_store(home)
    damage.fts_delete_averages(home / "state.db", module=MODULE)
    with StateStore.open(home) as store:  # held open while the doctor runs
        store.append_message(SEED_SESSION, {"role": "user", "content": "after the damage"})
        result = cli("--home", home, "doctor")
        as_json = cli("--home", home, "doctor", "--json")

    command = f"hermes-repo --home {home} sessions repair"
    assert result.code == 1
    assert "[fts-stale]" in result.stdout
    assert f"fix: stop every process using the store (e.g. the gateway), then run `{command}`" in (
        result.stdout
    )
    assert as_json.code == 1
    report = json.loads(as_json.stdout)
    # This test process holds the store: the doctor names it, since the repair needs
    # it stopped (a holder alone, with nothing to fix, is no finding).
    assert [f["code"] for f in report["findings"]] == ["fts-stale", "store-held"]
    assert str(os.getpid()) in report["findings"][1]["summary"]
    assert report["holders"]["pids"] == [os.getpid()]
    assert command in report["findings"][0]["fix"]
    assert report["fts"]["stale"] is True
    assert not any(report["fts"]["triggers"].values())


def test_missing_store_is_reported_not_created(tmp_path: Path, cli: Cli) -> None:
    home = tmp_path / "nowhere"
    home.mkdir()
    result = cli("--home", home, "doctor", "--json")
    assert result.code == 1
    assert [f["code"] for f in json.loads(result.stdout)["findings"]] == ["store-missing"]
    assert list(home.iterdir()) == []
