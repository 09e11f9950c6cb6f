"""Listing spool files as an operator sees them: records, bad lines, ages."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from ...errors import UnsafePathError
from .files import read_spool
from .names import (
    HOLD_SUFFIX,
    PENDING_SUFFIX,
    REJECTED_SUFFIX,
    session_id_from_name,
    sessions_dir,
)
from .records import SpoolOwner


@dataclass(frozen=True)
class PendingFile:
    """One spool file as an operator sees it."""

    name: str
    path: Path
    session_id: str | None  # None: the name is not a valid session id (never replayed)
    size: int = 0
    records: int = 0
    bad_lines: int = 0
    oldest_at: float | None = None  # oldest record's spool time (file mtime if unknown)
    error: str | None = None  # why the file could not be read
    mtime: float = 0.0
    #: The stores its records name, in file order, each once (an unknown owner:
    #: records of an older version), with how many records name each.
    owners: tuple[tuple[SpoolOwner, int], ...] = ()
    #: The sources (doors) of the sessions its records were written for, each once.
    sources: tuple[str, ...] = ()

    def age_s(self, now: float | None = None) -> float | None:
        """Seconds since the oldest record was spooled."""
        if self.oldest_at is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.oldest_at)


def list_pending(
    home: str | os.PathLike[str], *, suffix: str = PENDING_SUFFIX
) -> list[PendingFile]:
    """Every ``*<suffix>`` file in ``<home>/sessions``, parsed (sorted by name).

    Reads without the lock: a line a writer is appending at this instant may show up
    as a bad line, which is fine for a report (the replay itself holds the lock).
    """
    folder = sessions_dir(home)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(suffix))
    except FileNotFoundError:
        return []
    if suffix == HOLD_SUFFIX:
        # `.pending.jsonl` and `.rejected.jsonl` also end with `.jsonl`.
        names = [n for n in names if not n.endswith((PENDING_SUFFIX, REJECTED_SUFFIX))]
    out = []
    for name in names:
        path = folder / name
        sid = session_id_from_name(name, suffix)
        try:
            contents = read_spool(home, name, session_id=sid)
        except (OSError, UnsafePathError) as exc:
            out.append(PendingFile(name, path, sid, error=str(exc)))
            continue
        if contents is None:
            continue  # replayed (deleted) since the listing
        oldest = contents.oldest_at
        owners: dict[SpoolOwner, int] = {}
        sources: dict[str, None] = {}
        for record in contents.records:
            owners[record.owner] = owners.get(record.owner, 0) + 1
            if record.source:
                sources[record.source] = None
        out.append(
            PendingFile(
                name,
                path,
                sid,
                size=contents.size,
                records=len(contents.records),
                bad_lines=len(contents.rejected),
                oldest_at=oldest if oldest is not None else contents.mtime,
                mtime=contents.mtime,
                owners=tuple(owners.items()),
                sources=tuple(sources),
            )
        )
    return out
