"""Real I/O faults for SQLite, injected through the unix VFS system-call table.

SQLite's unix VFS performs every file read and write through a table of
system-call pointers that can be replaced at run time with
``sqlite3_vfs.xSetSystemCall`` (the mechanism behind SQLite's own
``test_syscall.c`` and ``sysfault.test``). :class:`FaultInjector` drives that
table from ctypes, so a test can make the N-th read or write of a given file
fail with a chosen ``errno``, or SIGKILL the process instead of (or halfway
through) that write. No compiler, root, or custom VFS is needed. Linux only
(file paths come from ``/proc/self/fd``).

Observed mappings (3.40.1 and 3.53.4): ENOSPC on a write gives SQLITE_FULL
(13); any other write errno gives SQLITE_IOERR_WRITE (778); EIO on a read
gives SQLITE_CORRUPT (11) for a b-tree page but SQLITE_IOERR_CORRUPTFS (8458)
for the first read of a new connection; EPERM on a read gives
SQLITE_IOERR_READ (266). ``pysqlite3`` reports only the primary code (10 for
every IOERR). After FULL or IOERR the whole transaction has been rolled back.

It works for both drivers:

* the stdlib ``sqlite3`` module (its ``_sqlite3`` extension links a shared
  ``libsqlite3``);
* ``pysqlite3.dbapi2`` (SQLite is statically linked into the extension).

In both cases the extension file of the given module is opened with
``ctypes.CDLL``: ``dlopen`` returns the image that is already loaded and
``dlsym`` on it also searches its dependencies, so the hooks land in the exact
SQLite copy that the module uses. The library's ``sqlite3_libversion`` must
equal ``module.sqlite_version``, and after installation a probe write through
the module must be seen by the hooks; otherwise installation is refused.

**Process-global.** The system-call table belongs to the SQLite library, not to
a connection: while installed, the hooks see every file of every connection
of that library in the process (rules select files by path). At most one
injector per library can be installed at a time. Install and uninstall while
no other thread is inside SQLite. An ``atexit`` handler uninstalls whatever is
still installed (freed callback thunks would otherwise crash the interpreter
at exit), and every thunk is kept alive for the life of the process.

Example::

    with FaultInjector(sqlite3) as fi:
        fi.fail("write", endswith("-wal"), errno.ENOSPC)
        ...  # the next write to a -wal file fails: SQLITE_FULL (13)
"""

from __future__ import annotations

import atexit
import ctypes
import errno
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, Literal, NoReturn

__all__ = [
    "Call",
    "FaultInjector",
    "FaultInjectorError",
    "Op",
    "PathPred",
    "Rule",
    "endswith",
    "path_is",
    "under",
]

Op = Literal["read", "write"]
Action = Literal["fail", "kill", "torn"]
PathPred = Callable[[str], bool]

_SSIZE = ctypes.c_ssize_t
_OFF = ctypes.c_int64  # off_t / off64_t on 64-bit Linux
_PROTO_RW = ctypes.CFUNCTYPE(_SSIZE, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, use_errno=True)
_PROTO_PRW = ctypes.CFUNCTYPE(
    _SSIZE, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, _OFF, use_errno=True
)

# name in the unix VFS syscall table -> (operation, positioned?)
_SYSCALLS: dict[str, tuple[Op, bool]] = {
    "pread": ("read", True),
    "pread64": ("read", True),
    "read": ("read", False),
    "pwrite": ("write", True),
    "pwrite64": ("write", True),
    "write": ("write", False),
}


class _Vfs(ctypes.Structure):
    pass


_SET_SYSCALL = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(_Vfs), ctypes.c_char_p, ctypes.c_void_p
)
_GET_SYSCALL = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.POINTER(_Vfs), ctypes.c_char_p)
_VFS_METHODS_V1_V2 = (
    "xOpen",
    "xDelete",
    "xAccess",
    "xFullPathname",
    "xDlOpen",
    "xDlError",
    "xDlSym",
    "xDlClose",
    "xRandomness",
    "xSleep",
    "xCurrentTime",
    "xGetLastError",
    "xCurrentTimeInt64",
)
_Vfs._fields_ = [
    ("iVersion", ctypes.c_int),
    ("szOsFile", ctypes.c_int),
    ("mxPathname", ctypes.c_int),
    ("pNext", ctypes.c_void_p),
    ("zName", ctypes.c_char_p),
    ("pAppData", ctypes.c_void_p),
    *((name, ctypes.c_void_p) for name in _VFS_METHODS_V1_V2),
    ("xSetSystemCall", _SET_SYSCALL),
    ("xGetSystemCall", _GET_SYSCALL),
    ("xNextSystemCall", ctypes.c_void_p),
]

_SQLITE_OK = 0

# Thunks handed to SQLite are never freed (SQLite may still hold a pointer).
_KEEPALIVE: list[object] = []
# Installed injectors by VFS address: one per SQLite library.
_INSTALLED: dict[int, FaultInjector] = {}
_ATEXIT_REGISTERED = False


