"""A standard-library reader of SQLite's file format, for salvaging damaged databases.

Why it exists: SQLite's own salvage (the shell's ``.recover``, the recovery extension)
needs the ``sqlite_dbpage`` virtual table, and the SQLite that Debian's Python links is
built without it. When SQL can no longer open a file (a broken header) or walk a table
(a broken interior page), the rows are usually still there, on leaf pages that nothing
points to any more. This module reads them directly.

What it reads (see https://www.sqlite.org/fileformat2.html):

* the database file and its ``-wal``. A page's newest *committed* WAL frame wins over
  the copy in the main file, exactly as SQLite would read it: frames are trusted only in
  the prefix whose salts and running checksums are valid, and only up to the last commit
  frame of that prefix;
* b-tree pages: the page header, cell pointers, varints, table-leaf cells with their
  overflow chains, and records (header of serial types, then values);
* the schema (the b-tree rooted at page 1), which maps every table and index to its root
  page, and the freelist, whose pages hold stale data that must not come back.

It never writes, and it knows nothing about hermes_repo's tables: callers decide what a
row means (by the b-tree it was found in, or by its shape). Every decoding step checks
bounds, so random bytes make a page or a cell *unreadable* (counted) rather than raising.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from ..errors import PageError

__all__ = [
    "HEADER_MAGIC",
    "BTreePage",
    "HeaderState",
    "LeafRef",
    "PageError",
    "PageSource",
    "ScanStats",
    "ScannedRow",
    "Scanner",
    "SchemaEntry",
    "TreeWalk",
    "WalInfo",
    "decode_record",
    "read_varint",
]

HEADER_MAGIC = b"SQLite format 3\x00"
HeaderState = Literal["valid", "notadb", "empty", "short"]

TABLE_INTERIOR, TABLE_LEAF, INDEX_INTERIOR, INDEX_LEAF = 5, 13, 2, 10
_BTREE_KINDS = frozenset({TABLE_INTERIOR, TABLE_LEAF, INDEX_INTERIOR, INDEX_LEAF})
_WAL_MAGICS = (0x377F0682, 0x377F0683)  # low bit set: checksums use big-endian words
_WAL_HEADER = 32
_WAL_VERSION = 3007000
_FRAME_HEADER = 24
_MAX_DEPTH = 40  # a real b-tree of 2**32 pages is < 10 deep; deeper means a loop
_ENCODINGS = {1: "utf-8", 2: "utf-16-le", 3: "utf-16-be"}
_U32 = struct.Struct(">I")
_U16 = struct.Struct(">H")
_F64 = struct.Struct(">d")


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Decode the SQLite varint at ``pos``; returns (unsigned value, next position).

    Raises :class:`PageError` when the varint runs past the end of ``buf``.
    """
    try:
        byte = buf[pos]
        if byte < 0x80:  # by far the most common case: one byte
            return byte, pos + 1
        value = byte & 0x7F
        for i in range(1, 8):
            byte = buf[pos + i]
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                return value, pos + i + 1
        return (value << 8) | buf[pos + 8], pos + 9
    except IndexError:
        raise PageError("varint runs past the end of the page") from None


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


# Serial type -> byte length, for the fixed-size types (0-9).
_FIXED_SIZES = (0, 1, 2, 3, 4, 6, 8, 8, 0, 0)


