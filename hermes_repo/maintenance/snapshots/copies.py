"""Reading and checking a copy: sha256, ``integrity_check``, schema revision, counts.

A fresh backup is sealed (switched to a rollback journal, so reading it later creates no
side file and its sha256 stays valid) and verified before it is kept; a stored snapshot
is verified again before it is restored, and copied back with the backup API.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...driver_errors import classify, describe
from ...engine import Driver
from ...errors import ErrorKind
from ...schema import migrate
from ...schema.files import read_only_connect
from ...schema.tables import store_counts
from .manifest import (
    LIST_COMMAND,
    SNAPSHOT_DIR,
    Snapshot,
    SnapshotSchemaError,
    SnapshotSpaceError,
    SnapshotVerifyError,
)

__all__ = [
    "CopyInfo",
    "copy_into",
    "integrity_verdict",
    "read_revision",
    "schema_refusal",
    "seal_and_verify",
    "sha256",
    "verify_snapshot",
]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_revision(con: Any, error: type[Exception]) -> str | None:
    try:
        rows = con.execute("SELECT version_num FROM alembic_version").fetchall()
    except error:  # no such table: not a hermes_repo store
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


def integrity_verdict(con: Any) -> str:
    """``ok``, or the first problems ``integrity_check`` reports, on one line."""
    rows = con.execute("PRAGMA integrity_check").fetchall()
    problems = [str(r[0]) for r in rows]
    if problems == ["ok"]:
        return "ok"
    more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
    return "; ".join(" ".join(p.split()) for p in problems[:3]) + more


@dataclass(frozen=True)
class CopyInfo:
    revision: str
    counts: dict[str, int]


def seal_and_verify(path: Path, driver: Driver, source: Path) -> CopyInfo:
    """Make a fresh backup self-contained and check it: integrity, revision, counts.

    The backup API copies page 1 as is, so a copy of a WAL store is a WAL database too;
    switching it to a rollback journal means reading it never creates side files.
    """
    try:
        con = driver.module.connect(str(path), isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode = DELETE").fetchall()
            verdict = integrity_verdict(con)
            revision = read_revision(con, driver.module.Error) if verdict == "ok" else None
            counts = store_counts(con) if revision is not None else {}
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
            "`hermes-repo sessions salvage --inspect-only`)"
        )
    if revision is None:
        raise SnapshotVerifyError(
            f"{source} holds no readable hermes_repo schema revision, so it is not a store "
            "that can be snapshotted; check it with `hermes-repo db current`"
        )
    return CopyInfo(revision, counts)


def schema_refusal(snap: Snapshot, found: str | None, head: str, where: str) -> SnapshotSchemaError:
    if found is not None and found in migrate.known_revisions():
        fix = (
            f"restore it with the hermes_repo version that wrote it, or pick a snapshot at "
            f"{head} from `{LIST_COMMAND}`"
        )
    else:
        fix = (
            "it was made by a newer hermes_repo: upgrade the package, or pick a snapshot at "
            f"{head} from `{LIST_COMMAND}`"
        )
    return SnapshotSchemaError(
        f"snapshot {snap.id} is at schema revision {found or 'none'} ({where}) but this "
        f"code's head is {head}; restore refused, nothing changed. To use it, {fix}"
    )


def verify_snapshot(snap: Snapshot, driver: Driver, head: str) -> None:
    """The snapshot's bytes are the ones recorded, and SQLite finds them sound."""
    size = snap.path.stat().st_size
    digest = sha256(snap.path)
    if digest != snap.sha256 or size != snap.size:
        raise SnapshotVerifyError(
            f"snapshot {snap.id} changed since it was made (sha256 {digest[:12]}..., size "
            f"{size}; the manifest records {str(snap.sha256)[:12]}..., size {snap.size}); "
            f"it cannot be trusted, nothing changed: pick another from `{LIST_COMMAND}`"
        )
    try:
        con = read_only_connect(driver.module, snap.path)
        try:
            verdict = integrity_verdict(con)
            revision = read_revision(con, driver.module.Error)
        finally:
            con.close()
    except driver.module.Error as exc:
        verdict, revision = describe(exc), None
    if verdict != "ok":
        raise SnapshotVerifyError(
            f"snapshot {snap.id} fails integrity_check ({verdict}); nothing changed: pick "
            f"another from `{LIST_COMMAND}`"
        )
    if revision != head:
        raise schema_refusal(snap, revision, head, "inside its file")


def copy_into(src: Path, dest: Path, driver: Driver) -> dict[str, int]:
    """Backup-API copy of a snapshot into a new file ``dest`` (0600); returns its counts."""
    fd = os.open(dest, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    source = read_only_connect(driver.module, src)
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
            return store_counts(target)
        finally:
            target.close()
    finally:
        source.close()
