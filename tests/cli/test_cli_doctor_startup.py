"""`doctor` on a sound store at head loads no SQLAlchemy, no Alembic and no repair.

The drift comparison is Alembic's, run only when the store's schema is not the one the
migrations build (its fingerprint, :data:`HEAD_FINGERPRINTS`, frozen here and checked
against a store the migrations built): a sound store is compared with that value and
nothing heavier. Each run is a fresh interpreter whose ``sys.modules`` is inspected:
what is loaded is what costs CPU at start (numbers: benchmarks/bench_cli_start.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.ops.doctor.context import DoctorContext
from hermes_repo.ops.doctor.schema import HEAD_FINGERPRINTS, schema_fingerprint
from hermes_repo.schema import migrate
from hermes_repo.schema.backup import read_only_engine
from hermes_repo.schema.head import HEAD_REVISION

#: What a doctor of a sound store at head never loads: it reads through the driver,
#: so not even SQLAlchemy Core (as `sessions list`).
NOT_FOR_DOCTOR = (
    "alembic",
    "sqlalchemy",
    "hermes_repo.models",
    "hermes_repo.store",
    "hermes_repo.schema.migrate",
    "hermes_repo.ops.repair",
    "hermes_repo.hermes_import",
    "psycopg",
)


def _doctor_loads(home: Path, *args: str) -> tuple[list[str], dict[str, object]]:
    """The modules among :data:`NOT_FOR_DOCTOR` that `doctor --json` loaded, and its
    report."""
    code = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        from hermes_repo.cli import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                main.main(["--home", {str(home)!r}, "doctor", "--json", *{args!r}],
                          standalone_mode=False)
            except SystemExit:
                pass
        watch = {NOT_FOR_DOCTOR!r}
        print(json.dumps({{
            "loaded": sorted(
                m for m in sys.modules if any(m == w or m.startswith(w + ".") for w in watch)
            ),
            "report": json.loads(out.getvalue()),
        }}))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    return result["loaded"], result["report"]


def _small_store(home: Path) -> None:
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        sid = uow.sessions.create(source="cli", title="plan")
        uow.messages.append(sid, {"role": "user", "content": "a checkpoint of the plan"})
        uow.messages.append(sid, {"role": "assistant", "content": "noted"})
        uow.commit()


def test_doctor_of_a_sound_store_loads_no_sqlalchemy_alembic_or_repair(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _small_store(home)

    loaded, report = _doctor_loads(home)

    assert loaded == []
    assert report["healthy"] is True
    assert report["schema"] == {"drift": None}  # the comparison still ran and said so
    assert report["store"]["at_head"] is True


def test_a_store_that_differs_from_the_migrations_gets_alembics_comparison(
    tmp_path: Path,
) -> None:
    # Guards the probe and the fallback: a changed schema loads Alembic, which names
    # the drift, exactly as before the fingerprint.
    home = tmp_path / "home"
    _small_store(home)
    con = select_driver().module.connect(str(home / "state.db"), isolation_level=None)
    try:
        con.execute("DROP INDEX ix_sessions_started_at")
    finally:
        con.close()

    loaded, report = _doctor_loads(home)

    assert "alembic" in loaded
    codes = [f["code"] for f in report["findings"]]  # type: ignore[union-attr]
    assert "schema-drift" in codes
    assert "ix_sessions_started_at" in str(report["schema"])


def test_the_frozen_fingerprint_is_the_one_of_a_store_the_migrations_build(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    with StateStore.open(home):
        pass  # built at head by the migrations
    ctx = DoctorContext(home, select_driver())
    try:
        built = schema_fingerprint(ctx)
    finally:
        ctx.close()
    # A new migration moves the head: its fingerprint must be recorded here (the value
    # to put in HEAD_FINGERPRINTS is in the message).
    assert migrate.alembic_head() == HEAD_REVISION
    assert HEAD_FINGERPRINTS.get(HEAD_REVISION) == built, (
        f"HEAD_FINGERPRINTS[{HEAD_REVISION!r}] should be {built!r}"
    )
    # And the shortcut is sound: Alembic finds no drift on that very schema.
    engine = read_only_engine(home / "state.db", select_driver())
    try:
        assert migrate.check(engine) is None
    finally:
        engine.dispose()


def test_the_fingerprint_changes_with_any_schema_object(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with StateStore.open(home):
        pass
    before = _fingerprint(home)
    con = select_driver().module.connect(str(home / "state.db"), isolation_level=None)
    try:
        con.execute("ALTER TABLE sessions ADD COLUMN added_by_hand TEXT")
    finally:
        con.close()
    assert _fingerprint(home) != before


def _fingerprint(home: Path) -> str:
    ctx = DoctorContext(home, select_driver())
    try:
        return schema_fingerprint(ctx)
    finally:
        ctx.close()