class FaultInjectorError(RuntimeError):
    """The injector cannot be used with this module, or a hook failed."""


@dataclass(frozen=True)
class Call:
    """One intercepted system call."""

    op: Op
    syscall: str
    path: str
    nbytes: int
    offset: int | None


@dataclass
class Rule:
    """A fault rule; ``seen`` and ``fired`` are updated by the hooks."""

    op: Op
    path_pred: PathPred
    action: Action
    errno_: int = 0
    after: int = 0
    count: int | None = 1
    seen: int = 0
    fired: int = 0

    def _hit(self) -> bool:
        index = self.seen
        self.seen += 1
        if index < self.after:
            return False
        return self.count is None or index < self.after + self.count


def endswith(*suffixes: str) -> PathPred:
    """A path predicate: the file name ends with one of ``suffixes``."""
    return lambda path: path.endswith(suffixes)


def path_is(*paths: str | os.PathLike[str]) -> PathPred:
    """A path predicate: exactly one of ``paths`` (compared after realpath)."""
    wanted = frozenset(os.path.realpath(p) for p in paths)
    return lambda path: path in wanted


def under(directory: str | os.PathLike[str]) -> PathPred:
    """A path predicate: any file below ``directory``."""
    prefix = os.path.join(os.path.realpath(directory), "")
    return lambda path: path.startswith(prefix)


