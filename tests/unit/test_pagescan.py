"""The standard-library page scanner, checked against SQLite itself.

Every database here is written by SQLite (the driver the store uses); the scanner must
decode exactly what SQLite reads back: every serial type, overflow chains, UTF-16
databases, the WAL (newest committed frame wins; uncommitted and torn frames do not
count), and it must never raise on damage, never resurrect rows from freed pages, and
never pass garbage off as rows.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_repo.engine import select_driver
from hermes_repo.salvage.pagescan import (
    PageError,
    PageSource,
    Scanner,
    decode_record,
    read_varint,
)

MODULE = select_driver().module


def encode_varint(value: int) -> bytes:
    """SQLite's varint encoding (big-endian groups of 7 bits; 9th byte holds 8 bits)."""
    if value > 0x00FFFFFFFFFFFFFF:
        out = bytearray(9)
        out[8] = value & 0xFF
        value >>= 8
        for i in range(7, -1, -1):
            out[i] = (value & 0x7F) | 0x80
            value >>= 7
        return bytes(out)
    groups = [value & 0x7F]
    value >>= 7
    while value:
        groups.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(reversed(groups))


def connect(path: Path, **pragmas: Any) -> Any:
    """A connection in autocommit mode: use :func:`fill` for many rows."""
    con = MODULE.connect(str(path), isolation_level=None)
    for name, value in pragmas.items():
        con.execute(f"PRAGMA {name} = {value}")
    return con


def fill(con: Any, sql: str, rows: Any) -> None:
    """Insert many rows in one transaction (one fsync, not one per row)."""
    con.execute("BEGIN")
    con.executemany(sql, rows)
    con.execute("COMMIT")


def checkpoint(con: Any) -> None:
    assert con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0


def sql_rows(path: Path, table: str) -> dict[int, tuple[Any, ...]]:
    """What SQLite reads, from a private copy (so the file under test stays as it is)."""
    scratch = path.parent / "sql-copy"
    scratch.mkdir()
    try:
        for suffix in ("", "-wal"):
            if Path(f"{path}{suffix}").exists():
                shutil.copyfile(f"{path}{suffix}", scratch / f"db{suffix}")
        con = MODULE.connect(f"{(scratch / 'db').as_uri()}?mode=ro", uri=True)
        try:
            return {r[0]: tuple(r[1:]) for r in con.execute(f"SELECT rowid, * FROM {table}")}
        finally:
            con.close()
    finally:
        shutil.rmtree(scratch)


def scanned(path: Path, table: str) -> dict[int, tuple[Any, ...]]:
    wal = Path(f"{path}-wal")
    with PageSource(path, wal if wal.exists() else None) as src:
        scanner = Scanner(src)
        return {row.rowid: row.values for row in scanner.rows(table)}


# -- varints and records -------------------------------------------------------------------


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_varint_round_trip(value: int) -> None:
    raw = encode_varint(value)
    assert read_varint(b"\x00" + raw + b"\xff", 1) == (value, 1 + len(raw))


@pytest.mark.parametrize("raw", [b"", b"\x81", b"\xff" * 8])
def test_truncated_varint_is_a_page_error(raw: bytes) -> None:
    with pytest.raises(PageError):
        read_varint(raw, 0)


@pytest.mark.parametrize(
    "payload",
    [
        b"",  # no header size
        b"\x05\x01",  # header longer than the payload
        b"\x02\x0a",  # reserved serial type 10
        b"\x02\x01",  # a 1-byte integer with no byte
        b"\x02\x01\x07\x07",  # bytes left over after the values
        b"\x02\x0f\xff",  # text that is not UTF-8
    ],
)
def test_bad_records_raise_page_error(payload: bytes) -> None:
    with pytest.raises(PageError):
        decode_record(payload)


