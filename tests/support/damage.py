"""Deterministic damage of a closed SQLite database file, for corruption tests.

Every function takes the path of a database that no one has open. It first
opens the file with the given DB-API module (by default the store's driver,
``hermes_repo.engine.select_driver().module``),
runs ``PRAGMA wal_checkpoint(TRUNCATE)`` so that every page lives in the main
file, closes that handle, and only then damages the file. If a page still had
a newer copy in the ``-wal``, reads would use that copy and the damage would
stay invisible (or a later checkpoint would overwrite it), so a checkpoint that
cannot complete raises :class:`DamageError`. Close every other handle first:
an open connection's page cache also hides damage. Pass the module the code
under test uses: two SQLite libraries in one process do not see each other's
POSIX locks, so one cannot tell that the other still has the file open.

Two kinds of damage:

* FTS5 shadow-table damage done with SQL (cases A-F of the reliability
  research), each applied through one connection and checkpointed. What a
  case breaks depends on the SQLite version (noted per function; the self-tests
  pin down 3.40.1 and 3.53.4);
* page damage: bytes overwritten at a page of the main file, located through
  a walk of the b-tree in the file (the same pages, types and order as the
  ``dbstat`` virtual table, which not every build has).

Random bytes come from a seeded generator, so a given seed always produces the
same file.
"""

from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from hermes_repo.engine import select_driver

__all__ = [
    "NOTADB_HEADER",
    "DamageError",
    "PageType",
    "btree_pages",
    "checkpoint_and_close",
    "damage_first_leaf",
    "damage_fts_shadow_page",
    "damage_last_leaf",
    "damage_root",
    "file_digest",
    "file_digests",
    "fts_bad_config_version",
    "fts_delete_all_data",
    "fts_delete_averages",
    "fts_delete_structure",
    "fts_garbage_leaves",
    "fts_zero_structure",
    "overwrite_page",
    "page_size",
    "root_page",
    "varint",
    "write_notadb_header",
    "zero_wal_header",
]

# The store's own SQLite by default: a second copy in this process would not see the
# store's locks (see the module docstring).
DRIVER: ModuleType = select_driver().module

StrPath = str | os.PathLike[str]
PageType = Literal["leaf", "internal", "overflow"]

NOTADB_HEADER = b"NOT A DATABASE!\0"

# FTS5 shadow-table rowids: averages record and structure record.
_FTS_AVERAGES_ID = 1
_FTS_STRUCTURE_ID = 10


class DamageError(RuntimeError):
    """The requested damage could not be applied as specified."""


def _open(path: StrPath, module: ModuleType) -> Any:
    """Open an existing database read-write (never create one)."""
    uri = Path(path).absolute().as_uri() + "?mode=rw"
    return module.connect(uri, uri=True, isolation_level=None, timeout=0)


def _checkpoint(con: Any) -> None:
    busy, _log, _done = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        raise DamageError("wal_checkpoint(TRUNCATE) could not complete: close every handle first")


def checkpoint_and_close(path: StrPath, *, module: ModuleType = DRIVER) -> None:
    """Move all WAL content into the main file and truncate the ``-wal``."""
    con = _open(path, module)
    try:
        _checkpoint(con)
    finally:
        con.close()


