"""Taking a snapshot: a verified backup-API copy of the store, then its manifest.

* The copy goes through SQLite's backup API from a *read-only* connection. A file copy
  of a live WAL store (``state.db`` without its ``-wal``) can be torn or stale; a
  read-only source never checkpoints on close, so even a damaged store is not written to
  by being copied (seed 003: a close-time checkpoint turned a damaged file into an
  unopenable one).
* The copy is switched to a rollback journal, so it is one self-contained file.
* It is verified (``PRAGMA integrity_check`` is ``ok`` and the schema revision is
  readable) and only then renamed to ``<id>.db``; the manifest (schema revision, counts,
  size, sha256, ...) is written last, through a temporary file and a rename.
* Free space is checked first; retention then keeps the newest ``keep`` snapshots.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from ... import walcheck
from ...driver_errors import classify, describe
from ...engine import Driver, db_path_for_home, select_driver
from ...engine_pg import SQLITE_FILE
from ...errors import ErrorKind
from ...schema.backup import backup_to, read_only_engine
from ...schema.files import fsync_dir, fsync_file, read_only_connect, store_bytes
from ..sqlite_only import refuse_on_server
from .copies import seal_and_verify, sha256
from .folder import (
    clean_partials,
    ensure_folder,
    folder_lock,
    require_space,
    unlink_with_sides,
    with_margin,
)
from .manifest import (
    AUTO_KEEP,
    AUTO_MAX_BYTES,
    DEFAULT_KEEP,
    LABEL_MAX,
    MANIFEST_FORMAT,
    PARTIAL,
    Origin,
    Snapshot,
    SnapshotError,
    SnapshotSpaceError,
    SnapshotVerifyError,
    new_id,
    prune,
    read_manifest,
    snapshots_dir,
    write_manifest,
)

__all__ = ["create_snapshot", "snapshot_before", "take"]

log = logging.getLogger("hermes_repo.snapshots")


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


def take(
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
    sid, created = new_id(folder)
    partial = folder / f"{sid}.db{PARTIAL}"
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
        info = seal_and_verify(partial, driver, db_path)
        fsync_file(partial)
        size = partial.stat().st_size
        digest = sha256(partial)
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
        write_manifest(folder / f"{sid}.json", manifest)
        fsync_dir(folder)
    except BaseException:
        unlink_with_sides(partial)
        if not (folder / f"{sid}.json").exists():
            final.unlink(missing_ok=True)
        raise
    snap = read_manifest(folder, sid)
    log.info("snapshot %s of %s taken (%s)", sid, db_path, info.counts)
    return snap


def _check_keep(keep: int) -> None:
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")


def create_snapshot(
    home: str | os.PathLike[str] | None = None,
    *,
    label: str | None = None,
    keep: int = DEFAULT_KEEP,
    origin: Origin = "operator",
    url: str | URL | None = None,
) -> Snapshot:
    """Take a verified snapshot of ``<home>/state.db`` into ``<home>/state-snapshots/``.

    Safe while agents write to the store (backup API, read-only source). Raises
    :class:`SnapshotSpaceError` when the folder's disk lacks the store's size plus a
    margin, :class:`SnapshotVerifyError` when the copy fails ``integrity_check`` (the
    store itself is damaged: nothing is kept) and :class:`SnapshotBusyError` when another
    create or restore holds the folder for longer than a few seconds. Afterwards only the
    newest ``keep`` complete snapshots *of the same origin* remain (automatic ones are
    also held to :data:`AUTO_MAX_BYTES`); the other origin's are never touched.

    A PostgreSQL store (``url``, as :meth:`StateStore.open` takes it) is refused with
    :class:`NotOnThisBackendError` naming ``pg_dump``: snapshots are copies of a file.
    """
    refuse_on_server("snapshot create", "snapshot", url)
    _check_keep(keep)
    clean_label = _normal_label(label)
    db_path = db_path_for_home(home)
    folder = snapshots_dir(home)
    if not db_path.is_file():
        raise SnapshotError(
            f"no store at {db_path}, nothing to snapshot; check --home / HERMES_HOME"
        )
    driver = select_driver()
    ensure_folder(folder)
    with folder_lock(folder):
        clean_partials(folder)
        require_space([(folder, with_margin(store_bytes(db_path)), "the snapshot")])
        snap = take(db_path, folder, driver, clean_label, origin)
        prune(
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
        con = read_only_connect(driver.module, db_path)
        try:
            tables = int(con.execute("SELECT count(*) FROM sqlite_master").fetchone()[0])
        finally:
            con.close()
    except driver.module.Error:
        tables = -1  # unreadable: let create_snapshot report why
    if tables == 0:
        return None
    # The caller acts on the file in home: whatever $HERMES_REPO_URL says.
    return create_snapshot(home, label=reason, keep=keep, origin="automatic", url=SQLITE_FILE)