def decode_record(payload: bytes, encoding: str = "utf-8") -> tuple[Any, ...]:
    """Decode a record (the payload of a table-leaf cell) into its column values.

    Integers come back as ``int``, floats as ``float``, text as ``str`` (decoded strictly:
    bytes that are not valid text mean damage), blobs as ``bytes``. The record's sizes
    must add up to the payload exactly; anything else raises :class:`PageError`.
    """
    header_size, pos = read_varint(payload, 0)
    if header_size < 1 or header_size > len(payload):
        raise PageError("record header size is out of range")
    types: list[int] = []
    while pos < header_size:
        serial, pos = read_varint(payload, pos)
        types.append(serial)
    if pos != header_size:
        raise PageError("record header overruns its declared size")
    values: list[Any] = []
    at = header_size
    end = len(payload)
    for serial in types:
        if serial < 10:
            size = _FIXED_SIZES[serial]
            if at + size > end:
                raise PageError("record value runs past the payload")
            if serial == 0:
                values.append(None)
            elif serial == 7:
                values.append(_F64.unpack_from(payload, at)[0])
            elif serial == 8:
                values.append(0)
            elif serial == 9:
                values.append(1)
            else:
                values.append(int.from_bytes(payload[at : at + size], "big", signed=True))
            at += size
        elif serial >= 12:
            size = (serial - 12) >> 1
            if at + size > end:
                raise PageError("record value runs past the payload")
            raw = payload[at : at + size]
            if serial & 1:
                try:
                    values.append(raw.decode(encoding))
                except UnicodeDecodeError:
                    raise PageError("record text is not valid in the database encoding") from None
            else:
                values.append(bytes(raw))
            at += size
        else:
            raise PageError(f"record uses reserved serial type {serial}")
    if at != end:
        raise PageError("record values do not fill the payload")
    return tuple(values)


