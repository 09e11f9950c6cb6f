"""A store whose own metadata is damaged: a dropped ``state_meta`` or ``alembic_version``,
or an index the models have and the file lost.

Before, ``doctor`` called such a store healthy while every open raised a raw
``sqlalchemy.exc.OperationalError``, and ``sessions repair`` snapshotted the broken
store and then recommended restoring that same snapshot.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from hermes_repo import SchemaMismatchError, StateStore
from hermes_repo.engine import select_driver
from hermes_repo.errors import HermesRepoError
from hermes_repo.maintenance.snapshots import list_snapshots
from hermes_repo.ops.doctor import diagnose
from tests.cli.conftest import run_cli_from_root
from tests.support.stores import fill_session

MODULE = select_driver().module


def _execute(home: Path, sql: str) -> None:
    con = MODULE.connect(str(home / "state.db"), isolation_level=None)
    try:
        con.execute(sql)
    finally:
        con.close()


def _tables(path: Path) -> set[str]:
    con = MODULE.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    try:
        return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        con.close()


def test_a_dropped_state_meta_is_found_refused_at_open_and_recreated_by_repair(
    home: Path,
) -> None:
    fill_session(home, "kept", 25, "kept")
    _execute(home, "DROP TABLE state_meta")

    report = diagnose(home)
    assert not report.healthy
    [finding] = report.findings
    assert finding.code == "schema-meta-missing" and "sessions repair" in finding.fix
    with pytest.raises(SchemaMismatchError, match=r"state_meta is missing.*sessions repair"):
        StateStore.open(home)

    repaired = run_cli_from_root("--home", home, "sessions", "repair")
    assert repaired.code == 0, repaired.stdout + repaired.stderr
    assert "recreated the missing state_meta" in repaired.stdout
    assert "table state_meta recreated" in repaired.stdout
    # Any snapshot the repair took is of the repaired store, never of the broken one.
    for snap in list_snapshots(home):
        assert "state_meta" in _tables(snap.path)
    assert diagnose(home).healthy
    with StateStore.open(home) as store:
        assert len(store.load_conversation("kept").messages) == 25


def test_a_dropped_alembic_version_is_refused_with_the_salvage_and_never_snapshotted(
    home: Path,
) -> None:
    fill_session(home, "kept", 25, "kept")
    _execute(home, "DROP TABLE alembic_version")

    report = diagnose(home)
    assert "schema-unversioned" in [f.code for f in report.findings]
    with pytest.raises(HermesRepoError, match=r"no schema revision.*sessions salvage"):
        StateStore.open(home)

    refused = run_cli_from_root("--home", home, "sessions", "repair")
    assert refused.code == 1
    [line] = refused.error_lines
    assert "nothing was changed" in line and "db replace" in line
    assert list_snapshots(home) == [] and not list(home.glob("*.bak"))

    # The advice, followed literally, ends with a sound store holding the rows.
    for cmd in [c for c in line.split("`") if c.startswith("hermes-repo ")][:2]:
        done = run_cli_from_root(*shlex.split(cmd)[1:])
        assert done.code == 0, done.stderr
    assert diagnose(home).healthy
    with StateStore.open(home) as store:
        assert len(store.load_conversation("kept").messages) == 25


def test_doctor_compares_the_schema_with_the_models(home: Path) -> None:
    fill_session(home, "kept", 25, "kept")
    _execute(home, "DROP INDEX ix_messages_session_id_id")

    report = diagnose(home)

    [finding] = [f for f in report.findings if f.code == "schema-drift"]
    assert "ix_messages_session_id_id" in finding.summary
    assert "db replace" in finding.fix
    refused = run_cli_from_root("--home", home, "sessions", "repair")
    assert refused.code == 1 and "nothing was changed" in refused.stderr
