"""A second incident gets its own salvage folder: the doctor never offers a used one.

Before: the doctor always named ``<home>/recovered/state.db``, which ``db replace``
leaves in place; on the next incident the salvage step failed "already exists", and an
operator who carried on with ``db replace <home>/recovered/state.db`` installed the
previous incident's stale store.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from hermes_repo import StateStore
from tests.cli.conftest import run_cli_from_root
from tests.support import damage
from tests.support.incidents import advised_commands, quarantined_mid_write


def _follow_the_doctor(home: Path) -> Path:
    """Run the doctor's salvage and install commands literally; the folder they used."""
    doctor = run_cli_from_root("--home", home, "doctor")
    assert doctor.code != 0, doctor.stdout
    advice = advised_commands(doctor.stdout + doctor.stderr)
    recover = next(c for c in advice if "--output" in c)
    replace = next(c for c in advice if " db replace " in c)
    output = Path(shlex.split(recover)[shlex.split(recover).index("--output") + 1])
    assert shlex.split(replace)[-1] == str(output)  # both steps name the same file
    assert not output.exists()  # a fresh folder: the salvage step can run
    recovered = run_cli_from_root(*shlex.split(recover)[1:])
    assert recovered.code == 0, recovered.stderr
    replaced = run_cli_from_root(*shlex.split(replace)[1:])
    assert replaced.code == 0, replaced.stderr
    return output


def test_a_second_incident_is_salvaged_into_a_new_folder(home: Path) -> None:
    quarantined_mid_write(home)
    first = _follow_the_doctor(home)
    assert first.exists()  # db replace leaves the salvaged source behind

    # The installed store gets new rows, then is damaged too.
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        uow.sessions.create(id="after-the-first-incident")
        uow.commit()
    db = home / "state.db"
    damage.checkpoint_and_close(db)
    damage.damage_first_leaf(db, "messages")

    second = _follow_the_doctor(home)
    assert second != first
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        assert uow.sessions.exists("after-the-first-incident")  # not the stale store
