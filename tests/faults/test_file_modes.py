"""Transcripts are private, whatever the umask: a store installed by ``db replace`` (and
the old files it sets aside) and a repair's backup are 0600, even when the new file
was world-readable and the process's umask lets new files be so."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from hermes_repo import StateStore
from hermes_repo.ops.repair import repair_store
from hermes_repo.ops.replace import replace_store
from tests.support.stores import file_mode, session_with_messages


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that hides nothing: a file created without an explicit mode is 0666."""
    before = os.umask(0)
    try:
        yield
    finally:
        os.umask(before)


@pytest.mark.usefixtures("open_umask")
def test_a_replaced_store_and_the_files_set_aside_are_private(home: Path, tmp_path: Path) -> None:
    with StateStore.open(home) as store:
        session_with_messages(store, ["before"], "old")
    other = tmp_path / "other"
    with StateStore.open(other) as store:
        session_with_messages(store, ["after"], "new")
    new = other / "state.db"
    new.chmod(0o644)  # e.g. copied in by hand

    result = replace_store(home, new)

    assert file_mode(home / "state.db") == 0o600
    assert result.aside and all(file_mode(Path(p)) == 0o600 for p in result.aside)
    with StateStore.open(home) as store:
        assert [s.id for s in store.list_sessions()] == ["new"]


@pytest.mark.usefixtures("open_umask")
def test_a_repair_backup_is_private(home: Path) -> None:
    with StateStore.open(home) as store:
        session_with_messages(store, ["x"], "s")
        with store.engine.begin() as conn:  # a value the repair rewrites: a change
            conn.execute(text("UPDATE messages SET timestamp = 'yesterday'"))

    report = repair_store(home)

    assert report.ok, report.summary
    assert report.backup is not None and file_mode(report.backup) == 0o600
