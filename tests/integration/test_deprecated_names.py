"""Every name renamed so that one word names one thing still works for one release,
and says so with a DeprecationWarning naming its replacement; the new names are silent.

replay = the spool replay, salvage = reading rows out of a damaged store, hold file =
where a writer keeps messages while the store is damaged, rebuild = the guarded search
index rebuild, ``uow.orm`` = the unit's ORM session (``uow.sessions``: the repository).
"""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path

import pytest
from sqlalchemy import text

import hermes_repo
from hermes_repo import ReplayReport, SalvageError, StateStore, TranscriptWriter
from hermes_repo.ops.doctor import salvage_commands
from hermes_repo.schema.fts import integrity
from hermes_repo.transcript import spool
from hermes_repo.walcheck import DamagedWal
from tests.support.spooling import pending_files, stored


def _spool(home: Path, sid: str, n: int) -> None:
    # No store: every message goes to the session's spool file, to be replayed.
    TranscriptWriter(home, sid).flush([{"role": "user", "content": f"m{i}"} for i in range(n)])


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        ("hermes_repo", "RecoveryReport", ReplayReport),
        ("hermes_repo", "RecoveryError", SalvageError),
        ("hermes_repo.salvage", "RecoveryError", SalvageError),
        ("hermes_repo.salvage.report", "RecoveryError", SalvageError),
        ("hermes_repo.transcript.spool", "SALVAGE_SUFFIX", spool.HOLD_SUFFIX),
        ("hermes_repo.transcript.spool.names", "SALVAGE_SUFFIX", spool.HOLD_SUFFIX),
        ("hermes_repo.schema.fts.rebuild", "recreate", integrity.recreate),
        ("hermes_repo.schema.fts.rebuild", "integrity_errors", integrity.integrity_errors),
        ("hermes_repo.schema.fts.rebuild", "reset_shadow_tables", integrity.reset_shadow_tables),
        ("hermes_repo.ops.doctor", "recover_commands", salvage_commands),
        ("hermes_repo.ops.doctor.fixes", "recover_commands", salvage_commands),
    ],
)
def test_an_old_module_name_gives_the_new_object_and_warns(
    module: str, old: str, new: object
) -> None:
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is deprecated") as seen:
        got = getattr(mod, old)
    assert got is new or got == new
    # The warning points at the line that used the old name, not at the package.
    assert seen[0].filename == __file__


def test_the_damaged_wal_names_its_salvage_command_under_both_names(tmp_path: Path) -> None:
    found = DamagedWal(tmp_path / "state.db-wal", "bad magic", 32, None, tmp_path / "saved-wal")
    with pytest.warns(DeprecationWarning, match=r"DamagedWal\.salvage_command\(\)"):
        old = found.recover_command()  # type: ignore[attr-defined]
    # The same commands (each call names a new output folder, stamped with its time).
    assert old.split("recovered-")[0] == found.salvage_command().split("recovered-")[0]
    assert "sessions salvage --source" in old and "sessions recover" not in old


def test_a_second_use_of_an_old_name_warns_again() -> None:
    # Never cached into the module: every program that uses it is told.
    for _ in range(2):
        with pytest.warns(DeprecationWarning, match="ReplayReport"):
            assert hermes_repo.RecoveryReport is ReplayReport  # type: ignore[attr-defined]


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchName"):
        hermes_repo.NoSuchName  # type: ignore[attr-defined]  # noqa: B018


def test_open_recover_false_is_replay_false_with_a_warning(home: Path) -> None:
    _spool(home, "s", 2)
    with pytest.warns(DeprecationWarning, match=r"open\(replay=\)"):
        store = StateStore.open(home, recover=False)
    with store:
        assert store.last_replay is None
        assert pending_files(home) != []  # not replayed: the old keyword was obeyed
    with StateStore.open(home, replay=False) as store:
        assert pending_files(home) != []


def test_recover_pending_replays_like_replay_pending_and_warns(home: Path) -> None:
    _spool(home, "s", 3)
    with StateStore.open(home, replay=False) as store:
        with pytest.warns(DeprecationWarning, match=r"replay_pending\(\)") as seen:
            report = store.recover_pending()  # type: ignore[attr-defined]
        assert seen[0].filename == __file__
        assert (report.files, report.inserted) == (1, 3)
        assert [r["content"] for r in stored(home, "s")] == ["m0", "m1", "m2"]
        assert pending_files(home) == []


def test_last_recovery_is_last_replay_with_a_warning(home: Path) -> None:
    _spool(home, "s", 1)
    with StateStore.open(home) as store:
        assert store.last_replay is not None and store.last_replay.inserted == 1
        with pytest.warns(DeprecationWarning, match="last_replay"):
            assert store.last_recovery is store.last_replay  # type: ignore[attr-defined]


def test_uow_session_is_uow_orm_with_a_warning(home: Path) -> None:
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        sid = uow.sessions.create(source="cli")
        with pytest.warns(DeprecationWarning, match=r"UnitOfWork\.orm"):
            orm = uow.session  # type: ignore[attr-defined]
        assert orm is uow.orm
        count = orm.execute(text("SELECT count(*) FROM sessions WHERE id = :s"), {"s": sid})
        assert count.scalar_one() == 1


def test_the_new_names_do_not_warn(home: Path) -> None:
    _spool(home, "s", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert hermes_repo.ReplayReport is ReplayReport
        assert hermes_repo.SalvageError is SalvageError
        assert spool.HOLD_SUFFIX == ".jsonl"
        with StateStore.open(home, replay=False) as store:
            assert store.replay_pending().inserted == 1
            assert store.last_replay is None
            with store.unit_of_work() as uow:
                uow.orm.execute(text("SELECT 1"))
