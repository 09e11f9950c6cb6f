"""Snapshots: verified, restorable copies of the store in ``<home>/state-snapshots/``.

A snapshot is two files, ``<id>.db`` (0600) and ``<id>.json`` (its manifest, 0600), in a
0700 folder. ``id`` is the UTC time and a short random suffix (``20240611T101502Z-3fa9c1``).

How a snapshot is made, and why in this order:

* The copy goes through SQLite's backup API from a *read-only* connection. A file copy
  of a live WAL store (``state.db`` without its ``-wal``) can be torn or stale; a
  read-only source never checkpoints on close, so even a damaged store is not written to
  by being copied (seed 003: a close-time checkpoint turned a damaged file into an
  unopenable one).
* The copy is switched to a rollback journal, so it is one self-contained file: reading
  it later creates no ``-wal``/``-shm`` beside it and its sha256 stays valid.
* It is verified (``PRAGMA integrity_check`` is ``ok`` and the schema revision is
  readable) and only then renamed to ``<id>.db``; the manifest (schema revision, counts,
  size, sha256, ...) is written last, through a temporary file and a rename. A snapshot
  without a manifest is half-made: it is never listed, restored nor pruned.
* Free space is checked first; retention then keeps the newest ``keep`` snapshots.

Restore (:func:`restore_snapshot`) refuses a snapshot of another schema revision, a
snapshot whose bytes changed or that fails ``integrity_check``, and a store that another
process holds. It first keeps the current store: as a ``pre-restore`` snapshot if it is
readable, else by moving ``state.db`` and its ``-wal``/``-shm``/``-journal`` aside
together (never deleting them). The snapshot is then copied with the backup API into a
temporary file beside ``state.db``, fsynced, and renamed over it.

These functions open the store with :func:`~hermes_repo.engine.create_store_engine`,
not :meth:`StateStore.open`: an open store registers as a holder (a restore must not
count itself) and may start a guarded FTS rebuild, which a copy must never trigger.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from ... import hints, walcheck
from ...engine import Driver, db_path_for_home, select_driver
from ...errors import (
    ErrorKind,
    HermesRepoError,
    SchemaMismatchError,
    UnsafePathError,
    classify,
    describe,
)
from ...holders import HolderLock, StoreHeldError
from ...quarantine import clear as clear_quarantine
from ...schema import migrate
from ...schema.backup import backup_to, read_only_engine

__all__ = [
    "AUTO_KEEP",
    "AUTO_MAX_BYTES",
    "DEFAULT_KEEP",
    "SNAPSHOT_DIR",
    "Origin",
    "RestoreResult",
    "Snapshot",
    "SnapshotBusyError",
    "SnapshotError",
    "SnapshotNotFoundError",
    "SnapshotSchemaError",
    "SnapshotSpaceError",
    "SnapshotStoreHeldError",
    "SnapshotVerifyError",
    "create_snapshot",
    "list_snapshots",
    "restore_snapshot",
    "snapshot_before",
    "snapshots_dir",
]

log = logging.getLogger("hermes_repo.snapshots")

#: Folder name, inside the store's home.
SNAPSHOT_DIR = "state-snapshots"
#: Snapshots kept by default; older ones are pruned after each new one.
DEFAULT_KEEP = 5
#: Who made a snapshot: an operator (`snapshot create`) or an operation that took it
#: as its restore point (``snapshot_before``: pre-repair, pre-upgrade; pre-restore).
Origin = Literal["operator", "automatic"]
#: Retention of automatic snapshots, separate from the operator's: they never push out
#: an operator's snapshot, and a loop of repairs cannot fill the disk with them. The
#: newest automatic snapshot is always kept, whatever its size.
AUTO_KEEP = 5
AUTO_MAX_BYTES = 2 * 2**30
# Labels the automatic snapshots of older versions carried (their manifests have no
# origin field).
_AUTOMATIC_LABELS = frozenset({"pre-repair", "pre-upgrade", "pre-restore"})
#: Space wanted beyond the copy itself: SQLite's temporary journal while the copy is
#: switched out of WAL, the manifest, and room left for the agents that keep writing.
SPACE_MARGIN_BYTES = 16 * 2**20
SPACE_MARGIN_SHARE = 0.10
#: How long a create or restore waits for another snapshot operation to finish.
FOLDER_LOCK_WAIT_S = 10.0
MANIFEST_FORMAT = 1
LABEL_MAX = 200

_ID_RE = re.compile(r"^(\d{8}T\d{6}Z)-[0-9a-f]{6}$")
_PARTIAL = ".partial"
_LOCK_NAME = ".lock"
# Files SQLite keeps beside a database. Each belongs to exactly one database file: a
# stale one beside another file is read as that file's and corrupts it.
_SIDE_SUFFIXES = ("-wal", "-shm", "-journal")
_LIST_COMMAND = "hermes-repo snapshot list"


# -- errors ------------------------------------------------------------------------------


class SnapshotError(HermesRepoError):
    """A snapshot could not be made, listed or restored; the message names the fix."""


class SnapshotNotFoundError(SnapshotError):
    """No snapshot (with a manifest) has the requested id."""


class SnapshotSpaceError(SnapshotError):
    """Not enough free space for the copy; nothing was written."""


class SnapshotVerifyError(SnapshotError):
    """A copy or a stored snapshot failed its sha256, ``integrity_check`` or revision read."""


class SnapshotSchemaError(SnapshotError, SchemaMismatchError):
    """The snapshot's schema revision is not this code's head."""


class SnapshotStoreHeldError(SnapshotError, StoreHeldError):
    """Another process has the store open, so it cannot be replaced."""


class SnapshotBusyError(SnapshotError):
    """Another snapshot operation on the same folder is running."""


# -- values ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """One snapshot as its manifest describes it.

    ``error`` is set (and most other fields are None) when the manifest is damaged or
    its ``.db`` file is missing: such a snapshot is listed so an operator sees it, but
    never restored nor pruned.
    """

    id: str
    path: Path
    manifest_path: Path
    created_at: str | None = None
    label: str | None = None
    revision: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    size: int | None = None
    sha256: str | None = None
    sqlite_version: str | None = None
    source: str | None = None
    error: str | None = None
    origin: Origin = "operator"

    @property
    def ok(self) -> bool:
        """True when the manifest is readable and complete."""
        return self.error is None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view (paths as strings)."""
        return {
            "id": self.id,
            "ok": self.ok,
            "error": self.error,
            "created_at": self.created_at,
            "label": self.label,
            "origin": self.origin,
            "revision": self.revision,
            "counts": dict(self.counts),
            "size": self.size,
            "sha256": self.sha256,
            "sqlite_version": self.sqlite_version,
            "source": self.source,
            "path": str(self.path),
            "manifest": str(self.manifest_path),
        }


