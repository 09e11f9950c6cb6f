"""Every error the package defines is a HermesRepoError, exported from ``hermes_repo``.

A caller catches one base class for everything the store raises, and finds each class
by name at the top of the package. Walks every module, so a new error class that
forgets either is caught here.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import click

import hermes_repo
from hermes_repo import HermesRepoError


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