VALUES: list[Any] = [
    None,
    0,
    1,
    -1,
    127,
    -128,
    32767,
    -32768,
    (1 << 23) - 1,
    -(1 << 23),
    (1 << 31) - 1,
    -(1 << 31),
    (1 << 47) - 1,
    -(1 << 47),
    (1 << 63) - 1,
    -(1 << 63),
    1.5,
    -2.25e-300,
    1e308,
    "",
    "ascii",
    "数据库恢复 — ünïcode 🧪",
    "x" * 20_000,  # an overflow chain of several pages
    b"",
    bytes(range(256)),
    os.urandom(100_000),
]


@pytest.mark.parametrize("encoding", ["UTF-8", "UTF-16le", "UTF-16be"])
def test_scanner_reads_every_serial_type_as_sqlite_does(tmp_path: Path, encoding: str) -> None:
    db = tmp_path / "t.db"
    con = connect(db)
    con.execute(f"PRAGMA encoding = '{encoding}'")
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v, r REAL, s TEXT)")
    fill(
        con,
        "INSERT INTO t VALUES (?, ?, ?, ?)",
        ((i, v, float(i), f"行{i}" * i) for i, v in enumerate(VALUES, 1)),
    )
    con.close()

    got = scanned(db, "t")
    want = sql_rows(db, "t")
    assert got.keys() == want.keys()
    for rowid, values in got.items():
        _id, v, r, s = values
        # The rowid alias is stored as NULL; integral REALs are stored as integers on
        # disk and converted back by SQLite (and by the salvage's normalisation).
        assert _id is None
        assert (v, float(r), s) == want[rowid][1:]
        assert type(v) is type(want[rowid][1])


# -- the WAL -------------------------------------------------------------------------------


def _run(code: str, db: Path) -> None:
    script = f"import os, sys\nimport {MODULE.__name__} as m\n" + textwrap.dedent(code)
    subprocess.run([sys.executable, "-c", script, str(db)], check=True)


@pytest.fixture
def wal_db(tmp_path: Path) -> Path:
    """A WAL database, checkpointed: 3000 rows of ~300 bytes over ~250 leaves."""
    db = tmp_path / "w.db"
    con = connect(db, journal_mode="WAL")
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT)")
    fill(con, "INSERT INTO t VALUES (?, ?)", ((i, f"v1 {i} " + "p" * 300) for i in range(1, 3001)))
    checkpoint(con)
    con.close()
    return db


def test_the_newest_committed_wal_frame_wins_and_uncommitted_frames_do_not(
    wal_db: Path,
) -> None:
    _run(
        """
        con = m.connect(sys.argv[1], isolation_level=None)
        con.execute("PRAGMA wal_autocheckpoint = 0")
        con.execute("UPDATE t SET body = 'v2 one' WHERE id = 1")
        con.execute("UPDATE t SET body = 'v3 one' WHERE id = 1")
        # A big transaction with a tiny cache spills dirty pages into the WAL before it
        # commits; the process then dies: those frames are never committed.
        con.execute("PRAGMA cache_size = 2")
        con.execute("BEGIN")
        con.execute("UPDATE t SET body = 'uncommitted ' || id")
        os._exit(0)
        """,
        wal_db,
    )
    with PageSource(wal_db, Path(f"{wal_db}-wal")) as src:
        assert src.wal.valid_frames > src.wal.committed_frames > 0
    got = scanned(wal_db, "t")
    want = sql_rows(wal_db, "t")
    assert got[1] == (None, "v3 one")
    assert {k: v[1] for k, v in got.items()} == {k: v[1] for k, v in want.items()}
    assert not any(v[1].startswith("uncommitted") for v in got.values())