@dataclass(frozen=True)
class RestoreResult:
    """What a restore did: which snapshot, the restored counts, where the old store went.

    Exactly one of ``safety_snapshot`` (the old store was readable and is kept as a
    ``pre-restore`` snapshot) and ``moved_aside`` (it was not: its files were renamed
    ``state.db.damaged-<time>`` and so on) is set, unless there was no store at all.
    """

    snapshot: Snapshot
    db_path: Path
    counts: dict[str, int]
    safety_snapshot: Snapshot | None = None
    moved_aside: tuple[Path, ...] = ()

    @property
    def previous(self) -> str:
        """Where the store that was replaced went, in words."""
        if self.safety_snapshot is not None:
            return f"kept as snapshot {self.safety_snapshot.id} (label pre-restore)"
        if self.moved_aside:
            return "unreadable; moved aside to " + ", ".join(p.name for p in self.moved_aside)
        return "there was no store"

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "restored": self.snapshot.as_dict(),
            "db_path": str(self.db_path),
            "counts": dict(self.counts),
            "safety_snapshot": self.safety_snapshot.as_dict() if self.safety_snapshot else None,
            "moved_aside": [str(p) for p in self.moved_aside],
            "previous": self.previous,
        }


# -- paths, files, locks -----------------------------------------------------------------


def snapshots_dir(home: str | os.PathLike[str] | None) -> Path:
    """``<home>/state-snapshots`` (home defaults as for :meth:`StateStore.open`)."""
    return db_path_for_home(home).parent / SNAPSHOT_DIR


def _ensure_folder(folder: Path) -> None:
    """Create the folder 0700, or tighten it; refuse a symlink (it could aim copies anywhere)."""
    if folder.is_symlink():
        raise UnsafePathError(
            f"{folder} is a symlink; snapshots are not written through one. "
            "Replace it with a real folder and retry"
        )
    if not folder.exists():
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not folder.is_dir():
        raise UnsafePathError(f"{folder} is not a folder; move it away and retry")
    if stat.S_IMODE(folder.stat().st_mode) != 0o700:
        # Snapshots are whole conversation histories: no one else may list or read them.
        os.chmod(folder, 0o700)


