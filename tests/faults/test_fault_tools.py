"""Self-tests of the fault-injection and file-damage test tools.

They run against a small raw schema (no hermes_repo code) with both drivers:
the stdlib ``sqlite3`` and ``pysqlite3`` (a newer, statically linked SQLite).
Observed differences between the two builds are spelled out in the
expectation tables below. Note that ``pysqlite3`` reports *primary* result
codes only (IOERR_WRITE 778 arrives as 10, CORRUPT_VTAB 267 as 11), while the
stdlib module on Python 3.11 reports extended codes.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import damage
from tests.support.faultinject import (
    FaultInjector,
    FaultInjectorError,
    endswith,
    path_is,
    under,
)
from tests.support.spooling import fts_integrity_errors

REPO_ROOT = Path(__file__).resolve().parents[2]
N_ROWS = 300  # FTS case C needs a few hundred rows (research, section 1)

SCHEMA = """
CREATE TABLE sessions(id TEXT PRIMARY KEY, source TEXT NOT NULL);
CREATE TABLE messages(
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT
);
CREATE INDEX ix_messages_session ON messages(session_id);
CREATE VIRTUAL TABLE messages_fts USING fts5(
    content, content='messages', content_rowid='id', tokenize='unicode61'
);
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content)
    VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
"""

_WORDS = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf",
    "hotel", "india", "juliet", "kilo", "lima", "mike", "november",
    "oscar", "papa", "quebec", "romeo", "sierra", "tango",
]  # fmt: skip

INSERT_MESSAGE = "INSERT INTO messages(session_id, role, content) VALUES (?, ?, ?)"


def _content(i: int) -> str:
    words = [_WORDS[(i * 7 + k * 3) % len(_WORDS)] for k in range(12)]
    return " ".join(["common", *words, f"w{i}"])


# -- drivers (the ``mod`` fixture is in tests/faults/conftest.py) --------------


@functools.cache
def _reports_extended_codes(mod: types.ModuleType) -> bool:
    con = mod.connect(":memory:")
    try:
        con.execute("CREATE TABLE u(x UNIQUE)")
        con.execute("INSERT INTO u VALUES (1)")
        try:
            con.execute("INSERT INTO u VALUES (1)")
        except mod.IntegrityError as exc:
            return bool(exc.sqlite_errorcode == 2067)  # SQLITE_CONSTRAINT_UNIQUE
    finally:
        con.close()
    raise AssertionError("duplicate insert did not fail")


def code_for(mod: types.ModuleType, extended: int) -> int:
    """The code ``mod`` reports for SQLite result code ``extended``."""
    return extended if _reports_extended_codes(mod) else extended & 0xFF


def legacy_fts5(mod: types.ModuleType) -> bool:
    """FTS5 behaves as observed on 3.40.1 (vs 3.53.4; boundary not bisected)."""
    return bool(mod.sqlite_version_info < (3, 44, 0))


# -- databases ----------------------------------------------------------------


def make_db(mod: types.ModuleType, path: Path, n: int = N_ROWS) -> None:
    con = mod.connect(str(path), isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.executescript(SCHEMA)
        con.execute("BEGIN IMMEDIATE")
        con.executemany("INSERT INTO sessions VALUES (?, 'cli')", [(f"s{i}",) for i in range(5)])
        con.executemany(
            INSERT_MESSAGE,
            [(f"s{i % 5}", "user", _content(i)) for i in range(1, n + 1)],
        )
        con.execute("COMMIT")
    finally:
        con.close()


@pytest.fixture(scope="module")
def template(mod: types.ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp(f"tpl-{mod.__name__}") / "template.db"
    make_db(mod, path)
    damage.checkpoint_and_close(path, module=mod)
    return path


@pytest.fixture
def db(template: Path, tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    shutil.copyfile(template, path)
    return path


@pytest.fixture
def fi(mod: types.ModuleType) -> Iterator[FaultInjector]:
    with FaultInjector(mod) as injector:
        yield injector


def connect(mod: types.ModuleType, path: Path) -> Any:
    return mod.connect(str(path), isolation_level=None)


def scalar(mod: types.ModuleType, path: Path, sql: str) -> Any:
    con = connect(mod, path)
    try:
        return con.execute(sql).fetchone()[0]
    finally:
        con.close()


def write_unit(con: Any, n: int = 20, tag: str = "unit") -> None:
    con.execute("BEGIN IMMEDIATE")
    con.executemany(
        INSERT_MESSAGE,
        [("s1", "assistant", f"{tag} row{i} common") for i in range(n)],
    )
    con.execute("COMMIT")


def assert_healthy(mod: types.ModuleType, path: Path) -> None:
    """integrity_check ok, FTS integrity-check ok, MATCH count == LIKE count."""
    con = connect(mod, path)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert fts_integrity_errors(con, ["messages_fts"]) == {}
        matched = con.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'common'"
        ).fetchone()[0]
        liked = con.execute(
            "SELECT count(*) FROM messages WHERE content LIKE '%common%'"
        ).fetchone()[0]
        assert matched == liked
    finally:
        con.close()


def quick_check_ok(mod: types.ModuleType, path: Path, table: str) -> bool:
    """PRAGMA quick_check(table) over all its rows.

    On damage 3.40 raises SQLITE_CORRUPT at the first step, while 3.53 first
    returns a "*** in database main ***" row and raises on the next step.
    """
    con = connect(mod, path)
    try:
        return bool(con.execute(f"PRAGMA quick_check({table})").fetchall() == [("ok",)])
    except mod.DatabaseError:
        return False
    finally:
        con.close()


def raises(mod: types.ModuleType, fn: Callable[[], object]) -> Any:
    with pytest.raises(mod.Error) as info:
        fn()
    return info.value


# -- FaultInjector: write faults ----------------------------------------------


def test_enospc_on_wal_write_is_sqlite_full(
    mod: types.ModuleType, db: Path, fi: FaultInjector
) -> None:
    con = connect(mod, db)
    rule = fi.fail("write", endswith("-wal"), errno.ENOSPC)
    exc = raises(mod, lambda: write_unit(con))
    assert isinstance(exc, mod.OperationalError)
    assert exc.sqlite_errorcode == 13  # SQLITE_FULL
    assert not con.in_transaction  # SQLite rolled the whole transaction back
    assert rule.fired == 1
    assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == N_ROWS
    fi.clear()
    write_unit(con)  # the next write succeeds
    con.close()
    assert scalar(mod, db, "SELECT count(*) FROM messages") == N_ROWS + 20
    assert_healthy(mod, db)


@pytest.mark.parametrize("err", [errno.EIO, errno.EROFS])
def test_other_write_errno_is_ioerr_write(
    mod: types.ModuleType, db: Path, fi: FaultInjector, err: int
) -> None:
    con = connect(mod, db)
    fi.fail("write", endswith("-wal"), err)
    exc = raises(mod, lambda: write_unit(con))
    assert exc.sqlite_errorcode == code_for(mod, 778)  # SQLITE_IOERR_WRITE
    assert not con.in_transaction
    fi.clear()
    con.close()
    assert scalar(mod, db, "SELECT count(*) FROM messages") == N_ROWS
    assert_healthy(mod, db)


# -- FaultInjector: read faults -----------------------------------------------


@pytest.mark.parametrize(
    ("err", "first_read", "expected"),
    [
        # the schema read: os_unix maps EIO to IOERR_CORRUPTFS, which stays IOERR
        (errno.EIO, True, 8458),
        # a b-tree page read: IOERR_CORRUPTFS is turned into SQLITE_CORRUPT
        (errno.EIO, False, 11),
        (errno.EPERM, True, 266),  # SQLITE_IOERR_READ
        (errno.EPERM, False, 266),
    ],
)
def test_read_faults(
    mod: types.ModuleType,
    db: Path,
    fi: FaultInjector,
    err: int,
    first_read: bool,
    expected: int,
) -> None:
    con = connect(mod, db)
    if not first_read:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    rule = fi.fail("read", path_is(db), err, count=None)
    exc = raises(mod, lambda: con.execute("SELECT * FROM messages").fetchall())
    assert exc.sqlite_errorcode == code_for(mod, expected)
    assert rule.fired >= 1
    fi.clear()
    con.close()
    assert_healthy(mod, db)


# -- FaultInjector: N-th write loop -------------------------------------------


@pytest.mark.parametrize("count", [1, None], ids=["transient", "persistent"])
def test_nth_write_loop_is_all_or_nothing(
    mod: types.ModuleType, db: Path, fi: FaultInjector, count: int | None
) -> None:
    files = path_is(db, f"{db}-wal")
    failures = 0
    for n in range(1, 200):
        con = connect(mod, db)
        rule = fi.fail("write", files, errno.EIO, after=n - 1, count=count)
        try:
            write_unit(con, tag=f"n{n}")
        except mod.Error as exc:
            assert exc.sqlite_errorcode & 0xFF == 10  # SQLITE_IOERR
            assert not con.in_transaction
            assert rule.fired == 1 if count == 1 else rule.fired >= 1
            failures += 1
            expected_rows = N_ROWS
        else:
            assert rule.fired == 0
            expected_rows = N_ROWS + 20
        fi.clear()
        con.close()
        assert scalar(mod, db, "SELECT count(*) FROM messages") == expected_rows
        assert_healthy(mod, db)
        if expected_rows != N_ROWS:
            break
    else:
        pytest.fail("the unit of work never committed")
    assert failures == n - 1 >= 2  # every write before the last one was exercised


# -- FaultInjector: crash at the N-th write (child process) --------------------

_CHILD = textwrap.dedent(
    """
    import importlib, sys
    from tests.support.faultinject import FaultInjector, endswith

    module_name, db, mode, after = sys.argv[1:5]
    mod = importlib.import_module(module_name)
    con = mod.connect(db, isolation_level=None)
    fi = FaultInjector(mod).install()
    wal = endswith("-wal")
    if mode == "kill":
        fi.kill_at("write", wal, int(after))
    elif mode == "torn":
        fi.torn_at("write", wal, int(after))
    for unit in range(2):
        con.execute("BEGIN IMMEDIATE")
        con.executemany(
            "INSERT INTO messages(session_id, role, content) VALUES (?, ?, ?)",
            [("s1", "assistant", f"unit{unit} row{i} crash") for i in range(20)],
        )
        con.execute("COMMIT")
        print("committed", unit, flush=True)
    print("writes", fi.calls("write", wal), flush=True)
    """
)


def run_child(mod: types.ModuleType, db: Path, mode: str, after: int) -> Any:
    path = [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    return subprocess.run(
        [sys.executable, "-c", _CHILD, mod.__name__, str(db), mode, str(after)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=60,
        check=False,
    )


_WAL_WRITES: dict[str, int] = {}


def wal_writes(mod: types.ModuleType, template: Path, tmp_path: Path) -> int:
    """Number of -wal writes the child makes when nothing is injected."""
    if mod.__name__ not in _WAL_WRITES:
        probe = tmp_path / "count.db"
        shutil.copyfile(template, probe)
        result = run_child(mod, probe, "count", 0)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert lines[:2] == ["committed 0", "committed 1"]
        _WAL_WRITES[mod.__name__] = int(lines[2].split()[1])
    return _WAL_WRITES[mod.__name__]


@pytest.mark.parametrize("mode", ["kill", "torn"])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_crash_at_nth_write_keeps_committed_units_only(
    mod: types.ModuleType,
    template: Path,
    db: Path,
    tmp_path: Path,
    mode: str,
    where: str,
) -> None:
    total = wal_writes(mod, template, tmp_path)
    assert total >= 6
    after = {"first": 0, "middle": total // 2, "last": total - 1}[where]
    result = run_child(mod, db, mode, after)
    assert result.returncode == -signal.SIGKILL, result.stderr
    reported = sum(1 for line in result.stdout.splitlines() if line.startswith("committed"))
    assert "writes" not in result.stdout
    expected = {"first": 0, "last": 1}.get(where)
    assert expected is None or reported == expected
    # The crash hits a write of unit `reported`: exactly the reported units survive.
    assert scalar(mod, db, "SELECT count(*) FROM messages") == N_ROWS + 20 * reported
    assert_healthy(mod, db)


# -- FaultInjector: mechanics -------------------------------------------------


def test_refuses_a_module_whose_library_version_differs() -> None:
    fake = types.ModuleType("fake_sqlite")
    fake.connect = sqlite3.connect  # type: ignore[attr-defined]
    fake.sqlite_version = "0.0.1"  # type: ignore[attr-defined]
    with pytest.raises(FaultInjectorError, match=r"0\.0\.1"):
        FaultInjector(fake)


def test_only_one_injector_per_library(mod: types.ModuleType, fi: FaultInjector) -> None:
    with pytest.raises(FaultInjectorError, match="already installed"):
        FaultInjector(mod).install()


def test_drivers_are_hooked_independently(tmp_path: Path) -> None:
    pysqlite3 = pytest.importorskip("pysqlite3.dbapi2")
    in_tmp = under(tmp_path)

    def wal_here(path: str) -> bool:
        return in_tmp(path) and path.endswith("-wal")

    std_db, new_db = tmp_path / "std.db", tmp_path / "new.db"
    with FaultInjector(sqlite3) as std_fi, FaultInjector(pysqlite3) as new_fi:
        std_fi.fail("write", wal_here, errno.ENOSPC, count=None)
        std = connect(sqlite3, std_db)
        std.execute("PRAGMA journal_mode=WAL")
        exc = raises(sqlite3, lambda: std.execute("CREATE TABLE t(x)"))
        assert exc.sqlite_errorcode == 13
        new = connect(pysqlite3, new_db)
        new.execute("PRAGMA journal_mode=WAL")
        new.execute("CREATE TABLE t(x)")  # the stdlib rule does not reach it
        new.close()
        assert new_fi.calls("write", path_is(f"{new_db}-wal")) > 0
        assert std_fi.calls("write", path_is(f"{new_db}-wal")) == 0
        assert new_fi.calls("write", path_is(f"{std_db}-wal")) == 0
        std_fi.clear()
        std.close()


def test_hook_error_fails_the_call_and_is_reraised(mod: types.ModuleType, db: Path) -> None:
    def broken(path: str) -> bool:
        raise ValueError("bad predicate")

    con = connect(mod, db)
    injector = FaultInjector(mod).install()
    try:
        injector.fail("write", broken, errno.ENOSPC)
        exc = raises(mod, lambda: write_unit(con))
        assert exc.sqlite_errorcode & 0xFF == 10  # failed with EIO, not ENOSPC
    finally:
        injector.uninstall()
    with pytest.raises(FaultInjectorError) as info:
        injector.raise_hook_errors()
    assert isinstance(info.value.__cause__, ValueError)
    injector.raise_hook_errors()  # reported once
    con.close()
    assert_healthy(mod, db)


def test_uninstall_restores_the_system_calls(mod: types.ModuleType, db: Path) -> None:
    injector = FaultInjector(mod).install()
    injector.fail("write", endswith("-wal"), errno.EIO, count=None)
    injector.uninstall()
    assert not injector.installed
    con = connect(mod, db)
    write_unit(con)
    con.close()
    assert injector.calls("write") == 0
    assert scalar(mod, db, "SELECT count(*) FROM messages") == N_ROWS + 20


# -- damage: FTS5 shadow tables -----------------------------------------------


@dataclass(frozen=True)
class Failure:
    code: int  # extended result code
    text: str  # message fragment
    txn_kept: bool | None = None  # for writes: still in the transaction afterwards


@dataclass(frozen=True)
class FtsExpectation:
    write: Failure | None  # the failing unit of work (None: writes work)
    failing_unit: int  # 0: the first unit fails; 1: only the second one
    match: Failure | None  # None: MATCH works and counts match_count rows
    match_count: int | None
    rebuild_ok: bool
    # whole-database PRAGMA integrity_check: first row ("ok" or a fragment), or a raise
    integrity: str | Failure = "ok"


_CTOR = "vtable constructor failed: messages_fts"
_MALFORMED = "database disk image is malformed"
_BLOB = "fts5: corruption found reading blob"
_VERSION = "invalid fts5 file format (found 99, expected 4"

# (case, legacy) -> expectation, as observed with 3.40.1 (legacy) and 3.53.4.
# 3.40's integrity_check does not look inside FTS5 (xIntegrity came in 3.44).
FTS_CASES: dict[tuple[str, bool], FtsExpectation] = {
    ("A", True): FtsExpectation(
        write=Failure(267, _CTOR, txn_kept=True),
        failing_unit=0,
        match=Failure(267, _CTOR),
        match_count=None,
        rebuild_ok=False,
    ),
    # 3.53 reads the structure record at COMMIT (the transaction is rolled
    # back), and 'rebuild' repairs it.
    ("A", False): FtsExpectation(
        write=Failure(267, f"{_BLOB} 10 ", txn_kept=False),
        failing_unit=0,
        match=Failure(267, f"{_BLOB} 10 "),
        match_count=None,
        rebuild_ok=True,
        integrity=f"{_BLOB} 10 ",
    ),
    # B: 3.40 fails at the INSERT, 3.53 at COMMIT; both lose the transaction.
    ("B", True): FtsExpectation(
        write=Failure(19, "constraint failed", txn_kept=False),
        failing_unit=0,
        match=None,
        match_count=0,  # silently wrong
        rebuild_ok=True,
    ),
    ("B", False): FtsExpectation(
        write=Failure(19, "constraint failed", txn_kept=False),
        failing_unit=0,
        match=None,
        match_count=0,
        rebuild_ok=True,
    ),
    # C: the first unit works; the merge in the second one reads the garbage.
    ("C", True): FtsExpectation(
        write=Failure(267, _MALFORMED, txn_kept=False),
        failing_unit=1,
        match=Failure(267, _MALFORMED),
        match_count=None,
        rebuild_ok=True,
    ),
    ("C", False): FtsExpectation(
        write=Failure(267, _BLOB, txn_kept=False),
        failing_unit=1,
        match=Failure(267, _BLOB),
        match_count=None,
        rebuild_ok=True,
        integrity=_BLOB,
    ),
    ("D", True): FtsExpectation(
        write=Failure(267, _MALFORMED, txn_kept=True),
        failing_unit=0,
        match=None,
        match_count=N_ROWS,
        rebuild_ok=True,
    ),
    ("D", False): FtsExpectation(
        write=Failure(267, f"{_BLOB} 1 ", txn_kept=True),
        failing_unit=0,
        match=None,
        match_count=N_ROWS,
        rebuild_ok=True,
    ),
    ("E", True): FtsExpectation(
        write=Failure(1, _VERSION, txn_kept=True),
        failing_unit=0,
        match=Failure(1, _VERSION),
        match_count=None,
        rebuild_ok=False,
    ),
    ("E", False): FtsExpectation(
        write=Failure(1, _VERSION, txn_kept=True),
        failing_unit=0,
        match=Failure(1, _VERSION),
        match_count=None,
        rebuild_ok=False,
        integrity=Failure(1, _VERSION),
    ),
    ("F", True): FtsExpectation(
        write=Failure(267, _CTOR, txn_kept=True),
        failing_unit=0,
        match=Failure(267, _CTOR),
        match_count=None,
        rebuild_ok=False,
    ),
    ("F", False): FtsExpectation(
        write=Failure(267, f"{_BLOB} 1 ", txn_kept=True),
        failing_unit=0,
        match=Failure(267, f"{_BLOB} 10 "),
        match_count=None,
        rebuild_ok=True,
        integrity=f"{_BLOB} 10 ",
    ),
}

FTS_DAMAGE: dict[str, Callable[..., object]] = {
    "A": damage.fts_delete_structure,
    "B": damage.fts_zero_structure,
    "C": damage.fts_garbage_leaves,
    "D": damage.fts_delete_averages,
    "E": damage.fts_bad_config_version,
    "F": damage.fts_delete_all_data,
}


def check_failure(mod: types.ModuleType, exc: Any, want: Failure) -> None:
    assert exc.sqlite_errorcode == code_for(mod, want.code), str(exc)
    assert want.text in str(exc)


@pytest.mark.parametrize("case", sorted(FTS_DAMAGE))
def test_fts_damage_error_families(mod: types.ModuleType, db: Path, case: str) -> None:
    FTS_DAMAGE[case](db, module=mod)
    want = FTS_CASES[(case, legacy_fts5(mod))]

    con = connect(mod, db)
    units_done = 0
    try:
        for unit in range(2):
            con.execute("BEGIN IMMEDIATE")
            con.execute("INSERT INTO sessions VALUES (?, 'cli')", (f"new{unit}",))
            con.execute(INSERT_MESSAGE, ("s1", "user", f"fresh common {unit}"))
            con.execute("COMMIT")
            units_done += 1
    except mod.Error as exc:
        assert want.write is not None, f"unexpected {exc!r}"
        check_failure(mod, exc, want.write)
        assert con.in_transaction is want.write.txn_kept
        assert units_done == want.failing_unit
    else:
        assert want.write is None
    finally:
        con.close()
    assert scalar(mod, db, "SELECT count(*) FROM messages") == N_ROWS + units_done

    match_sql = "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'common'"
    if want.match is None:
        assert scalar(mod, db, match_sql) == want.match_count
    else:
        check_failure(mod, raises(mod, lambda: scalar(mod, db, match_sql)), want.match)

    # canonical tables stay intact
    assert quick_check_ok(mod, db, "messages")
    integrity = "PRAGMA integrity_check"
    if isinstance(want.integrity, Failure):
        check_failure(mod, raises(mod, lambda: scalar(mod, db, integrity)), want.integrity)
    elif want.integrity == "ok":
        assert scalar(mod, db, integrity) == "ok"
    else:
        assert want.integrity in scalar(mod, db, integrity)
    rebuild = "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')"
    if want.rebuild_ok:
        scalar_exec(mod, db, rebuild)
        assert_healthy(mod, db)
    else:
        raises(mod, lambda: scalar_exec(mod, db, rebuild))


def scalar_exec(mod: types.ModuleType, path: Path, sql: str) -> None:
    con = connect(mod, path)
    try:
        con.execute(sql)
    finally:
        con.close()


def test_fts_damage_needs_rows_to_change(mod: types.ModuleType, tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    make_db(mod, path, n=0)
    with pytest.raises(damage.DamageError, match="changed no rows"):
        damage.fts_garbage_leaves(path, module=mod)


# -- damage: pages ------------------------------------------------------------


def dbstat_pages(path: Path) -> dict[str, list[tuple[int, str]]]:
    """Oracle: every b-tree's pages from the stdlib build's dbstat, in path order."""
    con = sqlite3.connect(str(path))
    try:
        rows = con.execute(
            "SELECT name, pageno, pagetype FROM dbstat ORDER BY name, path"
        ).fetchall()
    finally:
        con.close()
    out: dict[str, list[tuple[int, str]]] = {}
    for name, pageno, pagetype in rows:
        out.setdefault(name, []).append((pageno, pagetype))
    return out


def all_pages(path: Path, name: str, mod: types.ModuleType) -> list[tuple[int, str]]:
    kinds: tuple[damage.PageType, ...] = ("leaf", "internal", "overflow")
    found = {p: k for k in kinds for p in damage.btree_pages(path, name, k, module=mod)}
    return [(p, found[p]) for p in damage.btree_pages(path, name, None, module=mod)]


def test_btree_pages_match_dbstat(mod: types.ModuleType, db: Path) -> None:
    con = connect(mod, db)
    con.execute("CREATE TABLE blobs(id INTEGER PRIMARY KEY, body TEXT)")
    con.execute("CREATE INDEX ix_blobs_body ON blobs(body)")  # overflowing keys
    con.executemany(
        "INSERT INTO blobs(body) VALUES (?)",
        [(f"{i:04d}" + "x" * (1500 * (i % 7)),) for i in range(60)],
    )
    con.close()
    damage.checkpoint_and_close(db, module=mod)
    expected = dbstat_pages(db)
    assert any(t == "overflow" for _, t in expected["blobs"])
    assert any(t == "overflow" for _, t in expected["ix_blobs_body"])
    assert any(t == "internal" for _, t in expected["ix_blobs_body"])
    assert set(expected) >= {"messages", "ix_messages_session", "messages_fts_data"}
    for name, pages in expected.items():
        assert all_pages(db, name, mod) == pages, name


def test_btree_pages_and_root(mod: types.ModuleType, db: Path) -> None:
    leaves = damage.btree_pages(db, "messages", "leaf", module=mod)
    internal = damage.btree_pages(db, "messages", "internal", module=mod)
    root = damage.root_page(db, "messages", module=mod)
    assert len(leaves) > 1
    assert internal == [root]
    assert damage.btree_pages(db, "messages", None, module=mod) == [root, *leaves]
    with pytest.raises(damage.DamageError):
        damage.root_page(db, "messages_fts", module=mod)  # virtual: no b-tree


def test_first_messages_leaf_gives_corrupt(mod: types.ModuleType, db: Path) -> None:
    before = damage.file_digest(db)
    first = damage.btree_pages(db, "messages", module=mod)[0]
    assert damage.damage_first_leaf(db, "messages", module=mod) == first
    assert damage.file_digest(db) != before
    exc = raises(mod, lambda: scalar(mod, db, "SELECT content FROM messages WHERE id = 1"))
    assert exc.sqlite_errorcode == 11  # SQLITE_CORRUPT
    assert scalar(mod, db, f"SELECT id FROM messages WHERE id = {N_ROWS}") == N_ROWS
    con = connect(mod, db)
    con.execute(INSERT_MESSAGE, ("s1", "user", "append works"))  # rightmost leaf
    con.close()
    assert not quick_check_ok(mod, db, "messages")
    assert quick_check_ok(mod, db, "sessions")


@pytest.mark.parametrize("how", ["random", "type-byte"])
def test_messages_root_gives_corrupt_on_insert(mod: types.ModuleType, db: Path, how: str) -> None:
    if how == "random":
        damage.damage_root(db, "messages", module=mod)
    else:
        pageno = damage.root_page(db, "messages", module=mod)
        damage.overwrite_page(db, pageno, b"\xff", module=mod)
    con = connect(mod, db)
    exc = raises(mod, lambda: con.execute(INSERT_MESSAGE, ("s1", "user", "x")))
    assert exc.sqlite_errorcode == 11
    con.close()
    # the covering index still answers counts, sessions are untouched
    assert scalar(mod, db, "SELECT count(*) FROM messages") == N_ROWS
    scalar_exec(mod, db, "INSERT INTO sessions VALUES ('s9', 'cli')")


def test_fts_shadow_page_gives_plain_corrupt_on_match(mod: types.ModuleType, db: Path) -> None:
    last = damage.btree_pages(db, "messages_fts_data", module=mod)[-1]
    assert damage.damage_fts_shadow_page(db, module=mod) == last
    match_sql = "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'common'"
    exc = raises(mod, lambda: scalar(mod, db, match_sql))
    assert exc.sqlite_errorcode == 11
    assert str(exc) == _MALFORMED
    assert quick_check_ok(mod, db, "messages")
    assert not quick_check_ok(mod, db, "messages_fts_data")


def test_notadb_header(mod: types.ModuleType, db: Path) -> None:
    damage.write_notadb_header(db, module=mod)
    assert db.read_bytes()[:16] == damage.NOTADB_HEADER
    con = connect(mod, db)  # connecting is lazy and succeeds
    exc = raises(mod, lambda: con.execute("SELECT 1 FROM sessions").fetchall())
    assert exc.sqlite_errorcode == 26  # SQLITE_NOTADB
    con.close()


def test_overwrite_page_is_deterministic(
    mod: types.ModuleType, template: Path, tmp_path: Path
) -> None:
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    for path in (a, b):
        shutil.copyfile(template, path)
        damage.damage_first_leaf(path, "messages", seed=7, module=mod)
    assert damage.file_digest(a) == damage.file_digest(b)
    with pytest.raises(damage.DamageError, match="outside"):
        damage.overwrite_page(a, 10_000, module=mod)


def test_damage_refuses_when_a_reader_blocks_the_checkpoint(
    mod: types.ModuleType, db: Path
) -> None:
    writer, reader = connect(mod, db), connect(mod, db)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM messages").fetchone()
        writer.execute(INSERT_MESSAGE, ("s1", "user", "in the wal"))
        with pytest.raises(damage.DamageError, match="close every handle"):
            damage.damage_first_leaf(db, "messages", module=mod)
    finally:
        reader.close()
        writer.close()


def test_file_digest(mod: types.ModuleType, db: Path) -> None:
    wal = Path(f"{db}-wal")
    assert damage.file_digest(wal) is None
    before = damage.file_digest(db)
    assert before is not None and len(before) == 64
    con = connect(mod, db)
    con.execute("SELECT count(*) FROM messages").fetchone()
    assert damage.file_digest(db) == before  # reads change nothing
    con.execute(INSERT_MESSAGE, ("s1", "user", "x"))
    assert damage.file_digest(wal) is not None  # the write went to the WAL
    assert damage.file_digest(db) == before
    con.close()
