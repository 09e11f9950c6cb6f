"""``check_only``: the repair's diagnosis, writing nothing (no lock, no backup, no rebuild)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.exc import DBAPIError

from ... import quarantine
from ...driver_errors import describe
from ...engine import Driver, select_driver
from ...errors import HermesRepoError
from ...holders import HolderLock
from ...maintenance.fts_rebuild import REPAIR_COMMAND
from ...schema.backup import read_only_engine
from ...store import StateStore
from ..doctor import STOP_FIRST, diagnose
from ..transcript_check import check_transcripts
from .verdict import VALUES, RepairReport, command, damage_of, salvage_steps

__all__ = ["diagnose_only"]


@contextlib.contextmanager
def _read_only_store(db_path: Path, driver: Driver) -> Iterator[StateStore]:
    """A store on ``mode=ro`` connections: the transcript check can never write.

    Not :meth:`StateStore.open`, which may rebuild the index. Its holder lock is never
    taken: a check must work while a gateway runs.
    """
    engine = read_only_engine(db_path, driver)
    guard = quarantine.install(engine, db_path, driver)
    store = StateStore(db_path.parent, engine, driver, HolderLock(db_path), guard)
    try:
        yield store
    finally:
        store.close()


def diagnose_only(db_path: Path) -> RepairReport:
    """The report of ``repair_store(check_only=True)``: what a repair would find."""
    doctor = diagnose(db_path.parent)
    damage = damage_of(doctor)
    report = RepairReport(
        path=str(db_path),
        check_only=True,
        damage=damage,
        doctor=doctor,
        counts_before=dict(doctor.store.counts),
    )
    readable = damage != "structural" and doctor.store.at_head
    if readable:
        try:
            with _read_only_store(db_path, select_driver()) as store:
                report.transcript_check = check_transcripts(store)
        except (HermesRepoError, DBAPIError) as exc:
            report.notes.append(f"transcripts not checked: {describe(exc)}")
    else:
        report.notes.append("transcripts not checked: the store cannot be read as a store")
    errors = [f for f in doctor.findings if f.severity == "error"]
    transcripts_ok = report.transcript_check is None or report.transcript_check.ok
    # Unreadable values are a warning for the doctor (nothing is lost), and a change
    # for the repair: the check says so, as the repair would do it.
    values = any(f.code == VALUES for f in doctor.findings)
    report.ok = not errors and transcripts_ok and readable and not values
    repair = command(db_path, REPAIR_COMMAND)
    if damage == "structural":
        report.summary = (
            "the database file itself is damaged: `sessions repair` will not repair it in "
            "place; salvage it"
        )
        report.next_steps = salvage_steps(db_path)
    elif (
        damage == "index"
        or not transcripts_ok
        or any(f.code == "schema-meta-missing" for f in errors)
        or values
    ):
        report.summary = "the store needs a repair"
        report.next_steps = [f"{STOP_FIRST} `{repair}`"]
    elif errors:
        report.summary = "the store has problems a repair does not fix: see the findings"
        report.next_steps = [f.fix for f in errors]
    else:
        report.summary = "nothing to repair"
    return report