def test_a_torn_wal_frame_ends_the_log_as_sqlite_does(wal_db: Path) -> None:
    _run(
        """
        con = m.connect(sys.argv[1], isolation_level=None)
        con.execute("PRAGMA wal_autocheckpoint = 0")
        con.execute("UPDATE t SET body = 'first commit' WHERE id = 1")
        con.execute("UPDATE t SET body = 'second commit' WHERE id = 1")
        os._exit(0)
        """,
        wal_db,
    )
    wal = Path(f"{wal_db}-wal")
    data = bytearray(wal.read_bytes())
    page_size = int.from_bytes(data[8:12], "big")
    frames = (len(data) - 32) // (24 + page_size)
    # Flip a byte in the last frame's page: its checksum no longer matches.
    data[32 + (frames - 1) * (24 + page_size) + 24 + 100] ^= 0xFF
    wal.write_bytes(bytes(data))
    shm = Path(f"{wal_db}-shm")
    if shm.exists():
        shm.unlink()  # so SQLite rebuilds its index from the log, as the scanner does

    got = scanned(wal_db, "t")
    assert got[1] == (None, "first commit")
    assert got[1][1] == sql_rows(wal_db, "t")[1][1]


def test_wal_copy_of_a_page_is_used_even_when_the_main_copy_is_damaged(wal_db: Path) -> None:
    _run(
        """
        con = m.connect(sys.argv[1], isolation_level=None)
        con.execute("PRAGMA wal_autocheckpoint = 0")
        con.execute("UPDATE t SET body = 'in the wal' WHERE id = 2")
        os._exit(0)
        """,
        wal_db,
    )
    with PageSource(wal_db, Path(f"{wal_db}-wal")) as src:
        scanner = Scanner(src)
        leaf = next(r.pgno for r in scanner.rows("t") if r.rowid == 2)
        page_size = src.page_size
        assert src.from_wal(leaf)
    with open(wal_db, "r+b") as f:
        f.seek((leaf - 1) * page_size)
        f.write(random.Random(3).randbytes(page_size))
    got = scanned(wal_db, "t")
    assert len(got) == 3000
    assert got[2] == (None, "in the wal")


# -- damage --------------------------------------------------------------------------------


@pytest.fixture
def rows_db(tmp_path: Path) -> Path:
    """A rollback-journal database: 3000 rows, an index, a multi-level b-tree."""
    db = tmp_path / "r.db"
    con = connect(db, secure_delete=0)
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT NOT NULL, body TEXT)")
    con.execute("CREATE INDEX t_k ON t(k)")
    fill(
        con,
        "INSERT INTO t VALUES (?, ?, ?)",
        ((i, f"key-{i:05d}", f"row-{i:05d} " + "b" * (50 + i % 400)) for i in range(1, 3001)),
    )
    con.close()
    return db


def _interior_pages(db: Path) -> list[int]:
    with PageSource(db) as src:
        walk = Scanner(src).walk("t")
        assert walk is not None
        return walk.interior


def test_a_damaged_interior_page_leaves_orphan_leaves_that_hold_every_row(
    rows_db: Path,
) -> None:
    want = sql_rows(rows_db, "t")
    root = _interior_pages(rows_db)[0]
    with PageSource(rows_db) as src:
        size = src.page_size
    with open(rows_db, "r+b") as f:
        f.seek((root - 1) * size)
        f.write(random.Random(1).randbytes(size))

    with PageSource(rows_db) as src:
        scanner = Scanner(src)
        assert list(scanner.rows("t")) == []
        assert any(pgno == root for _n, pgno, _w in scanner.stats.broken_pages)
        orphans = {r.rowid: r.values for r in scanner.orphan_rows()}
    assert orphans.keys() == want.keys()
    assert all(orphans[k][1:] == want[k][1:] for k in want)


def test_rows_on_freed_pages_never_come_back(rows_db: Path) -> None:
    con = connect(rows_db, secure_delete=0)
    con.execute("DELETE FROM t WHERE id <= 2000")
    con.close()
    raw = rows_db.read_bytes()
    # The freed pages still hold deleted rows (what a careless scanner would resurrect).
    assert any(f"row-{i:05d} ".encode() in raw for i in range(1, 2001))

    with PageSource(rows_db) as src:
        scanner = Scanner(src)
        assert scanner.freelist()
        live = {r.rowid for r in scanner.rows("t")}
        orphans = list(scanner.orphan_rows())
    assert live == set(range(2001, 3001))
    assert orphans == []


