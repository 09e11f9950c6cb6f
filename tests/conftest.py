"""Shared fixtures: real SQLite stores built by the migrations.

The migrations run once per test session into a template; each test gets a copy (a file
copy of the closed, checkpointed template, never of a live WAL database). The seeded
template holds the search corpus of ``tests/support/fts_checks.py``, also built once.

A quarantine lasts for the process: every fixture that hands out a store folder forgets
the quarantine of its ``state.db`` after the test (``quarantine.clear``); a test that
quarantines another file names it to ``forget_quarantine``.

Both backends: a test that asks for ``backend`` runs once on SQLite and once on
PostgreSQL. On PostgreSQL it gets a fresh database (``CREATE DATABASE ... TEMPLATE`` of
one migrated once per run) exported as ``HERMES_REPO_URL``, so ``store``,
``StateStore.open(home)`` and the CLI's subprocesses all use it, while ``home`` keeps
the spool. Tests marked ``sqlite_only`` (every test under tests/faults but the
PostgreSQL ones) never run on PostgreSQL.

The one PostgreSQL selector is the ``pg`` marker: ``pytest -m pg`` runs exactly the
tests that need the server, ``pytest -m "not pg"`` never touches one. It is put on for
you on the PostgreSQL run of a ``backend`` test and on every test that uses the
``pg_server`` fixture (``pg_template`` and the fixtures built on them included); a test
that reaches the server another way (``tests.support.pg.required_url``, through
``pg_search_db`` or ``copying.pg_target``) says ``@pytest.mark.pg`` itself, and one
that does not fails, naming the marker. A ``pg`` test without ``HERMES_TEST_PG_URL``
skips before its fixtures run, naming the command that runs it; with
``HERMES_TEST_REQUIRE_PG=1`` it fails instead (``tests.support.pg.required_url``: the
one availability rule).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hermes_repo import StateStore, quarantine  # noqa: E402
from tests.support import pg  # noqa: E402
from tests.support.fts_checks import seed_store  # noqa: E402
from tests.support.pg import PgServer  # noqa: E402
from tests.support.stores import copy_store  # noqa: E402

# The suite runs on every core (pytest-xdist) next to subprocess-heavy fault tests: how
# fast hypothesis draws inputs, and how long one example takes, measure the machine's
# load, not the code. The properties and example counts stay as each test sets them.
settings.register_profile("hermes", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("hermes")

# A server named by the caller's environment must not capture the session-wide
# templates built before any per-test fixture runs.
os.environ.pop("HERMES_REPO_URL", None)

BACKENDS = ("sqlite", "postgresql")
#: The fixture through which tests reach the PostgreSQL test server.
_PG_FIXTURE = "pg_server"


def _uses_pg_server(item: pytest.Item) -> bool:
    """The test itself needs the server (its fixtures, or its own ``pg`` marker), on
    whichever run of ``backend`` it is."""
    return _PG_FIXTURE in getattr(item, "fixturenames", ()) or (
        item.get_closest_marker("pg") is not None
    )


def _on_pg_backend(item: pytest.Item) -> bool:
    callspec = getattr(item, "callspec", None)
    return callspec is not None and callspec.params.get("backend") == "postgresql"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    faults = ROOT / "tests" / "faults"
    keep, dropped = [], []
    for item in items:
        needs_server = _uses_pg_server(item)
        if faults in Path(str(item.path)).parents and not needs_server:
            item.add_marker(pytest.mark.sqlite_only)
        on_pg = _on_pg_backend(item)
        if on_pg and item.get_closest_marker("sqlite_only") is not None:
            dropped.append(item)
            continue
        if (needs_server or on_pg) and item.get_closest_marker("pg") is None:
            item.add_marker(pytest.mark.pg)
        keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Before any fixture (a session-scoped template would otherwise be built first):
    # a pg test skips (or fails, when the server is required) here, and only a pg test
    # may ask tests.support.pg for the server.
    marked = item.get_closest_marker("pg") is not None
    pg.allow_server(marked)
    if marked:
        pg.required_url()


@pytest.fixture(autouse=True)
def _isolated_hermes_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No test may ever touch the real ~/.hermes, nor a server named by the environment.
    monkeypatch.setenv("HERMES_HOME", str(tmp_path_factory.mktemp("default-home")))
    monkeypatch.delenv("HERMES_REPO_URL", raising=False)


@pytest.fixture(scope="session")
def pg_server() -> PgServer:
    """The PostgreSQL server of ``HERMES_TEST_PG_URL`` (skip, or fail when required);
    a test using it is a ``pg`` test."""
    return PgServer(pg.required_url())


@pytest.fixture(scope="session")
def pg_template(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A database migrated to head once per run: what every PostgreSQL test copies."""
    name = pg_server.new_name("template")
    url = pg_server.create(name)
    home = tmp_path_factory.mktemp("pg-template-home")
    StateStore.open(home, url=url.render_as_string(hide_password=False)).close()
    yield name
    pg_server.drop(name)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``"sqlite"`` or ``"postgresql"``: the backend of this run of the test. On
    PostgreSQL a fresh database is the store (``HERMES_REPO_URL``), dropped after."""
    if request.param == "sqlite":
        yield "sqlite"
        return
    server: PgServer = request.getfixturevalue("pg_server")
    template: str = request.getfixturevalue("pg_template")
    name = server.new_name("t")
    url = server.create(name, template=template)
    monkeypatch.setenv("HERMES_REPO_URL", url.render_as_string(hide_password=False))
    try:
        yield "postgresql"
    finally:
        server.drop(name)


@pytest.fixture(scope="session")
def template_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("template")
    StateStore.open(home).close()  # builds the schema with the migrations; close checkpoints
    assert not (home / "state.db-wal").exists() or (home / "state.db-wal").stat().st_size == 0
    return home


def _copy_for_one_test(template: Path, tmp_path: Path) -> Iterator[Path]:
    """``<tmp_path>/home`` holding a copy of ``template``; its quarantine is forgotten
    after the test."""
    dest = copy_store(template, tmp_path / "home")
    yield dest
    quarantine.clear(dest / "state.db")


@pytest.fixture
def home(tmp_path: Path, template_home: Path) -> Iterator[Path]:
    """A store folder holding a fresh copy of the migrated template (0700, state.db 0600)."""
    yield from _copy_for_one_test(template_home, tmp_path)


@pytest.fixture
def forget_quarantine() -> Iterator[Callable[[Path], Path]]:
    """``forget_quarantine(db)`` returns ``db`` and forgets its quarantine after the test:
    for a store file outside the ``home`` and ``seeded_home`` folders."""
    paths: list[Path] = []

    def forget_after_the_test(db: Path) -> Path:
        paths.append(db)
        return db

    yield forget_after_the_test
    for db in paths:
        quarantine.clear(db)


@pytest.fixture(scope="session")
def seeded_template(tmp_path_factory: pytest.TempPathFactory, template_home: Path) -> Path:
    """A closed, checkpointed store holding the search corpus, built once: copy it (as
    ``seeded_home`` does), never open it."""
    seeded = copy_store(template_home, tmp_path_factory.mktemp("seeded") / "home")
    seed_store(seeded)
    return seeded


@pytest.fixture
def seeded_home(tmp_path: Path, seeded_template: Path) -> Iterator[Path]:
    """Like ``home``, with a fresh copy of the seeded template (the search corpus)."""
    yield from _copy_for_one_test(seeded_template, tmp_path)


@pytest.fixture
def store(request: pytest.FixtureRequest, home: Path) -> Iterator[StateStore]:
    """The store in ``home``; on the backend of the run when the test asks for one."""
    if "backend" in request.fixturenames:
        request.getfixturevalue("backend")  # sets HERMES_REPO_URL first on PostgreSQL
    st = StateStore.open(home)
    try:
        yield st
    finally:
        st.close()
