"""The few SQLite C calls the DB-API does not offer, through ctypes.

Only used to keep a quarantined store's ``-wal`` at close
(``SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE``): Python 3.12's ``Connection.setconfig`` does it
for the standard module, but Python 3.11 and the ``pysqlite3`` module have no such
method. The C handle is read from the connection object (CPython's layout:
``PyObject_HEAD`` then ``sqlite3 *db``) and *proved* before use: ``sqlite3_db_filename``
on it must name the store's file, otherwise nothing is called.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE", "db_filename", "disable_checkpoint_on_close"]

SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE = 1006

_libs: dict[str, Any] = {}


def _library(module: ModuleType) -> Any | None:
    """The C library behind a DB-API module (the extension; dlsym follows its links)."""
    package = module.__name__.rpartition(".")[0] or module.__name__
    ext_name = f"{package}._sqlite3" if package != "sqlite3" else "_sqlite3"
    ext = sys.modules.get(ext_name)
    path = getattr(ext, "__file__", None)
    if path is None:
        return None
    if path not in _libs:
        lib = ctypes.CDLL(path)
        lib.sqlite3_libversion.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.sqlite3_db_config.restype = ctypes.c_int
        lib.sqlite3_db_config.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_int),
        ]
        _libs[path] = lib
    lib = _libs[path]
    if lib.sqlite3_libversion().decode() != module.sqlite_version:
        return None  # not the SQLite this module runs on: never poke it
    return lib


def _handle(lib: Any, dbapi_conn: Any, db_path: Path) -> int | None:
    addr = ctypes.c_void_p.from_address(id(dbapi_conn) + object.__basicsize__).value
    if not addr:
        return None
    name = lib.sqlite3_db_filename(addr, b"main")
    if name is None or os.path.realpath(name.decode()) != os.path.realpath(db_path):
        return None
    return int(addr)


def disable_checkpoint_on_close(dbapi_conn: Any, module: ModuleType, db_path: Path) -> bool:
    """Stop ``dbapi_conn`` from checkpointing when it closes; True when it is done.

    False means no safe way was found; the caller then keeps another read-only
    connection open across the close, which blocks the checkpoint (the closing handle
    cannot take the exclusive lock it needs).
    """
    setconfig = getattr(dbapi_conn, "setconfig", None)
    if setconfig is not None:  # Python 3.12+ standard module
        try:
            setconfig(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, True)
        except Exception:
            return False
        return True
    try:
        lib = _library(module)
        if lib is None:
            return False
        handle = _handle(lib, dbapi_conn, db_path)
        if handle is None:
            return False
        out = ctypes.c_int(-1)
        rc = lib.sqlite3_db_config(
            ctypes.c_void_p(handle), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, ctypes.byref(out)
        )
    except (OSError, AttributeError, ValueError):
        return False
    return rc == 0 and out.value == 1


def db_filename(dbapi_conn: Any, module: ModuleType) -> str | None:
    """The main file of an open connection, read from its C handle; None when unknown.

    For connections the DB-API refuses to query (made in another thread). Only used
    where the module's own library answers (version checked); a closed connection's
    handle is NULL and gives "".
    """
    try:
        lib = _library(module)
        if lib is None:
            return None
        addr = ctypes.c_void_p.from_address(id(dbapi_conn) + object.__basicsize__).value
        if not addr:
            return ""
        name = lib.sqlite3_db_filename(addr, b"main")
    except (OSError, AttributeError, ValueError):
        return None
    return name.decode(errors="surrogateescape") if name is not None else ""