def _fd_path(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"<fd {fd}>"


def _sigkill() -> NoReturn:
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(128 + signal.SIGKILL)  # not reached: SIGKILL cannot be blocked


def _extension_file(module: ModuleType) -> str:
    connect = getattr(module, "connect", None)
    ext = sys.modules.get(getattr(connect, "__module__", "") or "")
    path = getattr(ext, "__file__", None)
    if not isinstance(path, str) or not path.endswith((".so", ".pyd", ".dylib")):
        raise FaultInjectorError(f"cannot find the C extension behind {module.__name__}.connect")
    return path


def _load_library(module: ModuleType) -> ctypes.CDLL:
    """The SQLite library used by ``module``, checked by version."""
    version = getattr(module, "sqlite_version", None)
    if not isinstance(version, str):
        raise FaultInjectorError(f"{module.__name__} has no sqlite_version")
    lib = ctypes.CDLL(_extension_file(module))
    try:
        libversion = lib.sqlite3_libversion
        vfs_find = lib.sqlite3_vfs_find
    except AttributeError as exc:
        raise FaultInjectorError(f"no SQLite symbols reachable: {exc}") from exc
    libversion.restype = ctypes.c_char_p
    libversion.argtypes = []
    vfs_find.restype = ctypes.POINTER(_Vfs)
    vfs_find.argtypes = [ctypes.c_char_p]
    found = libversion().decode()
    if found != version:
        raise FaultInjectorError(
            f"ctypes found SQLite {found}, but {module.__name__} uses {version}"
        )
    return lib


def _uninstall_all() -> None:
    for injector in list(_INSTALLED.values()):
        injector.uninstall()


class FaultInjector:
    """Fault rules applied to the reads and writes of one SQLite library.

    Rules match calls by operation and by the real path of the file
    (``/proc/self/fd`` link). A call counts toward every rule it matches; the
    first rule (in insertion order) whose window covers the call decides what
    happens to it. See the module docstring for the process-global caveats.
    """

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self._lib = _load_library(module)
        self._vfs = self._lib.sqlite3_vfs_find(b"unix")
        if not self._vfs:
            raise FaultInjectorError("no 'unix' VFS in this SQLite build")
        if self._vfs.contents.iVersion < 3:
            raise FaultInjectorError("the unix VFS has no xSetSystemCall")
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._log: list[Call] = []
        self._originals: dict[str, int] = {}
        self._hook_errors: list[BaseException] = []
        self._installed = False

    # -- installation ---------------------------------------------------

    @property
    def installed(self) -> bool:
        return self._installed

    def install(self) -> FaultInjector:
        """Replace the read/write system calls of the unix VFS with hooks."""
        global _ATEXIT_REGISTERED
        if self._installed:
            return self
        key = ctypes.addressof(self._vfs.contents)
        if key in _INSTALLED:
            raise FaultInjectorError(
                f"a FaultInjector is already installed for SQLite {self.module.sqlite_version}"
            )
        if not _ATEXIT_REGISTERED:
            atexit.register(_uninstall_all)
            _ATEXIT_REGISTERED = True
        vfs = self._vfs.contents
        for name, (op, positioned) in _SYSCALLS.items():
            original = vfs.xGetSystemCall(self._vfs, name.encode())
            if not original:
                continue  # not compiled into this build
            thunk = self._make_hook(name, op, positioned, original)
            _KEEPALIVE.append(thunk)
            rc = vfs.xSetSystemCall(self._vfs, name.encode(), ctypes.cast(thunk, ctypes.c_void_p))
            if rc != _SQLITE_OK:
                self._restore()
                raise FaultInjectorError(f"xSetSystemCall({name}) returned {rc}")
            self._originals[name] = original
        if not {"read", "write"} <= {_SYSCALLS[n][0] for n in self._originals}:
            self._restore()
            raise FaultInjectorError("could not hook both reads and writes")
        _INSTALLED[key] = self
        self._installed = True
        try:
            self._probe()
        except BaseException:
            self.uninstall()
            raise
        return self

    def uninstall(self) -> None:
        """Restore the original system calls (idempotent)."""
        if not self._installed:
            return
        self._restore()
        _INSTALLED.pop(ctypes.addressof(self._vfs.contents), None)
        self._installed = False

    def _restore(self) -> None:
        vfs = self._vfs.contents
        for name, original in self._originals.items():
            vfs.xSetSystemCall(self._vfs, name.encode(), original)
        self._originals.clear()

    def _probe(self) -> None:
        """Prove that writes made through the module reach these hooks."""
        with tempfile.TemporaryDirectory() as tmp:
            db = os.path.join(tmp, "probe.db")
            con = self.module.connect(db)
            try:
                con.execute("CREATE TABLE probe(x)")
                con.commit()
            finally:
                con.close()
            seen = self.calls("write", under(tmp))
        with self._lock:
            tmp_pred = under(tmp)
            self._log = [c for c in self._log if not tmp_pred(c.path)]
        if not seen:
            raise FaultInjectorError(f"hooks did not see writes made by {self.module.__name__}")

    def __enter__(self) -> FaultInjector:
        return self.install()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.uninstall()
        if exc_type is None:
            self.raise_hook_errors()

    # -- rules ------------------------------------------------------------

    def fail(
        self,
        op: Op,
        path_pred: PathPred,
        errno_: int,
        after: int = 0,
        count: int | None = 1,
    ) -> Rule:
        """Fail the (after+1)-th matching call with ``errno_``, ``count`` times.

        ``count=None`` fails every matching call from then on (persistent).
        """
        if count is not None and count < 1:
            raise ValueError("count must be >= 1 or None")
        return self._add(Rule(op, path_pred, "fail", errno_, after, count))

    def kill_at(self, op: Op, path_pred: PathPred, after: int = 0) -> Rule:
        """SIGKILL the process instead of performing the (after+1)-th matching call."""
        return self._add(Rule(op, path_pred, "kill", 0, after, 1))

    def torn_at(self, op: Op, path_pred: PathPred, after: int = 0) -> Rule:
        """Write the first half of the (after+1)-th matching write, then SIGKILL."""
        if op != "write":
            raise ValueError("torn_at only applies to writes")
        return self._add(Rule(op, path_pred, "torn", 0, after, 1))

    def _add(self, rule: Rule) -> Rule:
        if rule.op not in ("read", "write"):
            raise ValueError(f"unknown op {rule.op!r}")
        if rule.after < 0:
            raise ValueError("after must be >= 0")
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Drop all rules and the call log (the hooks stay installed)."""
        with self._lock:
            self._rules.clear()
            self._log.clear()

    # -- observation ------------------------------------------------------

    def calls(self, op: Op, path_pred: PathPred | None = None) -> int:
        """How many ``op`` calls (matching ``path_pred``) were seen since install/clear."""
        with self._lock:
            log = list(self._log)
        return sum(1 for c in log if c.op == op and (path_pred is None or path_pred(c.path)))

    @property
    def log(self) -> tuple[Call, ...]:
        """Every intercepted call since install/clear, in order."""
        with self._lock:
            return tuple(self._log)

    def raise_hook_errors(self) -> None:
        """Re-raise an exception that escaped a rule predicate inside a hook.

        Such a call is failed with EIO (never passed through silently).
        """
        if self._hook_errors:
            errors, self._hook_errors = self._hook_errors, []
            raise FaultInjectorError("exception inside a fault hook") from errors[0]

    # -- hooks ------------------------------------------------------------

    def _decide(self, call: Call) -> Rule | None:
        with self._lock:
            self._log.append(call)
            chosen: Rule | None = None
            for rule in self._rules:
                hit = rule.op == call.op and rule.path_pred(call.path) and rule._hit()
                if hit and chosen is None:
                    chosen = rule
                    rule.fired += 1
            return chosen

    def _make_hook(self, name: str, op: Op, positioned: bool, original: int) -> Any:
        proto = _PROTO_PRW if positioned else _PROTO_RW
        real = proto(original)

        def hook(fd: int, buf: int | None, nbytes: int, *offset: int) -> int:
            try:
                call = Call(op, name, _fd_path(fd), nbytes, offset[0] if offset else None)
                rule = self._decide(call)
            except BaseException as exc:  # never let an error pass silently
                self._hook_errors.append(exc)
                ctypes.set_errno(errno.EIO)
                return -1
            if rule is None:
                return int(real(fd, buf, nbytes, *offset))
            if rule.action == "fail":
                ctypes.set_errno(rule.errno_)
                return -1
            if rule.action == "torn":
                real(fd, buf, nbytes // 2, *offset)
            _sigkill()

        return proto(hook)