@dataclass(frozen=True)
class WalInfo:
    """What the ``-wal`` contributed to the page view."""

    present: bool = False
    frames: int = 0
    """Whole frames in the file."""
    valid_frames: int = 0
    """Frames in the prefix whose salts and running checksums are valid."""
    committed_frames: int = 0
    """Valid frames up to the last commit frame: the ones a reader uses."""
    pages: int = 0
    """Distinct pages whose newest committed copy is in the WAL."""
    db_pages: int | None = None
    """Database size in pages after the last commit in the WAL."""
    ignored: str | None = None
    """Why the WAL was not used at all, when it was not."""
    header_damaged: str | None = None
    """Why the WAL header is invalid, when its frames were read without it."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "header_damaged": self.header_damaged,
            "present": self.present,
            "frames": self.frames,
            "valid_frames": self.valid_frames,
            "committed_frames": self.committed_frames,
            "pages": self.pages,
            "db_pages": self.db_pages,
            "ignored": self.ignored,
        }


def _wal_checksum(data: bytes, big_endian: bool, s0: int, s1: int) -> tuple[int, int]:
    words = struct.unpack(f"{'>' if big_endian else '<'}{len(data) // 4}I", data)
    mask = 0xFFFFFFFF
    # The same running sum as SQLite's walChecksumBytes, two words at a time.
    for i in range(0, len(words), 2):
        s0 = (s0 + words[i] + s1) & mask
        s1 = (s1 + words[i + 1] + s0) & mask
    return s0, s1


def _plausible_page_size(size: int) -> bool:
    return 512 <= size <= 65536 and size & (size - 1) == 0


class PageSource:
    """A read-only view of a database's pages: the main file, overlaid by its WAL.

    ``page_size`` overrides the size read from the header (or guessed, when the header
    field is damaged). Use as a context manager, or call :meth:`close`.
    """

    def __init__(
        self, db_path: Path, wal_path: Path | None = None, *, page_size: int | None = None
    ) -> None:
        self.db_path = db_path
        self._fh = open(db_path, "rb")  # noqa: SIM115 - closed in close()
        size = os.fstat(self._fh.fileno()).st_size
        self._map: mmap.mmap | None = (
            mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        )
        self.file_size = size
        head = self._map[:100] if self._map is not None else b""
        self.header_state: HeaderState = (
            "empty"
            if size == 0
            else "short"
            if size < 100
            else "valid"
            if head.startswith(HEADER_MAGIC)
            else "notadb"
        )
        self._wal_fh: Any = None
        self._wal_map: mmap.mmap | None = None
        self._frames: dict[int, int] = {}
        self.wal = WalInfo()

        header_size = 0
        if len(head) >= 100:
            raw = _U16.unpack_from(head, 16)[0]
            header_size = 65536 if raw == 1 else raw
        wal_size = self._peek_wal_page_size(wal_path)
        if page_size is not None:
            self.page_size = page_size
        elif _plausible_page_size(header_size):
            self.page_size = header_size
        elif wal_size is not None:
            self.page_size = wal_size
        else:
            self.page_size = self._guess_page_size()
        reserved = head[20] if len(head) >= 100 else 0
        # A damaged reserved-bytes field would shrink every page; SQLite needs >= 480 usable.
        self.usable = (
            self.page_size - reserved if self.page_size - reserved >= 480 else self.page_size
        )
        encoding_id = _U32.unpack_from(head, 56)[0] if len(head) >= 100 else 1
        self.encoding = _ENCODINGS.get(encoding_id, "utf-8")
        file_pages = size // self.page_size
        self.page_count = file_pages
        if len(head) >= 100:
            in_header = _U32.unpack_from(head, 28)[0]
            # The in-header size is valid only when the change counter matches (offset 92).
            if in_header and head[24:28] == head[92:96]:
                self.page_count = max(file_pages, in_header)
        if wal_path is not None:
            self._load_wal(wal_path)
            if self.wal.db_pages:
                self.page_count = self.wal.db_pages

    # -- WAL -------------------------------------------------------------------------

    @staticmethod
    def _peek_wal_page_size(wal_path: Path | None) -> int | None:
        if wal_path is None:
            return None
        try:
            with open(wal_path, "rb") as fh:
                head = fh.read(_WAL_HEADER)
        except FileNotFoundError:
            return None
        if len(head) < _WAL_HEADER or _U32.unpack_from(head, 0)[0] not in _WAL_MAGICS:
            return None
        size = _U32.unpack_from(head, 8)[0]
        return size if _plausible_page_size(size) else None

    def _load_wal(self, wal_path: Path) -> None:
        try:
            fh = open(wal_path, "rb")  # noqa: SIM115 - closed in close()
        except FileNotFoundError:
            return
        size = os.fstat(fh.fileno()).st_size
        if size < _WAL_HEADER:
            fh.close()
            self.wal = WalInfo(
                present=size > 0, ignored="shorter than a WAL header" if size else None
            )
            return
        self._wal_fh = fh
        wal = self._wal_map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        magic, version, wal_page_size, _ckpt, salt1, salt2, c0, c1 = struct.unpack_from(
            ">8I", wal, 0
        )
        frame_size = _FRAME_HEADER + wal_page_size
        frames = (size - _WAL_HEADER) // frame_size if _plausible_page_size(wal_page_size) else 0
        big_endian = bool(magic & 1)
        damaged: str | None = None
        if magic not in _WAL_MAGICS:
            damaged = "bad WAL magic number"
        elif version != _WAL_VERSION:
            damaged = f"bad WAL version {version}"
        elif wal_page_size != self.page_size:
            damaged = f"WAL page size {wal_page_size} differs from the database's"
        elif _wal_checksum(wal[:24], big_endian, 0, 0) != (c0, c1):
            damaged = "WAL header checksum is bad"
        if damaged is not None:
            self._load_headerless(wal, size, damaged)
            return
        self._read_frames(wal, frames, frame_size, big_endian, (salt1, salt2), (c0, c1))

    def _load_headerless(self, wal: mmap.mmap, size: int, damaged: str) -> None:
        """Frames of a WAL whose header is lost, read with the database's page size.

        Each frame repeats the header's salts, and its checksum runs on from the previous
        frame's: so the first frame gives the salts and the seed for the second, and the
        byte order is the one under which the chain verifies. The first frame itself
        cannot be verified (its seed was the header's checksum); it is taken when its
        salts match and the frames after it verify, or when it is the only frame and a
        commit frame. SQLite would have discarded all of them.
        """
        frame_size = _FRAME_HEADER + self.page_size
        frames = (size - _WAL_HEADER) // frame_size
        if frames == 0:
            self.wal = WalInfo(present=True, ignored=f"{damaged}; no whole frame follows it")
            return
        at = _WAL_HEADER
        pgno, commit_size, fs1, fs2, fc0, fc1 = struct.unpack_from(">6I", wal, at)
        if pgno == 0:
            self.wal = WalInfo(
                present=True, frames=frames, ignored=f"{damaged}; its first frame is damaged too"
            )
            return
        best: tuple[int, bool] = (0, False)
        for big_endian in (False, True):
            ok = self._chain_length(wal, frames, frame_size, big_endian, (fs1, fs2), (fc0, fc1))
            if ok > best[0]:
                best = (ok, big_endian)
        if best[0] == 0 and not (frames == 1 or commit_size):
            self.wal = WalInfo(
                present=True, frames=frames, ignored=f"{damaged}; its frames do not verify"
            )
            return
        self._read_frames(
            wal,
            frames,
            frame_size,
            best[1],
            (fs1, fs2),
            None,
            first_trusted=True,
            limit=1 + best[0],
        )
        self.wal = dataclasses.replace(self.wal, header_damaged=damaged)

    @staticmethod
    def _chain_length(
        wal: mmap.mmap,
        frames: int,
        frame_size: int,
        big_endian: bool,
        salts: tuple[int, int],
        seed: tuple[int, int],
    ) -> int:
        """How many frames after the first verify, chained from the first's checksum."""
        s0, s1 = seed
        n = 0
        for i in range(1, frames):
            at = _WAL_HEADER + i * frame_size
            pgno, _commit, fs1, fs2, fc0, fc1 = struct.unpack_from(">6I", wal, at)
            if (fs1, fs2) != salts or pgno == 0:
                break
            s0, s1 = _wal_checksum(wal[at : at + 8], big_endian, s0, s1)
            s0, s1 = _wal_checksum(wal[at + _FRAME_HEADER : at + frame_size], big_endian, s0, s1)
            if (s0, s1) != (fc0, fc1):
                break
            n += 1
        return n

    def _read_frames(
        self,
        wal: mmap.mmap,
        frames: int,
        frame_size: int,
        big_endian: bool,
        salts: tuple[int, int],
        seed: tuple[int, int] | None,
        *,
        first_trusted: bool = False,
        limit: int | None = None,
    ) -> None:
        salt1, salt2 = salts
        s0, s1 = seed if seed is not None else (0, 0)
        pending: dict[int, int] = {}
        committed: dict[int, int] = {}
        valid = committed_frames = 0
        db_pages: int | None = None
        for i in range(frames if limit is None else min(frames, limit)):
            at = _WAL_HEADER + i * frame_size
            pgno, commit_size, fs1, fs2, fc0, fc1 = struct.unpack_from(">6I", wal, at)
            if (fs1, fs2) != (salt1, salt2) or pgno == 0:
                break  # a frame of an older WAL generation: the valid prefix ends here
            if first_trusted and i == 0:
                s0, s1 = fc0, fc1  # unverifiable without the header; seeds the rest
            else:
                s0, s1 = _wal_checksum(wal[at : at + 8], big_endian, s0, s1)
                s0, s1 = _wal_checksum(
                    wal[at + _FRAME_HEADER : at + frame_size], big_endian, s0, s1
                )
            if (s0, s1) != (fc0, fc1):
                break  # torn or damaged frame: SQLite stops reading the log here too
            valid += 1
            pending[pgno] = at + _FRAME_HEADER
            if commit_size:
                # Only committed transactions count; later frames of a transaction that
                # never committed are ignored, as SQLite does.
                committed.update(pending)
                pending.clear()
                committed_frames = valid
                db_pages = commit_size
        self._frames = committed
        self.wal = WalInfo(
            present=True,
            frames=frames,
            valid_frames=valid,
            committed_frames=committed_frames,
            pages=len(committed),
            db_pages=db_pages,
        )

    # -- pages -----------------------------------------------------------------------

    def _guess_page_size(self) -> int:
        """The page size under which the most pages look like b-tree pages."""
        best, best_score = 4096, -1
        for size in (4096, 1024, 2048, 8192, 16384, 32768, 65536, 512):
            pages = self.file_size // size
            if pages < 1:
                continue
            step = max(1, pages // 2000)
            score = 0
            for pgno in range(2, pages + 1, step):
                try:
                    parse_btree_page(self._file_page(pgno, size), pgno, size, pages)
                    score += 1
                except PageError:
                    pass
            if score > best_score:
                best, best_score = size, score
        return best

    def _file_page(self, pgno: int, size: int) -> bytes:
        if self._map is None:
            return b""
        return self._map[(pgno - 1) * size : pgno * size]

    def page(self, pgno: int) -> bytes:
        """The current content of page ``pgno`` (WAL copy first); raises beyond the end."""
        if not 1 <= pgno <= self.page_count:
            raise PageError(f"page {pgno} is outside the database (1-{self.page_count})")
        at = self._frames.get(pgno)
        if at is not None and self._wal_map is not None:
            return self._wal_map[at : at + self.page_size]
        data = self._file_page(pgno, self.page_size)
        if len(data) < self.page_size:
            raise PageError(f"page {pgno} is missing from the file (truncated)")
        return data

    def from_wal(self, pgno: int) -> bool:
        """Whether page ``pgno`` is read from the WAL."""
        return pgno in self._frames

    def header_field(self, offset: int) -> int:
        """A 4-byte big-endian field of the database header (from page 1, WAL first)."""
        try:
            return int(_U32.unpack_from(self.page(1), offset)[0])
        except (PageError, struct.error):
            return 0

    def close(self) -> None:
        """Release the file handles and maps."""
        for m in (self._map, self._wal_map):
            if m is not None:
                m.close()
        self._map = self._wal_map = None
        self._fh.close()
        if self._wal_fh is not None:
            self._wal_fh.close()
            self._wal_fh = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# -- b-tree pages ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BTreePage:
    """A parsed b-tree page header: kind, cell offsets and right-most child."""

    pgno: int
    kind: int
    cells: tuple[int, ...]
    right: int
    data: bytes

    @property
    def is_leaf(self) -> bool:
        return self.kind in (TABLE_LEAF, INDEX_LEAF)

    @property
    def is_table(self) -> bool:
        return self.kind in (TABLE_LEAF, TABLE_INTERIOR)


def parse_btree_page(data: bytes, pgno: int, usable: int, page_count: int) -> BTreePage:
    """Parse the b-tree header of a page; raises :class:`PageError` if it is not one."""
    at = 100 if pgno == 1 else 0
    if len(data) < at + 8:
        raise PageError(f"page {pgno} is too short")
    kind = data[at]
    if kind not in _BTREE_KINDS:
        raise PageError(f"page {pgno} is not a b-tree page (type byte {kind})")
    interior = kind in (TABLE_INTERIOR, INDEX_INTERIOR)
    ncells = _U16.unpack_from(data, at + 3)[0]
    first = at + (12 if interior else 8)
    ptr_end = first + 2 * ncells
    if ptr_end > usable:
        raise PageError(f"page {pgno}: {ncells} cell pointers do not fit in the page")
    cells = struct.unpack_from(f">{ncells}H", data, first)
    for off in cells:
        if not ptr_end <= off < usable - 1:
            raise PageError(f"page {pgno}: cell pointer {off} is outside the content area")
    right = 0
    if interior:
        right = _U32.unpack_from(data, at + 8)[0]
        if not 1 <= right <= page_count:
            raise PageError(f"page {pgno}: right child {right} is outside the database")
    return BTreePage(pgno, kind, cells, right, data)


@dataclass(frozen=True, slots=True)
class LeafRef:
    """A table leaf reached by walking a b-tree, with the rowid bounds its parents imply.

    Rowids on the leaf must satisfy ``low < rowid <= high`` (None: unbounded).
    """

    pgno: int
    low: int | None
    high: int | None

    def overlaps(self, lo: int, hi: int) -> bool:
        """Whether rowids in ``[lo, hi]`` could live on this leaf."""
        return (self.low is None or hi > self.low) and (self.high is None or lo <= self.high)


@dataclass
class TreeWalk:
    """The pages of one b-tree, as far as a walk from its root could read them."""

    root: int
    table: bool
    leaves: list[LeafRef] = field(default_factory=list)
    interior: list[int] = field(default_factory=list)
    broken: list[tuple[int, str]] = field(default_factory=list)
    """Pages the walk reached but could not read: their subtrees are unknown."""

    @property
    def pages(self) -> set[int]:
        return {leaf.pgno for leaf in self.leaves} | set(self.interior)


def walk_tree(src: PageSource, root: int, *, table: bool) -> TreeWalk:
    """Walk the b-tree at ``root`` (interior pages only are read; leaves are listed).

    Table trees carry rowid bounds down to their leaves (a divider key is the largest
    rowid of its left subtree). A page of the wrong kind, out-of-order keys, or a page
    reached twice stops the walk below that page and is recorded as broken.
    """
    walk = TreeWalk(root=root, table=table)
    leaf_kind, interior_kind = (
        (TABLE_LEAF, TABLE_INTERIOR) if table else (INDEX_LEAF, INDEX_INTERIOR)
    )
    seen: set[int] = set()
    stack: list[tuple[int, int | None, int | None, int]] = [(root, None, None, 0)]
    while stack:
        pgno, low, high, depth = stack.pop()
        if pgno in seen:
            walk.broken.append((pgno, "page reached twice (loop)"))
            continue
        if depth > _MAX_DEPTH:
            walk.broken.append((pgno, "b-tree too deep (loop)"))
            continue
        seen.add(pgno)
        try:
            page = parse_btree_page(src.page(pgno), pgno, src.usable, src.page_count)
        except PageError as exc:
            walk.broken.append((pgno, str(exc)))
            continue
        if page.kind == leaf_kind:
            walk.leaves.append(LeafRef(pgno, low, high))
            continue
        if page.kind != interior_kind:
            walk.broken.append((pgno, f"page of type {page.kind} in a {_tree_name(table)}"))
            continue
        try:
            children = _interior_children(page, low, high, src.page_count, table)
        except PageError as exc:
            walk.broken.append((pgno, str(exc)))
            continue
        walk.interior.append(pgno)
        # Reversed onto the stack so leaves come out in key order.
        stack.extend((child, lo, hi, depth + 1) for child, lo, hi in reversed(children))
    return walk


def _tree_name(table: bool) -> str:
    return "table b-tree" if table else "index b-tree"


def _interior_children(
    page: BTreePage, low: int | None, high: int | None, page_count: int, table: bool
) -> list[tuple[int, int | None, int | None]]:
    children: list[tuple[int, int | None, int | None]] = []
    prev = low
    for off in page.cells:
        child = _U32.unpack_from(page.data, off)[0]
        if not 1 <= child <= page_count:
            raise PageError(f"page {page.pgno}: child {child} is outside the database")
        if not table:
            children.append((child, None, None))
            continue
        key, _ = read_varint(page.data, off + 4)
        key = _signed64(key)
        # Divider keys must increase and stay inside the parent's bounds; random bytes
        # that happen to carry a valid type byte fail here.
        if (prev is not None and key <= prev) or (high is not None and key > high):
            raise PageError(f"page {page.pgno}: divider keys are out of order")
        children.append((child, prev, key))
        prev = key
    children.append((page.right, prev, high))
    return children


# -- cells -----------------------------------------------------------------------------


def _table_leaf_cell(src: PageSource, page: BTreePage, off: int) -> tuple[int, bytes, list[int]]:
    """(rowid, payload, overflow pages) of the table-leaf cell at ``off``."""
    data, usable = page.data, src.usable
    size, pos = read_varint(data, off)
    rowid, pos = read_varint(data, pos)
    max_local = usable - 35
    if size <= max_local:
        if pos + size > usable:
            raise PageError("cell payload runs past the page")
        return _signed64(rowid), data[pos : pos + size], []
    min_local = (usable - 12) * 32 // 255 - 23
    local = min_local + (size - min_local) % (usable - 4)
    if local > max_local:
        local = min_local
    if pos + local + 4 > usable:
        raise PageError("cell payload runs past the page")
    if size > src.page_count * (usable - 4) + local:
        raise PageError("cell payload is larger than the database")
    parts = [data[pos : pos + local]]
    remaining = size - local
    ovfl = _U32.unpack_from(data, pos + local)[0]
    chain: list[int] = []
    while remaining > 0:
        if ovfl in chain:
            raise PageError("overflow chain loops")
        buf = src.page(ovfl) if ovfl else b""
        if not buf:
            raise PageError("overflow chain ends early")
        chain.append(ovfl)
        take = min(remaining, usable - 4)
        parts.append(buf[4 : 4 + take])
        remaining -= take
        ovfl = _U32.unpack_from(buf, 0)[0]
    return _signed64(rowid), b"".join(parts), chain


# -- schema, freelist, scanner ---------------------------------------------------------


@dataclass(frozen=True)
class SchemaEntry:
    """One row of ``sqlite_schema``."""

    type: str
    name: str
    tbl_name: str
    rootpage: int
    sql: str | None


@dataclass(frozen=True, slots=True)
class ScannedRow:
    """A row decoded from a table-leaf page.

    ``table`` is the table whose b-tree holds the page, or None for a leaf that no
    readable b-tree reaches (an orphan: its parent page is damaged); ``values`` are in
    record order, so a rowid-alias column reads None (its value is ``rowid``).
    """

    table: str | None
    rowid: int
    values: tuple[Any, ...]
    pgno: int
    from_wal: bool


@dataclass
class ScanStats:
    """Counts of what a scan saw, for the salvage report."""

    pages: int = 0
    leaves_decoded: int = 0
    orphan_leaves: int = 0
    freelist_pages: int = 0
    broken_pages: list[tuple[str, int, str]] = field(default_factory=list)
    """(b-tree, page, why) for pages a walk reached but could not read."""
    bad_cells: int = 0
    """Cells on readable leaves that did not decode (damaged cell, record or overflow)."""
    out_of_range: int = 0
    """Decoded cells whose rowid contradicts their parents' keys (garbage that parsed)."""
    pages_from_wal: int = 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "pages": self.pages,
            "leaves_decoded": self.leaves_decoded,
            "orphan_leaves": self.orphan_leaves,
            "freelist_pages": self.freelist_pages,
            "broken_pages": [
                {"btree": name, "page": pgno, "error": why} for name, pgno, why in self.broken_pages
            ],
            "bad_cells": self.bad_cells,
            "out_of_range": self.out_of_range,
            "pages_from_wal": self.pages_from_wal,
        }


class Scanner:
    """Rows of a database read page by page, by b-tree where the schema is readable.

    ``rows(table)`` walks one table's b-tree; ``orphan_rows()`` decodes the table-leaf
    pages that no b-tree of the schema reaches and that are not on the freelist (freed
    pages keep deleted rows, which must not come back). Rows are yielded as decoded;
    nothing is held in memory beyond the page maps.
    """

    def __init__(self, src: PageSource) -> None:
        self.src = src
        self.stats = ScanStats(pages=src.page_count)
        self.schema_error: str | None = None
        self.schema: list[SchemaEntry] = []
        self._walks: dict[str, TreeWalk] = {}
        self._schema_walk = walk_tree(src, 1, table=True)
        self._read_schema()

    def _read_schema(self) -> None:
        if self._schema_walk.broken:
            self.schema_error = "; ".join(f"page {p}: {why}" for p, why in self._schema_walk.broken)
            for pgno, why in self._schema_walk.broken:
                self.stats.broken_pages.append(("sqlite_schema", pgno, why))
        for row in self._leaf_rows("sqlite_schema", self._schema_walk.leaves):
            values = row.values
            if (
                len(values) == 5
                and isinstance(values[0], str)
                and isinstance(values[1], str)
                and isinstance(values[2], str)
                and isinstance(values[3], int)
            ):
                sql = values[4] if isinstance(values[4], str) else None
                self.schema.append(SchemaEntry(values[0], values[1], values[2], values[3], sql))
        if not self.schema and self.schema_error is None:
            self.schema_error = "the schema b-tree holds no readable entries"

    def root_of(self, name: str) -> int | None:
        """Root page of table or index ``name`` per the schema, if readable."""
        for entry in self.schema:
            if entry.name == name and entry.rootpage > 0:
                return entry.rootpage
        return None

    def walk(self, name: str) -> TreeWalk | None:
        """The walk of ``name``'s b-tree (cached); None when the schema does not list it."""
        if name in self._walks:
            return self._walks[name]
        entry = next((e for e in self.schema if e.name == name and e.rootpage > 0), None)
        if entry is None:
            return None
        table = entry.type == "table" and not _without_rowid(entry.sql)
        walk = walk_tree(self.src, entry.rootpage, table=table)
        for pgno, why in walk.broken:
            self.stats.broken_pages.append((name, pgno, why))
        self._walks[name] = walk
        return walk

    def rows(
        self, table: str, *, want: Callable[[LeafRef], bool] | None = None
    ) -> Iterator[ScannedRow]:
        """Rows on the leaves of ``table``'s b-tree (those ``want`` accepts)."""
        walk = self.walk(table)
        if walk is None or not walk.table:
            return iter(())
        leaves = [leaf for leaf in walk.leaves if want is None or want(leaf)]
        return self._leaf_rows(table, leaves)

    def _leaf_rows(self, table: str | None, leaves: list[LeafRef]) -> Iterator[ScannedRow]:
        src = self.src
        for leaf in leaves:
            try:
                page = parse_btree_page(src.page(leaf.pgno), leaf.pgno, src.usable, src.page_count)
            except PageError:
                self.stats.bad_cells += 1
                continue
            if page.kind != TABLE_LEAF:
                continue
            self.stats.leaves_decoded += 1
            wal = src.from_wal(leaf.pgno)
            if wal:
                self.stats.pages_from_wal += 1
            for off in page.cells:
                try:
                    rowid, payload, _chain = _table_leaf_cell(src, page, off)
                    values = decode_record(payload, src.encoding)
                except PageError:
                    self.stats.bad_cells += 1
                    continue
                if (leaf.low is not None and rowid <= leaf.low) or (
                    leaf.high is not None and rowid > leaf.high
                ):
                    self.stats.out_of_range += 1
                    continue
                yield ScannedRow(table, rowid, values, leaf.pgno, wal)

    def owned_pages(self) -> set[int]:
        """Pages that belong to a readable b-tree of the schema, or to the freelist."""
        owned = self._schema_walk.pages | {1}
        for entry in self.schema:
            walk = self.walk(entry.name)
            if walk is not None:
                owned |= walk.pages
        free = self.freelist()
        self.stats.freelist_pages = len(free)
        return owned | free

    def freelist(self) -> set[int]:
        """Trunk and leaf pages of the freelist (as far as it can be followed)."""
        src = self.src
        trunk = src.header_field(32)
        declared = src.header_field(36)
        pages: set[int] = set()
        leaf_room = src.usable // 4 - 2
        while trunk and 1 <= trunk <= src.page_count and trunk not in pages:
            pages.add(trunk)
            try:
                data = src.page(trunk)
            except PageError:
                break
            count = _U32.unpack_from(data, 4)[0]
            if count > leaf_room:
                break  # a damaged trunk: its leaf list cannot be trusted
            for i in range(count):
                leaf = _U32.unpack_from(data, 8 + 4 * i)[0]
                if 1 <= leaf <= src.page_count:
                    pages.add(leaf)
            if len(pages) > max(declared, 0) + leaf_room:
                break
            trunk = _U32.unpack_from(data, 0)[0]
        return pages

    def orphan_leaves(self) -> list[LeafRef]:
        """Table-leaf pages that no readable b-tree reaches and the freelist does not hold."""
        owned = self.owned_pages()
        src = self.src
        out: list[LeafRef] = []
        for pgno in range(2, src.page_count + 1):
            if pgno in owned:
                continue
            try:
                data = src.page(pgno)
            except PageError:
                continue
            # Overflow pages start with a page number, whose high byte is 0 in any file
            # under 2**24 pages, so they never look like a table leaf (type 13).
            if data[0] != TABLE_LEAF:
                continue
            try:
                parse_btree_page(data, pgno, src.usable, src.page_count)
            except PageError:
                continue
            out.append(LeafRef(pgno, None, None))
        self.stats.orphan_leaves = len(out)
        return out

    def orphan_rows(self, leaves: list[LeafRef] | None = None) -> Iterator[ScannedRow]:
        """Rows on orphan table leaves (``table`` is None: the caller assigns them)."""
        return self._leaf_rows(None, self.orphan_leaves() if leaves is None else leaves)


def _without_rowid(sql: str | None) -> bool:
    # A WITHOUT ROWID table is stored as an index b-tree.
    return sql is not None and "WITHOUT ROWID" in " ".join(sql.upper().split())
