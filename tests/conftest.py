"""Shared fixtures: real SQLite stores built by the migrations.

The migrations run once per test session into a template; each test gets a copy (a file
copy of the closed, checkpointed template, never of a live WAL database). The seeded
template holds the search corpus of ``tests/support/fts_checks.py``, also built once.

A quarantine lasts for the process: every fixture that hands out a store folder forgets
the quarantine of its ``state.db`` after the test (``quarantine.clear``); a test that
quarantines another file names it to ``forget_quarantine``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hermes_repo import StateStore, quarantine  # noqa: E402
from tests.support.fts_checks import seed_store  # noqa: E402
from tests.support.stores import copy_store  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_hermes_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No test may ever touch the real ~/.hermes.
    monkeypatch.setenv("HERMES_HOME", str(tmp_path_factory.mktemp("default-home")))


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
def store(home: Path) -> Iterator[StateStore]:
    st = StateStore.open(home)
    try:
        yield st
    finally:
        st.close()