def file_digest(path: StrPath) -> str | None:
    """sha256 hex digest of a file's bytes, or None if it does not exist."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    return hashlib.sha256(data).hexdigest()


def file_digests(db: Path) -> tuple[str | None, str | None]:
    """:func:`file_digest` of a store file and of its ``-wal``."""
    return file_digest(db), file_digest(Path(f"{db}-wal"))


def _seeded_bytes(seed: int, key: object, n: int) -> bytes:
    return random.Random(f"{seed}:{key}").randbytes(n)


# -- FTS5 shadow-table damage (SQL) -------------------------------------------


def _fts_damage(path: StrPath, module: ModuleType, sql: str, params: tuple[Any, ...] = ()) -> int:
    con = _open(path, module)
    try:
        _checkpoint(con)
        con.create_function(
            "_damage_bytes",
            3,
            lambda seed, key, n: _seeded_bytes(seed, key, n),
            deterministic=True,
        )
        changed = int(con.execute(sql, params).rowcount)
        _checkpoint(con)
    finally:
        con.close()
    if changed < 1:
        raise DamageError(f"damage changed no rows: {sql}")
    return changed


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def fts_delete_structure(
    path: StrPath, idx: str = "messages_fts", *, module: ModuleType = DRIVER
) -> None:
    """Case A: delete the structure record.

    3.40: every FTS access fails ("vtable constructor failed"), even 'rebuild'.
    3.53: MATCH fails and writes fail at COMMIT (rolled back); 'rebuild' works.
    """
    _fts_damage(
        path,
        module,
        f"DELETE FROM {_ident(idx + '_data')} WHERE id = ?",
        (_FTS_STRUCTURE_ID,),
    )


def fts_zero_structure(
    path: StrPath, idx: str = "messages_fts", *, module: ModuleType = DRIVER
) -> None:
    """Case B: zero the structure record (same length).

    Writes fail with a bare SQLITE_CONSTRAINT and lose the transaction; MATCH
    silently finds nothing.
    """
    _fts_damage(
        path,
        module,
        f"UPDATE {_ident(idx + '_data')} SET block = zeroblob(length(block)) WHERE id = ?",
        (_FTS_STRUCTURE_ID,),
    )


def fts_garbage_leaves(
    path: StrPath,
    idx: str = "messages_fts",
    *,
    seed: int = 0,
    module: ModuleType = DRIVER,
) -> int:
    """Case C: replace every leaf block (id > 10) with seeded random bytes.

    MATCH fails. Writes only fail once a merge reads the old leaves (with 300
    rows: the second transaction, which is rolled back). Returns the number of
    blocks changed.
    """
    return _fts_damage(
        path,
        module,
        f"UPDATE {_ident(idx + '_data')} "
        "SET block = _damage_bytes(?, id, length(block)) WHERE id > ?",
        (seed, _FTS_STRUCTURE_ID),
    )


def fts_delete_averages(
    path: StrPath, idx: str = "messages_fts", *, module: ModuleType = DRIVER
) -> None:
    """Case D: delete the averages record (writes fail, MATCH still works)."""
    _fts_damage(
        path,
        module,
        f"DELETE FROM {_ident(idx + '_data')} WHERE id = ?",
        (_FTS_AVERAGES_ID,),
    )


def fts_bad_config_version(
    path: StrPath,
    idx: str = "messages_fts",
    *,
    version: int = 99,
    module: ModuleType = DRIVER,
) -> None:
    """Case E: set the stored file-format version to an unsupported value.

    Every FTS access fails with SQLITE_ERROR, 'rebuild' too; on 3.53 a whole
    database ``PRAGMA integrity_check`` fails as well.
    """
    _fts_damage(
        path,
        module,
        f"UPDATE {_ident(idx + '_config')} SET v = ? WHERE k = 'version'",
        (version,),
    )


def fts_delete_all_data(
    path: StrPath, idx: str = "messages_fts", *, module: ModuleType = DRIVER
) -> None:
    """Case F: delete every row of the ``_data`` shadow table.

    3.40: as case A. 3.53: writes and MATCH fail; 'rebuild' works.
    """
    _fts_damage(path, module, f"DELETE FROM {_ident(idx + '_data')}")


# -- page damage ----------------------------------------------------------------


def page_size(path: StrPath) -> int:
    """Page size from the database header (bytes 16-17, big-endian; 1 = 65536)."""
    with open(path, "rb") as f:
        header = f.read(100)
    if len(header) < 100:
        raise DamageError(f"{os.fspath(path)!r} is too short to be a database")
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


@dataclass(frozen=True)
class _Header:
    page_size: int
    usable: int  # page size minus the reserved bytes at the end of each page
    pages: int


def _read_header(data: bytes) -> _Header:
    if len(data) < 100 or not data.startswith(b"SQLite format 3\0"):
        raise DamageError("not an SQLite database file")
    size = int.from_bytes(data[16:18], "big")
    size = 65536 if size == 1 else size
    return _Header(size, size - data[20], len(data) // size)


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode an SQLite varint at ``pos``; returns (value, next position)."""
    value = 0
    for i in range(8):
        byte = buf[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    return (value << 8) | buf[pos + 8], pos + 9


def _overflow_start(cell: bytes, pos: int, usable: int, table_leaf: bool) -> int:
    """First overflow page of the payload whose size varint is at ``pos`` (0: none)."""
    payload, pos = varint(cell, pos)
    if table_leaf:
        _rowid, pos = varint(cell, pos)
        max_local = usable - 35
    else:
        max_local = (usable - 12) * 64 // 255 - 23
    if payload <= max_local:
        return 0
    min_local = (usable - 12) * 32 // 255 - 23
    local = min_local + (payload - min_local) % (usable - 4)
    if local > max_local:
        local = min_local
    return int.from_bytes(cell[pos + local : pos + local + 4], "big")


def _walk_btree(data: bytes, root: int) -> list[tuple[int, PageType]]:
    """Pages of the b-tree at ``root`` in pre-order (dbstat ``path`` order).

    Interior pages come before their children, children left to right, so
    leaves appear in key order; a cell's overflow chain comes right before the
    subtree left of that cell (after the page, for leaves).
    """
    hdr = _read_header(data)
    out: list[tuple[int, PageType]] = []
    seen: set[int] = set()

    def page(pageno: int) -> bytes:
        if not 1 <= pageno <= hdr.pages or pageno in seen:
            raise DamageError(f"b-tree walk reached bad or repeated page {pageno}")
        seen.add(pageno)
        return data[(pageno - 1) * hdr.page_size : pageno * hdr.page_size]

    def visit(pageno: int) -> None:
        buf = page(pageno)
        at = 100 if pageno == 1 else 0
        kind = buf[at]
        if kind not in (2, 5, 10, 13):
            raise DamageError(f"page {pageno} is not a b-tree page (type {kind})")
        interior = kind in (2, 5)
        ncells = int.from_bytes(buf[at + 3 : at + 5], "big")
        first_ptr = at + (12 if interior else 8)
        out.append((pageno, "internal" if interior else "leaf"))
        for i in range(ncells):
            cell = int.from_bytes(buf[first_ptr + 2 * i : first_ptr + 2 * i + 2], "big")
            child = 0
            if interior:
                child = int.from_bytes(buf[cell : cell + 4], "big")
                cell += 4
            if kind != 5:  # table interior cells hold no payload
                ovfl = _overflow_start(buf, cell, hdr.usable, table_leaf=kind == 13)
                while ovfl:
                    out.append((ovfl, "overflow"))
                    ovfl = int.from_bytes(page(ovfl)[:4], "big")
            if child:
                visit(child)
        if interior:
            visit(int.from_bytes(buf[at + 8 : at + 12], "big"))

    visit(root)
    return out


def btree_pages(
    path: StrPath,
    name: str,
    pagetype: PageType | None = "leaf",
    *,
    module: ModuleType = DRIVER,
) -> list[int]:
    """Page numbers of the b-tree of table or index ``name``, in key order.

    The order and page types are those of the ``dbstat`` virtual table
    (``ORDER BY path``), but the pages are found by walking the file itself:
    DBSTAT is not compiled into every build (pysqlite3 lacks it), and opening
    the file with a second SQLite library in the same process is unsafe (POSIX
    locks are per process, so the two libraries do not see each other's locks).
    ``pagetype`` selects "leaf", "internal" or "overflow" pages; None gives
    all. A single-page b-tree's root is a leaf.
    """
    root = root_page(path, name, module=module)
    pages = _walk_btree(Path(path).read_bytes(), root)
    return [p for p, kind in pages if pagetype is None or kind == pagetype]


def root_page(path: StrPath, name: str, *, module: ModuleType = DRIVER) -> int:
    """Root page number of table or index ``name`` (the schema table's is 1)."""
    con = _open(path, module)
    try:
        _checkpoint(con)
        row = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    finally:
        con.close()
    if name in ("sqlite_master", "sqlite_schema"):
        return 1
    if row is None or not row[0]:
        raise DamageError(f"{name!r} is not a table or index with a b-tree")
    return int(row[0])


def overwrite_page(
    path: StrPath,
    pageno: int,
    data: bytes | None = None,
    *,
    offset: int = 0,
    seed: int = 0,
    module: ModuleType = DRIVER,
) -> None:
    """Overwrite page ``pageno`` (1-based) of the main file, starting at ``offset``.

    ``data=None`` fills the whole page with seeded random bytes. Pass for
    example ``b"\\xff"`` to break only the page-type byte (on page 1 the b-tree
    header starts at offset 100).
    """
    checkpoint_and_close(path, module=module)
    size = page_size(path)
    if data is None:
        data = _seeded_bytes(seed, pageno, size - offset)
    if pageno < 1 or os.path.getsize(path) < pageno * size:
        raise DamageError(f"page {pageno} is outside the file")
    if offset < 0 or offset + len(data) > size:
        raise DamageError("data does not fit in the page")
    with open(path, "r+b") as f:
        f.seek((pageno - 1) * size + offset)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def damage_first_leaf(
    path: StrPath, table: str, *, seed: int = 0, module: ModuleType = DRIVER
) -> int:
    """Randomise the first leaf (lowest keys) of ``table``; returns its page number."""
    pageno = btree_pages(path, table, "leaf", module=module)[0]
    overwrite_page(path, pageno, seed=seed, module=module)
    return pageno


def damage_last_leaf(path: StrPath, table: str = "messages", *, module: ModuleType = DRIVER) -> int:
    """Randomise the last page of ``table``'s b-tree (its newest rows); returns its number."""
    pageno = btree_pages(path, table, module=module)[-1]
    overwrite_page(path, pageno, module=module)
    return pageno


def damage_root(path: StrPath, name: str, *, seed: int = 0, module: ModuleType = DRIVER) -> int:
    """Randomise the root page of table or index ``name``; returns its page number."""
    pageno = root_page(path, name, module=module)
    overwrite_page(path, pageno, seed=seed, module=module)
    return pageno


def damage_fts_shadow_page(
    path: StrPath,
    idx: str = "messages_fts",
    *,
    which: int = -1,
    seed: int = 0,
    module: ModuleType = DRIVER,
) -> int:
    """Randomise one leaf page of ``{idx}_data``; returns its page number.

    By default the last leaf in key order, which holds segment leaf blocks (the
    first leaf holds the averages and structure records, so damaging it breaks
    the table constructor instead). Needs enough indexed text for the b-tree to
    have more than one leaf.
    """
    leaves = btree_pages(path, f"{idx}_data", "leaf", module=module)
    pageno = leaves[which]
    overwrite_page(path, pageno, seed=seed, module=module)
    return pageno


def write_notadb_header(path: StrPath, *, module: ModuleType = DRIVER) -> None:
    """Replace the 16-byte magic string at offset 0 (gives SQLITE_NOTADB)."""
    checkpoint_and_close(path, module=module)
    with open(path, "r+b") as f:
        f.write(NOTADB_HEADER)
        f.flush()
        os.fsync(f.fileno())


def zero_wal_header(db: StrPath) -> Path:
    """Zero the 32-byte header of ``db``'s ``-wal`` (its frames stay); returns the ``-wal``.

    SQLite then reads the log as empty although it holds committed frames.
    """
    wal = Path(f"{db}-wal")
    with open(wal, "r+b") as f:
        f.write(b"\0" * 32)
    return wal
