"""A ``hermes-repo db copy`` killed (SIGKILL) mid-copy leaves a target that says it is
unfinished: ``doctor`` reports ``copy-unfinished`` with the command that finishes it,
that very command completes the copy and clears the mark, and at the kill the target's
session counters count only the rows it holds. SQLite to SQLite and to PostgreSQL."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy.engine import make_url

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.ops.doctor import check_copy, diagnose
from hermes_repo.schema.copy_mark import COPIED_FROM_KEY, COPY_MARK_KEY, STORE_ID_KEY
from tests.cli.conftest import SCRIPT, Cli
from tests.support.copying import fill_plain_store, pg_target, store_rows
from tests.support.processes import reaped

SESSIONS, PER_SESSION, BATCH = 4, 60, 4
TOTAL = SESSIONS * PER_SESSION
# Counters that claim other than the active rows the store holds.
DRIFT_SQL = (
    "SELECT count(*) FROM sessions s WHERE s.message_count <> "
    "(SELECT count(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1)"
)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    home = tmp_path / "source"
    with StateStore.open(home) as store:
        fill_plain_store(store, sessions=SESSIONS, per_session=PER_SESSION)
        with store.unit_of_work() as uow:
            uow.meta.set(STORE_ID_KEY, "source-store-1")
            uow.commit()
    return home


def _sqlite_reader(home: Path) -> Callable[[str], Any]:
    """A read-only query on the target file, once it exists and has its tables."""
    module = select_driver().module
    conns: list[Any] = []

    def query(sql: str) -> Any:
        if not conns:
            conns.append(module.connect(f"file:{home / 'state.db'}?mode=ro", uri=True))
        return conns[0].execute(sql).fetchall()[0][0]

    return query


def _pg_reader(url: str) -> Callable[[str], Any]:
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)

    def query(sql: str) -> Any:
        with psycopg.connect(plain, autocommit=True) as conn:
            row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
            assert row is not None
            return row[0]

    return query


def _kill_once_rows_arrive(args: list[str], count: Callable[[str], Any]) -> None:
    """Run ``hermes-repo ARGS`` and SIGKILL it as soon as the target holds a message."""
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("PYTHONPATH", None)
    procs: list[subprocess.Popen[bytes]] = []
    with reaped(procs):
        proc = subprocess.Popen(
            [str(SCRIPT), *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        procs.append(proc)
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "the copy ended before it could be killed"
            assert time.monotonic() < deadline, "the target never got a message"
            try:
                if count("SELECT count(*) FROM messages") > 0:
                    break
            except Exception:  # the target is still being created: not yet
                pass
        proc.kill()
        proc.wait()


def _doctor(cli: Cli, *where: str | Path) -> dict[str, Any]:
    result = cli(*where, "doctor", "--json")
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def _meta(query: Callable[[str], Any], key: str) -> Any:
    return query(f"SELECT max(value) FROM state_meta WHERE key = '{key}'")


def _prove_interrupted_then_finished(
    cli: Cli,
    source: Path,
    to: str,
    query: Callable[[str], Any],
    doctor_where: tuple[str | Path, ...],
    target: StateStore | Callable[[], StateStore],
    while_unfinished: Callable[[], None] = lambda: None,
) -> None:
    _kill_once_rows_arrive(
        ["--home", str(source), "db", "copy", "--to", to, "--batch-size", str(BATCH)], query
    )

    partial = query("SELECT count(*) FROM messages")
    assert 0 < partial < TOTAL  # a real half-done copy
    assert query(DRIFT_SQL) == 0  # no counter claims a row the target lacks
    assert _meta(query, COPY_MARK_KEY) is not None

    report = _doctor(cli, *doctor_where)
    (finding,) = [f for f in report["findings"] if f["code"] == "copy-unfinished"]
    command = report["copy"]["command"]
    assert command == (
        f"hermes-repo --home {shlex.quote(str(source))} db copy --to {shlex.quote(to)} "
        f"--batch-size {BATCH}"
    )
    assert f"`{command}`" in finding["fix"]
    assert report["copy"]["source_store_id"] == "source-store-1"
    while_unfinished()

    # The operator follows the fix to the letter.
    argv = shlex.split(command)
    assert argv[0] == "hermes-repo"
    finished = cli(*argv[1:])
    assert finished.code == 0, finished.stderr

    # What the doctor reads (one CLI start costs seconds on a busy machine).
    assert _meta(query, COPY_MARK_KEY) is None
    assert json.loads(_meta(query, COPIED_FROM_KEY)) == ["source-store-1"]
    assert query(DRIFT_SQL) == 0
    with StateStore.open(source) as src:
        dst = target() if callable(target) else target
        try:
            assert store_rows(dst) == store_rows(src)
        finally:
            if callable(target):
                dst.close()


def test_a_killed_copy_into_sqlite_is_reported_and_the_printed_command_finishes_it(
    tmp_path: Path, cli: Cli, source: Path
) -> None:
    home = tmp_path / "target"

    def health_says_so() -> None:
        with closing(StateStore.open(home, replay=False)) as store:
            notes = store.health().notes
        assert any("has not finished" in n and "db copy" in n for n in notes), notes
        assert diagnose(home, checks=[check_copy]).findings[0].code == "copy-unfinished"

    _prove_interrupted_then_finished(
        cli,
        source,
        str(home),
        _sqlite_reader(home),
        ("--home", home),
        lambda: StateStore.open(home, replay=False),
        health_says_so,
    )
    assert diagnose(home, checks=[check_copy]).healthy


@pytest.mark.pg
def test_a_killed_copy_into_postgresql_is_reported_and_the_printed_command_finishes_it(
    tmp_path: Path, cli: Cli, source: Path
) -> None:
    with pg_target() as pg:
        _prove_interrupted_then_finished(
            cli,
            source,
            pg.url,
            _pg_reader(pg.url),
            ("--home", tmp_path / "spool", "--url", pg.url),
            pg.store,
        )


@pytest.fixture(autouse=True)
def _script_present() -> Iterator[None]:
    if not SCRIPT.exists():
        pytest.fail(f"the console script is not installed next to {sys.executable}")
    yield