@contextlib.contextmanager
def _folder_lock(folder: Path, wait_s: float | None = None) -> Iterator[None]:
    """One create or restore at a time per folder, so retention and the clean-up of
    half-made files never touch a snapshot that another operation is writing.

    ``wait_s`` defaults to :data:`FOLDER_LOCK_WAIT_S`, read at call time (a default
    argument would freeze it at import, and setting the module value would do nothing).
    """
    if wait_s is None:
        wait_s = FOLDER_LOCK_WAIT_S
    fd = os.open(folder / _LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SnapshotBusyError(
                        f"another snapshot create or restore is running in {folder} "
                        f"(waited {wait_s:.0f} s); wait for it to finish and retry"
                    ) from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _store_alone(db_path: Path, snapshot_id: str) -> Iterator[None]:
    """The store to ourselves for the block (no waiting), or a clear refusal."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(HolderLock(db_path).exclusive())
        except StoreHeldError as exc:
            raise SnapshotStoreHeldError(
                f"cannot restore over {db_path}: the store is open in another process "
                "(or in a StateStore this process did not close); stop it (e.g. the "
                "gateway or agent) and run "
                f"`{hints.command(db_path.parent, f'snapshot restore {snapshot_id}')}` again"
            ) from exc
        yield


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    # A rename is durable only once the folder's entry is on disk.
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _side(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _unlink_with_sides(path: Path) -> None:
    for p in (path, *(_side(path, s) for s in _SIDE_SUFFIXES)):
        p.unlink(missing_ok=True)


def _store_bytes(db_path: Path) -> int:
    return sum(
        p.stat().st_size for p in (db_path, _side(db_path, "-wal")) if p.exists() and p.is_file()
    )


def _with_margin(size: int) -> int:
    return size + max(SPACE_MARGIN_BYTES, int(size * SPACE_MARGIN_SHARE))


def _require_space(needs: list[tuple[Path, int, str]]) -> None:
    """Refuse before writing anything when a filesystem lacks room for what goes on it.

    ``needs`` holds (folder, bytes, what); folders on one filesystem add up.
    """
    by_device: dict[int, tuple[Path, int, list[str]]] = {}
    for folder, size, what in needs:
        dev = folder.stat().st_dev
        prev = by_device.get(dev)
        if prev is None:
            by_device[dev] = (folder, size, [what])
        else:
            by_device[dev] = (prev[0], prev[1] + size, [*prev[2], what])
    for folder, need, whats in by_device.values():
        free = shutil.disk_usage(folder).free
        if free < need:
            raise SnapshotSpaceError(
                f"not enough free space in {folder}: {' and '.join(whats)} need "
                f"~{_mib(need)} MiB, only {_mib(free)} MiB free; free space on that disk "
                f"(e.g. delete old snapshots in {SNAPSHOT_DIR}/) and retry"
            )


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f}"


def _clean_partials(folder: Path, prefix: str = "") -> None:
    """Remove what an interrupted create or restore left (only ``<prefix>*.partial*``)."""
    for p in folder.glob(f"{prefix}*{_PARTIAL}*"):
        if p.is_file() and not p.is_symlink():
            log.info("removing %s, left by an interrupted snapshot operation", p)
            p.unlink(missing_ok=True)


def _ro_uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro"


# -- reading a copy ----------------------------------------------------------------------


def _counts(con: Any) -> dict[str, int]:
    def one(sql: str) -> int:
        return int(con.execute(sql).fetchone()[0])

    return {
        "sessions": one("SELECT count(*) FROM sessions"),
        "messages": one("SELECT count(*) FROM messages"),
        "active_messages": one("SELECT count(*) FROM messages WHERE active = 1"),
    }


def _revision(con: Any, error: type[Exception]) -> str | None:
    try:
        rows = con.execute("SELECT version_num FROM alembic_version").fetchall()
    except error:  # no such table: not a hermes_repo store
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


def _integrity(con: Any) -> str:
    """``ok``, or the first problems ``integrity_check`` reports, on one line."""
    rows = con.execute("PRAGMA integrity_check").fetchall()
    problems = [str(r[0]) for r in rows]
    if problems == ["ok"]:
        return "ok"
    more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
    return "; ".join(" ".join(p.split()) for p in problems[:3]) + more


@dataclass(frozen=True)
class _CopyInfo:
    revision: str
    counts: dict[str, int]


def _seal_and_verify(path: Path, driver: Driver, source: Path) -> _CopyInfo:
    """Make a fresh backup self-contained and check it: integrity, revision, counts.

    The backup API copies page 1 as is, so a copy of a WAL store is a WAL database too;
    switching it to a rollback journal means reading it never creates side files.
    """
    try:
        con = driver.module.connect(str(path), isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode = DELETE").fetchall()
            verdict = _integrity(con)
            revision = _revision(con, driver.module.Error) if verdict == "ok" else None
            counts = _counts(con) if revision is not None else {}
        finally:
            con.close()
    except driver.module.Error as exc:
        if classify(exc) is ErrorKind.DISK:
            # The disk filled up under the copy: that says nothing about the store.
            raise SnapshotSpaceError(
                f"writing the snapshot of {source} failed: {describe(exc)}; free space on "
                f"that disk (e.g. delete old snapshots in {SNAPSHOT_DIR}/) and retry"
            ) from exc
        verdict = describe(exc)
        revision = None
        counts = {}
    if verdict != "ok":
        raise SnapshotVerifyError(
            f"the copy of {source} fails integrity_check ({verdict}): the store itself is "
            "damaged, so no snapshot was kept; run `hermes-repo doctor` (a damaged search "
            "index is fixed by `hermes-repo sessions repair`, a damaged file by "
            "`hermes-repo sessions recover --inspect-only`)"
        )
    if revision is None:
        raise SnapshotVerifyError(
            f"{source} holds no readable hermes_repo schema revision, so it is not a store "
            "that can be snapshotted; check it with `hermes-repo db current`"
        )
    return _CopyInfo(revision, counts)


# -- manifests ---------------------------------------------------------------------------


def _new_id(folder: Path) -> tuple[str, dt.datetime]:
    while True:
        now = dt.datetime.now(dt.UTC)
        sid = f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        if not (folder / f"{sid}.json").exists() and not (folder / f"{sid}.db").exists():
            return sid, now


def _write_manifest(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a reader sees no manifest or a whole one, never half of one."""
    tmp = path.with_name(path.name + _PARTIAL)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, ensure_ascii=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _created_epoch(snap: Snapshot) -> float:
    """Sort key: the manifest's time, else the second encoded in the id."""
    if snap.created_at is not None:
        with contextlib.suppress(ValueError):
            return dt.datetime.fromisoformat(snap.created_at).timestamp()
    m = _ID_RE.match(snap.id)
    if m:
        with contextlib.suppress(ValueError):
            return (
                dt.datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ")
                .replace(tzinfo=dt.UTC)
                .timestamp()
            )
    return 0.0


def _read_manifest(folder: Path, sid: str) -> Snapshot:
    manifest = folder / f"{sid}.json"
    db = folder / f"{sid}.db"

    def damaged(why: str) -> Snapshot:
        return Snapshot(id=sid, path=db, manifest_path=manifest, error=why)

    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return damaged(f"manifest unreadable: {' '.join(str(exc).split())}")
    if not isinstance(data, dict):
        return damaged("manifest is not a JSON object")
    counts = data.get("counts")
    checks = {
        "id": data.get("id") == sid,
        "revision": isinstance(data.get("revision"), str),
        "created_at": isinstance(data.get("created_at"), str),
        "size": isinstance(data.get("size"), int),
        "sha256": isinstance(data.get("sha256"), str)
        and re.fullmatch(r"[0-9a-f]{64}", data["sha256"]) is not None,
        "counts": isinstance(counts, dict)
        and all(isinstance(k, str) and isinstance(v, int) for k, v in counts.items()),
    }
    bad = [k for k, good in checks.items() if not good]
    if bad:
        return damaged(f"manifest damaged: bad or missing {', '.join(bad)}")
    if not db.is_file():
        return damaged(f"snapshot file {db.name} is missing")
    label = data.get("label")
    origin: Origin = (
        data["origin"]
        if data.get("origin") in ("operator", "automatic")
        else "automatic"
        if label in _AUTOMATIC_LABELS
        else "operator"
    )
    return Snapshot(
        id=sid,
        path=db,
        manifest_path=manifest,
        created_at=data["created_at"],
        label=label if isinstance(label, str) else None,
        revision=data["revision"],
        counts=dict(counts),  # type: ignore[arg-type]  # checked above
        size=data["size"],
        sha256=data["sha256"],
        sqlite_version=str(data.get("sqlite_version")) if data.get("sqlite_version") else None,
        source=str(data.get("source")) if data.get("source") else None,
        origin=origin,
    )


def _list(folder: Path) -> list[Snapshot]:
    if not folder.is_dir():
        return []
    snaps = [
        _read_manifest(folder, p.stem)
        for p in folder.glob("*.json")
        if _ID_RE.match(p.stem) and p.is_file()
    ]
    snaps.sort(key=lambda s: (_created_epoch(s), s.id), reverse=True)
    return snaps


# -- create ------------------------------------------------------------------------------


def _source_engine(db_path: Path, driver: Driver) -> Engine:
    """An engine whose connections are read-only: copying never writes to the store,
    and a damaged file is never checkpointed into when the copy's connection closes.
    A ``-wal`` with a damaged header is saved first (its frames would not be copied)."""
    walcheck.preserve_damaged_wal(db_path)
    return read_only_engine(db_path, driver)


def _normal_label(label: str | None) -> str | None:
    if label is None:
        return None
    clean = " ".join(label.split())
    if len(clean) > LABEL_MAX:
        raise SnapshotError(f"snapshot label is {len(clean)} characters; use at most {LABEL_MAX}")
    return clean or None


def _take(
    db_path: Path,
    folder: Path,
    driver: Driver,
    label: str | None,
    origin: Origin = "automatic",
) -> Snapshot:
    """Copy, verify and record one snapshot (the caller holds the folder lock)."""
    if not db_path.is_file():
        raise SnapshotError(
            f"no store at {db_path}, nothing to snapshot; check --home / HERMES_HOME"
        )
    sid, created = _new_id(folder)
    partial = folder / f"{sid}.db{_PARTIAL}"
    final = folder / f"{sid}.db"
    try:
        engine = _source_engine(db_path, driver)
        try:
            backup_to(engine, partial)
        except (DBAPIError, driver.module.Error) as exc:
            kind = classify(exc)
            if kind is ErrorKind.DISK:
                raise SnapshotSpaceError(
                    f"copying {db_path} into {folder} failed: {describe(exc)}; free space "
                    "on that disk (e.g. delete old snapshots there) and retry"
                ) from exc
            if kind is ErrorKind.TRANSIENT:
                raise SnapshotError(
                    f"copying {db_path} failed: {describe(exc)}; retry when the writer "
                    "holding it is done"
                ) from exc
            raise SnapshotVerifyError(
                f"{db_path} cannot be read ({describe(exc)}); run `hermes-repo doctor`"
            ) from exc
        finally:
            engine.dispose()
        info = _seal_and_verify(partial, driver, db_path)
        _fsync_file(partial)
        size = partial.stat().st_size
        digest = _sha256(partial)
        os.replace(partial, final)
        manifest = {
            "format": MANIFEST_FORMAT,
            "id": sid,
            "created_at": created.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            "label": label,
            "origin": origin,
            "revision": info.revision,
            "counts": info.counts,
            "source": str(db_path),
            "sqlite_version": driver.sqlite_version,
            "driver": driver.name,
            "size": size,
            "sha256": digest,
            "integrity_check": "ok",
        }
        # Last, so that every listed snapshot is whole and verified.
        _write_manifest(folder / f"{sid}.json", manifest)
        _fsync_dir(folder)
    except BaseException:
        _unlink_with_sides(partial)
        if not (folder / f"{sid}.json").exists():
            final.unlink(missing_ok=True)
        raise
    snap = _read_manifest(folder, sid)
    log.info("snapshot %s of %s taken (%s)", sid, db_path, info.counts)
    return snap


def _prune(
    folder: Path,
    keep: int,
    protect: set[str],
    origin: Origin = "operator",
    max_bytes: int | None = None,
) -> list[str]:
    """Delete the oldest complete snapshots of ``origin`` beyond ``keep`` (and, with
    ``max_bytes``, beyond that total size, the newest always kept); returns their ids.

    Each origin has its own retention: automatic snapshots never push out one an
    operator made, nor the reverse. Only snapshots with a readable manifest count and
    go: a half-made one (no manifest) may still be being written, and a damaged one is
    for an operator to look at.
    """
    removed = []
    mine = [s for s in _list(folder) if s.ok and s.origin == origin]
    total = 0
    doomed: list[Snapshot] = []
    for i, snap in enumerate(mine):
        total += snap.size or 0
        if i >= keep or (max_bytes is not None and i > 0 and total > max_bytes):
            doomed.append(snap)
    for snap in doomed:
        if snap.id in protect:
            continue
        # Manifest first: from that moment the snapshot is no longer listed, so a crash
        # halfway leaves an unlisted file, never a listed snapshot without its data.
        snap.manifest_path.unlink(missing_ok=True)
        snap.path.unlink(missing_ok=True)
        removed.append(snap.id)
        log.info("removed old %s snapshot %s (keeping %d)", origin, snap.id, keep)
    if removed:
        _fsync_dir(folder)
    return removed


def _check_keep(keep: int) -> None:
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")


def create_snapshot(
    home: str | os.PathLike[str] | None = None,
    *,
    label: str | None = None,
    keep: int = DEFAULT_KEEP,
    origin: Origin = "operator",
) -> Snapshot:
    """Take a verified snapshot of ``<home>/state.db`` into ``<home>/state-snapshots/``.

    Safe while agents write to the store (backup API, read-only source). Raises
    :class:`SnapshotSpaceError` when the folder's disk lacks the store's size plus a
    margin, :class:`SnapshotVerifyError` when the copy fails ``integrity_check`` (the
    store itself is damaged: nothing is kept) and :class:`SnapshotBusyError` when another
    create or restore holds the folder for longer than a few seconds. Afterwards only the
    newest ``keep`` complete snapshots *of the same origin* remain (automatic ones are
    also held to :data:`AUTO_MAX_BYTES`); the other origin's are never touched.
    """
    _check_keep(keep)
    clean_label = _normal_label(label)
    db_path = db_path_for_home(home)
    folder = snapshots_dir(home)
    if not db_path.is_file():
        raise SnapshotError(
            f"no store at {db_path}, nothing to snapshot; check --home / HERMES_HOME"
        )
    driver = select_driver()
    _ensure_folder(folder)
    with _folder_lock(folder):
        _clean_partials(folder)
        _require_space([(folder, _with_margin(_store_bytes(db_path)), "the snapshot")])
        snap = _take(db_path, folder, driver, clean_label, origin)
        _prune(
            folder,
            keep,
            protect={snap.id},
            origin=origin,
            max_bytes=AUTO_MAX_BYTES if origin == "automatic" else None,
        )
    return snap


def snapshot_before(
    home: str | os.PathLike[str] | None, reason: str, *, keep: int = AUTO_KEEP
) -> Snapshot | None:
    """Take a safety snapshot before a risky operation; ``reason`` becomes its label.

    For operations that change a store in place (``db upgrade``, ``sessions repair``):
    call it first and print the id, e.g. ``snap = snapshot_before(home, "pre-repair")``,
    so the operator can undo with ``hermes-repo snapshot restore <snap.id>``. Returns
    None when there is nothing to protect: no ``state.db``, or one with no tables yet.

    Restore accepts only a snapshot at this code's head revision. A ``pre-upgrade``
    snapshot is therefore restored by the hermes_repo version that was installed before
    the upgrade (whose head it is), not by the upgraded one; say so where the id is shown.

    Raises what :func:`create_snapshot` raises; the caller should then stop rather than
    go on without a restore point. A snapshot is a *verified* restore point, so a store
    that fails ``integrity_check`` (:class:`SnapshotVerifyError`) gets none: an operation
    whose job is to fix such a file should keep its own raw copy
    (:func:`hermes_repo.schema.backup.timestamped_backup`) instead.
    """
    db_path = db_path_for_home(home)
    if not db_path.is_file() or db_path.stat().st_size == 0:
        return None
    driver = select_driver()
    try:
        con = driver.module.connect(_ro_uri(db_path), uri=True)
        try:
            tables = int(con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])
        finally:
            con.close()
    except driver.module.Error:
        tables = -1  # unreadable: let create_snapshot report why
    if tables == 0:
        return None
    return create_snapshot(home, label=reason, keep=keep, origin="automatic")


