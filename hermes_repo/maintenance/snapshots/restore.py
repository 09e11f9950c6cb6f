"""Restoring a snapshot over the store, keeping the store it replaces.

Restore refuses a snapshot of another schema revision, a snapshot whose bytes changed or
that fails ``integrity_check``, and a store that another process holds. It first keeps
the current store: as a ``pre-restore`` snapshot if it is readable, else by moving
``state.db`` and its ``-wal``/``-shm``/``-journal`` aside together (never deleting them).
The snapshot is then copied with the backup API into a temporary file beside
``state.db``, fsynced, and renamed over it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import URL

from ... import hints
from ...engine import db_path_for_home, select_driver
from ...holders import HolderLock, StoreHeldError
from ...quarantine import clear as clear_quarantine
from ...schema import migrate
from ...schema.files import (
    SIDE_SUFFIXES,
    fsync_dir,
    fsync_file,
    side_file,
    side_files,
    store_bytes,
)
from ..sqlite_only import refuse_on_server
from .copies import copy_into, schema_refusal, verify_snapshot
from .create import take
from .folder import (
    clean_partials,
    ensure_folder,
    folder_lock,
    require_space,
    unlink_with_sides,
    with_margin,
)
from .manifest import (
    ID_RE,
    LIST_COMMAND,
    PARTIAL,
    Snapshot,
    SnapshotNotFoundError,
    SnapshotStoreHeldError,
    SnapshotVerifyError,
    read_manifest,
    snapshots_dir,
)

__all__ = ["RestoreResult", "restore_snapshot"]

log = logging.getLogger("hermes_repo.snapshots")


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


def _find(folder: Path, snapshot_id: str) -> Snapshot:
    # The id becomes a file name: only the exact shape we generate is accepted, so no
    # id can name a path outside the folder.
    if not ID_RE.match(snapshot_id):
        raise SnapshotNotFoundError(
            f"{snapshot_id!r} is not a snapshot id (like 20240611T101502Z-3fa9c1); "
            f"see `{LIST_COMMAND}`"
        )
    if not (folder / f"{snapshot_id}.json").is_file():
        raise SnapshotNotFoundError(f"no snapshot {snapshot_id} in {folder}; see `{LIST_COMMAND}`")
    snap = read_manifest(folder, snapshot_id)
    if not snap.ok:
        raise SnapshotVerifyError(
            f"snapshot {snapshot_id} cannot be restored: {snap.error}; "
            f"pick another from `{LIST_COMMAND}`"
        )
    return snap


def _move_aside(db_path: Path) -> tuple[Path, ...]:
    """Rename ``state.db`` and its side files to ``state.db.damaged-<time>`` (+ suffix).

    They move together and keep their suffixes, so ``state.db.damaged-<time>`` opens with
    its own ``-wal`` (the forensic copy SQLite and the salvage tools expect); nothing is
    deleted.
    """
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = db_path.with_name(f"{db_path.name}.damaged-{stamp}")
    n = 1
    while any(p.exists() for p in (base, *side_files(base))):
        n += 1
        base = db_path.with_name(f"{db_path.name}.damaged-{stamp}-{n}")
    moved = []
    for suffix in ("", *SIDE_SUFFIXES):
        src = side_file(db_path, suffix)
        if src.exists():
            dest = side_file(base, suffix)
            os.rename(src, dest)
            moved.append(dest)
    fsync_dir(db_path.parent)
    log.info("moved the unreadable store aside: %s", ", ".join(str(p) for p in moved))
    return tuple(moved)


def restore_snapshot(
    home: str | os.PathLike[str] | None, snapshot_id: str, *, url: str | URL | None = None
) -> RestoreResult:
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

    A PostgreSQL store (``url``, as :meth:`StateStore.open` takes it) is refused with
    :class:`NotOnThisBackendError` naming ``pg_restore``.
    """
    refuse_on_server("snapshot restore", "snapshot", url)
    db_path = db_path_for_home(home)
    folder = snapshots_dir(home)
    head = migrate.head_revision()
    snap = _find(folder, snapshot_id)
    if snap.revision != head:
        raise schema_refusal(snap, snap.revision, head, "per its manifest")
    driver = select_driver()
    ensure_folder(folder)
    with folder_lock(folder), _store_alone(db_path, snapshot_id):
        clean_partials(folder)
        clean_partials(db_path.parent, prefix=f"{db_path.name}.restore-")
        verify_snapshot(snap, driver, head)
        has_store = db_path.is_file()
        needs = [(db_path.parent, with_margin(snap.size or 0), "the restored copy")]
        if has_store:
            needs.append((folder, with_margin(store_bytes(db_path)), "the pre-restore snapshot"))
        require_space(needs)

        safety: Snapshot | None = None
        # Side files without a state.db (someone deleted only the main file) may hold
        # the last transactions: they are kept aside too, never deleted.
        unreadable = not has_store and any(p.exists() for p in side_files(db_path))
        if has_store:
            try:
                safety = take(db_path, folder, driver, "pre-restore")
            except SnapshotVerifyError as exc:
                # Damaged or not a store: it cannot be a snapshot, so its files are kept
                # as they are, beside the restored one.
                log.info("current store is not readable, moving it aside: %s", exc)
                unreadable = True

        temp = db_path.with_name(f"{db_path.name}.restore-{snapshot_id}{PARTIAL}")
        try:
            counts = copy_into(snap.path, temp, driver)
            fsync_file(temp)
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
                for suffix in SIDE_SUFFIXES:
                    side_file(db_path, suffix).unlink(missing_ok=True)
            os.replace(temp, db_path)
            fsync_dir(db_path.parent)
        except BaseException:
            unlink_with_sides(temp)
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
