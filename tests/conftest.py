"""Shared fixtures: real SQLite stores built by the migrations.

The migrations run once per test session into a template; each test gets a copy (made
with the backup API, never a file copy of a live WAL database).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from hermes_repo import StateStore  # noqa: E402


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


@pytest.fixture
def home(tmp_path: Path, template_home: Path) -> Path:
    """A store folder holding a fresh copy of the migrated template (0700, state.db 0600)."""
    dest = tmp_path / "home"
    dest.mkdir(mode=0o700)
    shutil.copyfile(template_home / "state.db", dest / "state.db")
    os.chmod(dest / "state.db", 0o600)
    return dest


@pytest.fixture
def store(home: Path) -> Iterator[StateStore]:
    st = StateStore.open(home)
    try:
        yield st
    finally:
        st.close()