def list_snapshots(home: str | os.PathLike[str] | None = None) -> list[Snapshot]:
    """Snapshots of the store in ``home``, newest first.

    Files without a manifest (half-made) are ignored; a snapshot whose manifest is
    damaged, or whose ``.db`` is missing, is listed with ``error`` set. Never writes.
    """
    return _list(snapshots_dir(home))


# -- restore -----------------------------------------------------------------------------


def _find(folder: Path, snapshot_id: str) -> Snapshot:
    # The id becomes a file name: only the exact shape we generate is accepted, so no
    # id can name a path outside the folder.
    if not _ID_RE.match(snapshot_id):
        raise SnapshotNotFoundError(
            f"{snapshot_id!r} is not a snapshot id (like 20240611T101502Z-3fa9c1); "
            f"see `{_LIST_COMMAND}`"
        )
    if not (folder / f"{snapshot_id}.json").is_file():
        raise SnapshotNotFoundError(f"no snapshot {snapshot_id} in {folder}; see `{_LIST_COMMAND}`")
    snap = _read_manifest(folder, snapshot_id)
    if not snap.ok:
        raise SnapshotVerifyError(
            f"snapshot {snapshot_id} cannot be restored: {snap.error}; "
            f"pick another from `{_LIST_COMMAND}`"
        )
    return snap


