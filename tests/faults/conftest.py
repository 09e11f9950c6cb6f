"""Fixtures of the fault tests."""

from __future__ import annotations

import importlib
import types

import pytest

# Both SQLite builds a store can run on: the fault tools must work on each.
DRIVER_MODULES = {"stdlib": "sqlite3", "pysqlite3": "pysqlite3.dbapi2"}


@pytest.fixture(params=sorted(DRIVER_MODULES), scope="module")
def mod(request: pytest.FixtureRequest) -> types.ModuleType:
    """Each SQLite driver module in turn (pysqlite3 is skipped where it is not installed)."""
    name = DRIVER_MODULES[request.param]
    if request.param == "pysqlite3":
        module: types.ModuleType = pytest.importorskip(name)
        return module
    return importlib.import_module(name)