def test_a_broken_overflow_chain_loses_only_its_row(tmp_path: Path) -> None:
    db = tmp_path / "o.db"
    con = connect(db)
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, body BLOB)")
    fill(
        con,
        "INSERT INTO t VALUES (?, ?)",
        ((i, bytes([i]) * (9000 if i == 5 else 100)) for i in range(1, 11)),
    )
    con.close()
    with PageSource(db) as src:
        size = src.page_size
        page_count = src.page_count
    # Point the first overflow page of row 5 past the end of the file.
    data = bytearray(db.read_bytes())
    for pgno in range(2, page_count + 1):
        at = (pgno - 1) * size
        if data[at] == 0 and data[at + 4 : at + 40] == bytes([5]) * 36:
            data[at : at + 4] = (page_count + 50).to_bytes(4, "big")
            break
    else:
        pytest.fail("overflow page not found")
    db.write_bytes(bytes(data))

    with PageSource(db) as src:
        scanner = Scanner(src)
        got = {r.rowid for r in scanner.rows("t")}
        assert scanner.stats.bad_cells == 1
    assert got == set(range(1, 11)) - {5}


@pytest.mark.parametrize("seed", range(6))
def test_random_damage_never_raises_and_never_invents_rows(rows_db: Path, seed: int) -> None:
    want = sql_rows(rows_db, "t")
    rng = random.Random(seed)
    with PageSource(rows_db) as src:
        size, pages = src.page_size, src.page_count
    with open(rows_db, "r+b") as f:
        for pgno in rng.sample(range(1, pages + 1), 8):
            f.seek((pgno - 1) * size + (100 if pgno == 1 else 0))
            f.write(rng.randbytes(size - (100 if pgno == 1 else 0)))

    with PageSource(rows_db) as src:
        scanner = Scanner(src)
        rows = list(scanner.rows("t")) + list(scanner.orphan_rows())
    for row in rows:
        if row.table == "t" or len(row.values) == 3:
            # A row that decoded is a real row, unchanged.
            assert row.rowid in want and row.values[1:] == want[row.rowid][1:]


def test_a_file_of_garbage_is_reported_not_raised(tmp_path: Path) -> None:
    db = tmp_path / "g.db"
    db.write_bytes(random.Random(9).randbytes(64 * 1024))
    with PageSource(db) as src:
        assert src.header_state == "notadb"
        scanner = Scanner(src)
        assert scanner.schema_error
        list(scanner.orphan_rows())


def test_page_size_is_guessed_when_the_header_is_gone(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    con = connect(db)
    con.execute("PRAGMA page_size = 1024")
    con.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, body TEXT)")
    fill(con, "INSERT INTO t VALUES (?, ?)", ((i, f"r{i} " * 20) for i in range(1, 500)))
    con.close()
    want = sql_rows(db, "t")
    with open(db, "r+b") as f:
        f.write(b"\0" * 24)  # magic string and page size field

    with PageSource(db) as src:
        assert src.header_state == "notadb"
        assert src.page_size == 1024
        got = {r.rowid: r.values for r in Scanner(src).rows("t")}
    assert {k: v[1] for k, v in got.items()} == {k: v[1] for k, v in want.items()}


def test_leaf_bounds_follow_the_divider_keys(rows_db: Path) -> None:
    with PageSource(rows_db) as src:
        scanner = Scanner(src)
        walk = scanner.walk("t")
        assert walk is not None and len(walk.leaves) > 10
        by_page: dict[int, list[int]] = {}
        for row in scanner.rows("t"):
            by_page.setdefault(row.pgno, []).append(row.rowid)
    for leaf in walk.leaves:
        ids = by_page[leaf.pgno]
        assert all(
            (leaf.low is None or i > leaf.low) and (leaf.high is None or i <= leaf.high)
            for i in ids
        )
        assert leaf.overlaps(min(ids), max(ids))
