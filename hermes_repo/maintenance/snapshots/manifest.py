"""Snapshots as recorded: ids, manifests, the values and errors callers see, retention.

A snapshot is two files, ``<id>.db`` (0600) and ``<id>.json`` (its manifest, 0600), in a
0700 folder. ``id`` is the UTC time and a short random suffix (``20240611T101502Z-3fa9c1``).
A snapshot without a manifest is half-made: it is never listed, restored nor pruned.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ...engine import db_path_for_home
from ...errors import (
    SnapshotBusyError,
    SnapshotError,
    SnapshotNotFoundError,
    SnapshotSchemaError,
    SnapshotSpaceError,
    SnapshotStoreHeldError,
    SnapshotVerifyError,
)
from ...schema.files import fsync_dir

__all__ = [
    "AUTO_KEEP",
    "AUTO_MAX_BYTES",
    "DEFAULT_KEEP",
    "ID_RE",
    "LABEL_MAX",
    "LIST_COMMAND",
    "MANIFEST_FORMAT",
    "PARTIAL",
    "SNAPSHOT_DIR",
    "Origin",
    "Snapshot",
    "SnapshotBusyError",
    "SnapshotError",
    "SnapshotNotFoundError",
    "SnapshotSchemaError",
    "SnapshotSpaceError",
    "SnapshotStoreHeldError",
    "SnapshotVerifyError",
    "list_folder",
    "list_snapshots",
    "new_id",
    "prune",
    "read_manifest",
    "snapshots_dir",
    "write_manifest",
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
MANIFEST_FORMAT = 1
LABEL_MAX = 200

#: The shape of a snapshot id; only this shape ever becomes a file name.
ID_RE = re.compile(r"^(\d{8}T\d{6}Z)-[0-9a-f]{6}$")
#: Suffix of a file being written: never listed, removed when found after a crash.
PARTIAL = ".partial"
LIST_COMMAND = "hermes-repo snapshot list"


# -- errors ------------------------------------------------------------------------------


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


def snapshots_dir(home: str | os.PathLike[str] | None) -> Path:
    """``<home>/state-snapshots`` (home defaults as for :meth:`StateStore.open`)."""
    return db_path_for_home(home).parent / SNAPSHOT_DIR


# -- manifests ---------------------------------------------------------------------------


def new_id(folder: Path) -> tuple[str, dt.datetime]:
    while True:
        now = dt.datetime.now(dt.UTC)
        sid = f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"
        if not (folder / f"{sid}.json").exists() and not (folder / f"{sid}.db").exists():
            return sid, now


def write_manifest(path: Path, data: dict[str, Any]) -> None:
    """Write atomically: a reader sees no manifest or a whole one, never half of one."""
    tmp = path.with_name(path.name + PARTIAL)
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
    m = ID_RE.match(snap.id)
    if m:
        with contextlib.suppress(ValueError):
            return (
                dt.datetime.strptime(m.group(1), "%Y%m%dT%H%M%SZ")
                .replace(tzinfo=dt.UTC)
                .timestamp()
            )
    return 0.0


def read_manifest(folder: Path, sid: str) -> Snapshot:
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


def list_folder(folder: Path) -> list[Snapshot]:
    if not folder.is_dir():
        return []
    snaps = [
        read_manifest(folder, p.stem)
        for p in folder.glob("*.json")
        if ID_RE.match(p.stem) and p.is_file()
    ]
    snaps.sort(key=lambda s: (_created_epoch(s), s.id), reverse=True)
    return snaps


def prune(
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
    mine = [s for s in list_folder(folder) if s.ok and s.origin == origin]
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
        fsync_dir(folder)
    return removed


def list_snapshots(home: str | os.PathLike[str] | None = None) -> list[Snapshot]:
    """Snapshots of the store in ``home``, newest first.

    Files without a manifest (half-made) are ignored; a snapshot whose manifest is
    damaged, or whose ``.db`` is missing, is listed with ``error`` set. Never writes.
    """
    return list_folder(snapshots_dir(home))