def _schema_refusal(
    snap: Snapshot, found: str | None, head: str, where: str
) -> SnapshotSchemaError:
    if found is not None and found in migrate.known_revisions():
        fix = (
            f"restore it with the hermes_repo version that wrote it, or pick a snapshot at "
            f"{head} from `{_LIST_COMMAND}`"
        )
    else:
        fix = (
            "it was made by a newer hermes_repo: upgrade the package, or pick a snapshot at "
            f"{head} from `{_LIST_COMMAND}`"
        )
    return SnapshotSchemaError(
        f"snapshot {snap.id} is at schema revision {found or 'none'} ({where}) but this "
        f"code's head is {head}; restore refused, nothing changed. To use it, {fix}"
    )


def _verify_snapshot(snap: Snapshot, driver: Driver, head: str) -> None:
    """The snapshot's bytes are the ones recorded, and SQLite finds them sound."""
    size = snap.path.stat().st_size
    digest = _sha256(snap.path)
    if digest != snap.sha256 or size != snap.size:
        raise SnapshotVerifyError(
            f"snapshot {snap.id} changed since it was made (sha256 {digest[:12]}..., size "
            f"{size}; the manifest records {str(snap.sha256)[:12]}..., size {snap.size}); "
            f"it cannot be trusted, nothing changed: pick another from `{_LIST_COMMAND}`"
        )
    try:
        con = driver.module.connect(_ro_uri(snap.path), uri=True)
        try:
            verdict = _integrity(con)
            revision = _revision(con, driver.module.Error)
        finally:
            con.close()
    except driver.module.Error as exc:
        verdict, revision = describe(exc), None
    if verdict != "ok":
        raise SnapshotVerifyError(
            f"snapshot {snap.id} fails integrity_check ({verdict}); nothing changed: pick "
            f"another from `{_LIST_COMMAND}`"
        )
    if revision != head:
        raise _schema_refusal(snap, revision, head, "inside its file")


