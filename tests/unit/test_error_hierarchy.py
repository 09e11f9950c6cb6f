"""Every error the package defines is a HermesRepoError, exported from ``hermes_repo``.

A caller catches one base class for everything the store raises, and finds each class
by name at the top of the package. Walks every module, so a new error class that
forgets either is caught here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import click
import pytest

import hermes_repo
from hermes_repo import HermesRepoError, driver_errors, errors
from hermes_repo.errors import DatabaseBusyError, ErrorKind, StorageFullError
from hermes_repo.holders import HolderLock
from hermes_repo.maintenance.snapshots.folder import folder_lock, require_space


def _defined_errors() -> list[tuple[str, type[BaseException]]]:
    found = []
    for info in pkgutil.walk_packages(hermes_repo.__path__, "hermes_repo."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found.append((f"{module.__name__}.{name}", obj))
    return found


def test_the_walk_finds_the_errors_of_every_layer() -> None:
    names = {qual.rsplit(".", 1)[1] for qual, _ in _defined_errors()}
    assert {"HermesRepoError", "StoreHeldError", "RepairError", "DoctorReadError"} <= names


def test_every_error_class_is_a_hermes_repo_error() -> None:
    outside = [
        qual
        for qual, cls in _defined_errors()
        if not issubclass(cls, HermesRepoError)
        # click's own exceptions carry the CLI's exit codes; `_`-prefixed classes are
        # private control flow that never leaves its module.
        and not issubclass(cls, click.ClickException)
        and not qual.rsplit(".", 1)[1].startswith("_")
    ]
    assert outside == []


def test_every_library_error_class_is_exported() -> None:
    missing = [
        qual
        for qual, cls in _defined_errors()
        if issubclass(cls, HermesRepoError)
        # The CLI sits on top of the library: the package root cannot import it.
        and not qual.startswith("hermes_repo.cli.")
        and not qual.rsplit(".", 1)[1].startswith("_")
        and getattr(hermes_repo, cls.__name__, None) is not cls
    ]
    assert missing == []
    exported = set(hermes_repo.__all__)
    named = {cls.__name__ for _, cls in _defined_errors() if issubclass(cls, HermesRepoError)}
    assert {n for n in named if hasattr(hermes_repo, n)} <= exported


def test_store_held_is_still_a_runtime_error() -> None:
    # Callers that caught it as a RuntimeError before it joined the hierarchy still do.
    assert issubclass(hermes_repo.StoreHeldError, RuntimeError)
    assert issubclass(hermes_repo.RepairStoreHeldError, hermes_repo.StoreHeldError)
    assert issubclass(hermes_repo.SnapshotStoreHeldError, hermes_repo.StoreHeldError)


def _errors_module_classes() -> dict[str, type[BaseException]]:
    return {
        name: obj
        for name, obj in vars(errors).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == errors.__name__
    }


def test_every_library_error_is_defined_in_the_errors_module() -> None:
    # One module holds the hierarchy: a reader finds every class, and its parents, there.
    elsewhere = [
        qual
        for qual, cls in _defined_errors()
        if issubclass(cls, HermesRepoError)
        and not qual.startswith("hermes_repo.errors.")
        and not qual.startswith("hermes_repo.cli.")
    ]
    assert elsewhere == []


def test_every_class_of_the_errors_module_is_exported_by_name() -> None:
    classes = _errors_module_classes()
    errors_only = {n for n, c in classes.items() if issubclass(c, HermesRepoError)}
    assert len(errors_only) >= 45
    assert sorted(errors_only - set(errors.__all__)) == []
    assert sorted(errors_only - set(hermes_repo.__all__)) == []
    assert [n for n in errors_only if getattr(hermes_repo, n) is not classes[n]] == []


# Where each class was defined before it joined the errors module: importing it from
# there keeps working, and gives the very same class.
OLD_HOMES = {
    "hermes_repo.holders": ("StoreHeldError",),
    "hermes_repo.schema.backup": ("BackupSpaceError",),
    "hermes_repo.walcheck": ("WalSaveError",),
    "hermes_repo.salvage": ("SalvageError", "RecoveryError"),
    "hermes_repo.salvage.pagescan": ("PageError",),
    "hermes_repo.ops.doctor": ("DoctorReadError", "JournalFileError"),
    "hermes_repo.ops.snapshots": (
        "SnapshotError",
        "SnapshotNotFoundError",
        "SnapshotSpaceError",
        "SnapshotVerifyError",
        "SnapshotSchemaError",
        "SnapshotStoreHeldError",
        "SnapshotBusyError",
    ),
    "hermes_repo.ops.replace": ("ReplaceError",),
    "hermes_repo.ops.repair": ("RepairError", "RepairStoreHeldError"),
    "hermes_repo.transcript.reconcile": ("ReconcileConflict",),
    "hermes_repo.repositories.search_paging": ("SearchLimitError", "SearchCursorError"),
    "hermes_repo.transfer": ("JsonlImportError",),
    "hermes_repo.transfer.copy": ("CopyError", "CopyConflictError", "CopyVerificationError"),
}


# RecoveryError warns there (a deprecated name: see test_deprecated_names).
@pytest.mark.filterwarnings("ignore:.*RecoveryError is deprecated:DeprecationWarning")
def test_the_old_import_paths_give_the_same_classes() -> None:
    moved = [
        f"{module}.{name}"
        for module, names in OLD_HOMES.items()
        for name in names
        if getattr(importlib.import_module(module), name) is not getattr(errors, name, None)
        # RecoveryError is SalvageError's older name, an alias kept where it was.
        and not (name == "RecoveryError" and errors.SalvageError is hermes_repo.RecoveryError)
    ]
    assert moved == []


def test_space_errors_are_storage_full_and_busy_errors_are_database_busy() -> None:
    for space in (errors.BackupSpaceError, errors.SnapshotSpaceError):
        assert issubclass(space, errors.StorageFullError)
    for busy in (
        errors.StoreHeldError,
        errors.SnapshotStoreHeldError,
        errors.RepairStoreHeldError,
        errors.SnapshotBusyError,
    ):
        assert issubclass(busy, errors.DatabaseBusyError)
    # Each keeps the family it had: a snapshot error is still caught as one.
    assert issubclass(errors.SnapshotSpaceError, errors.SnapshotError)
    assert issubclass(errors.SnapshotBusyError, errors.SnapshotError)
    assert issubclass(errors.RepairStoreHeldError, errors.RepairError)


def test_every_space_error_is_storage_full_and_every_busy_one_database_busy() -> None:
    # Found by name, so a new "no room" or "someone else has it" error cannot be left
    # outside the family a caller's one except clause catches.
    classes = _errors_module_classes()
    space = {n for n in classes if "Space" in n or "Full" in n}
    busy = {n for n in classes if "Busy" in n or "Held" in n}
    assert {"BackupSpaceError", "SnapshotSpaceError"} <= space
    assert {"StoreHeldError", "SnapshotBusyError", "RepairStoreHeldError"} <= busy
    assert sorted(n for n in space if not issubclass(classes[n], StorageFullError)) == []
    assert sorted(n for n in busy if not issubclass(classes[n], DatabaseBusyError)) == []


def test_the_driver_error_functions_still_resolve_from_their_old_module() -> None:
    # classify, translate and the rest moved to hermes_repo.driver_errors; the errors
    # module keeps the classes, and gives the moved names for one release.
    assert "classify" not in vars(errors) and "translate" not in vars(errors)
    moved = driver_errors.__all__
    assert [n for n in moved if getattr(errors, n) is not getattr(driver_errors, n)] == []


def test_a_store_held_by_another_holder_is_caught_as_database_busy(tmp_path: Path) -> None:

    db_path = tmp_path / "state.db"
    other, me = HolderLock(db_path), HolderLock(db_path)
    other.acquire_shared()
    try:
        with pytest.raises(DatabaseBusyError) as caught, me.exclusive():
            pass
    finally:
        other.release()
        me.release()
    assert isinstance(caught.value, hermes_repo.StoreHeldError)
    assert caught.value.kind is ErrorKind.TRANSIENT
    assert caught.value.elapsed_s is None


def test_a_busy_snapshot_folder_is_caught_as_database_busy(tmp_path: Path) -> None:

    with (
        folder_lock(tmp_path),
        pytest.raises(DatabaseBusyError) as caught,
        folder_lock(tmp_path, wait_s=0),
    ):
        pass
    assert isinstance(caught.value, hermes_repo.SnapshotBusyError)
    assert "another snapshot create or restore is running" in str(caught.value)


def test_no_room_for_a_snapshot_is_caught_as_storage_full(tmp_path: Path) -> None:

    # More bytes than any disk has: the real free-space check refuses it.
    with pytest.raises(StorageFullError) as caught:
        require_space([(tmp_path, 1 << 62, "the copy")])
    assert isinstance(caught.value, hermes_repo.SnapshotSpaceError)
    assert caught.value.kind is ErrorKind.DISK
