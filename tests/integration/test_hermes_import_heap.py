"""The import keeps the garbage collector's walk to its own objects, and gives the
program's heap back as it found it.

After each unit of work the import runs a full collection (a unit's rows sit in
reference cycles until one runs); the objects alive before the import are set aside
(``gc.freeze``) so that walk does not cover the whole program's heap every time."""

from __future__ import annotations

import gc
import shutil
from pathlib import Path

from hermes_repo import StateStore

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "hermes" / "hermes_state_v16-5e01a5d.db"
)


def _source(tmp_path: Path) -> Path:
    src = tmp_path / "hermes" / "state.db"
    src.parent.mkdir()
    shutil.copyfile(FIXTURE, src)
    return src


def test_the_program_heap_is_set_aside_during_an_import_and_given_back_after(
    tmp_path: Path,
) -> None:
    assert gc.get_freeze_count() == 0
    set_aside: list[int] = []
    with StateStore.open(tmp_path / "home") as store:
        report = store.import_hermes_db(
            _source(tmp_path), progress=lambda done, total: set_aside.append(gc.get_freeze_count())
        )
    assert report.messages.imported == 200
    assert set_aside and all(n > 0 for n in set_aside)
    assert gc.get_freeze_count() == 0


def test_an_import_leaves_objects_the_program_froze_itself_frozen(tmp_path: Path) -> None:
    gc.freeze()  # a server that forks freezes its heap first
    try:
        frozen = gc.get_freeze_count()
        seen: list[int] = []
        with StateStore.open(tmp_path / "home") as store:
            store.import_hermes_db(
                _source(tmp_path), progress=lambda done, total: seen.append(gc.get_freeze_count())
            )
        # The program's frozen objects stay frozen (their count only drops as some of
        # them die): the import neither froze more of the heap nor unfroze it.
        assert seen and min(seen) > 0 and max(seen) <= frozen
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()


def test_a_failed_import_gives_the_heap_back_too(tmp_path: Path) -> None:
    src = _source(tmp_path)

    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt  # the user pressing Ctrl-C at the progress bar

    with StateStore.open(tmp_path / "home") as store:
        try:
            store.import_hermes_db(src, progress=stop)
        except KeyboardInterrupt:
            pass
        else:  # pragma: no cover - the progress callback always raises
            raise AssertionError("the import went on past its interruption")
    assert gc.get_freeze_count() == 0