def _copy_into(src: Path, dest: Path, driver: Driver) -> dict[str, int]:
    """Backup-API copy of a snapshot into a new file ``dest`` (0600); returns its counts."""
    fd = os.open(dest, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    source = driver.module.connect(_ro_uri(src), uri=True)
    try:
        target = driver.module.connect(str(dest), isolation_level=None)
        try:
            source.backup(target)
            verdict = str(target.execute("PRAGMA quick_check").fetchone()[0])
            if verdict != "ok":
                raise SnapshotVerifyError(
                    f"the restored copy {dest.name} fails quick_check ({verdict}); the store "
                    "was not replaced. Check the disk and retry"
                )
            return _counts(target)
        finally:
            target.close()
    finally:
        source.close()


def _move_aside(db_path: Path) -> tuple[Path, ...]:
    """Rename ``state.db`` and its side files to ``state.db.damaged-<time>`` (+ suffix).

    They move together and keep their suffixes, so ``state.db.damaged-<time>`` opens with
    its own ``-wal`` (the forensic copy SQLite and the salvage tools expect); nothing is
    deleted.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = db_path.with_name(f"{db_path.name}.damaged-{stamp}")
    n = 1
    while any(p.exists() for p in (base, *(_side(base, s) for s in _SIDE_SUFFIXES))):
        n += 1
        base = db_path.with_name(f"{db_path.name}.damaged-{stamp}-{n}")
    moved = []
    for suffix in ("", *_SIDE_SUFFIXES):
        src = _side(db_path, suffix)
        if src.exists():
            dest = _side(base, suffix)
            os.rename(src, dest)
            moved.append(dest)
    _fsync_dir(db_path.parent)
    log.info("moved the unreadable store aside: %s", ", ".join(str(p) for p in moved))
    return tuple(moved)


def restore_snapshot(home: str | os.PathLike[str] | None, snapshot_id: str) -> RestoreResult:
    """Replace ``<home>/state.db`` with snapshot ``snapshot_id``.

    Refused, with nothing changed, when the snapshot is at another schema revision than
    this code's head (:class:`SnapshotSchemaError`), when another process has the store
    open (:class:`SnapshotStoreHeldError`; no waiting), or when the snapshot's sha256 or
    ``integrity_check`` fails (:class:`SnapshotVerifyError`).

    The current store is kept first: as a ``pre-restore`` snapshot when it is readable,
    otherwise its ``state.db``, ``-wal``, ``-shm`` (and ``-journal``) are moved aside
    together as ``state.db.damaged-<time>...``. Then the snapshot is copied with the
    backup API into a temporary file beside ``state.db``, fsynced and renamed over it.
    A restore deletes no snapshot: the ``pre-restore`` one counts toward retention at
    the next :func:`create_snapshot`.
    """
    db_path = db_path_for_home(home)
    folder = snapshots_dir(home)
    head = migrate.head_revision()
    snap = _find(folder, snapshot_id)
    if snap.revision != head:
        raise _schema_refusal(snap, snap.revision, head, "per its manifest")
    driver = select_driver()
    _ensure_folder(folder)
    with _folder_lock(folder), _store_alone(db_path, snapshot_id):
        _clean_partials(folder)
        _clean_partials(db_path.parent, prefix=f"{db_path.name}.restore-")
        _verify_snapshot(snap, driver, head)
        has_store = db_path.is_file()
        needs = [(db_path.parent, _with_margin(snap.size or 0), "the restored copy")]
        if has_store:
            needs.append((folder, _with_margin(_store_bytes(db_path)), "the pre-restore snapshot"))
        _require_space(needs)

        safety: Snapshot | None = None
        # Side files without a state.db (someone deleted only the main file) may hold
        # the last transactions: they are kept aside too, never deleted.
        unreadable = not has_store and any(_side(db_path, s).exists() for s in _SIDE_SUFFIXES)
        if has_store:
            try:
                safety = _take(db_path, folder, driver, "pre-restore")
            except SnapshotVerifyError as exc:
                # Damaged or not a store: it cannot be a snapshot, so its files are kept
                # as they are, beside the restored one.
                log.info("current store is not readable, moving it aside: %s", exc)
                unreadable = True

        temp = db_path.with_name(f"{db_path.name}.restore-{snapshot_id}{_PARTIAL}")
        try:
            counts = _copy_into(snap.path, temp, driver)
            _fsync_file(temp)
            moved: tuple[Path, ...] = ()
            if unreadable:
                moved = _move_aside(db_path)
            else:
                # The old -wal/-shm/-journal must go *before* the rename: SQLite matches
                # them to a database by name only (the WAL header carries no identity
                # of its database), so a stale -wal beside the new state.db would be
                # replayed into it at the next open and corrupt it. Their content is
                # in the pre-restore snapshot just verified. Removed first, a crash
                # before the rename leaves the old state.db alone (restore again);
                # renamed first, it could leave the new file with the old WAL.
                for suffix in _SIDE_SUFFIXES:
                    _side(db_path, suffix).unlink(missing_ok=True)
            os.replace(temp, db_path)
            _fsync_dir(db_path.parent)
        except BaseException:
            _unlink_with_sides(temp)
            raise
        # A quarantine marks a damaged *file* for this process; that file is gone (moved
        # aside, or replaced) and the new one passed its checks, so this process may
        # open the store again without restarting. No engine of ours is open on it: the
        # exclusive holder lock above proves no StateStore is.
        clear_quarantine(db_path)
    log.info("restored snapshot %s into %s (%s)", snap.id, db_path, counts)
    return RestoreResult(
        snapshot=snap,
        db_path=db_path,
        counts=counts,
        safety_snapshot=safety,
        moved_aside=moved,
    )
