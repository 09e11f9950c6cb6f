"""The files SQLite keeps beside the store: unsafe journal files, a damaged ``-wal``
header, an orphaned ``-wal``.

All run before any read: a planted link would be followed by SQLite, a ``-wal`` with an
invalid header would be treated as empty, and a ``-wal`` beside a missing or empty
database would be deleted, so their frames must be saved first.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ... import walcheck
from ...engine import check_journal_files
from ...errors import StoreFileReplacedError, UnsafePathError
from .context import STOP_FIRST, CheckResult, DoctorContext, Finding
from .fixes import recovered_path

__all__ = ["WalHeaderFacts", "check_journal", "check_wal_header"]


@dataclass
class WalHeaderFacts:
    """The ``-wal``'s header (checked before any read) and damaged ones saved aside."""

    title = "WAL header"
    damaged: str | None = None
    saved: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        out = [("-wal header", f"DAMAGED: {self.damaged}" if self.damaged else "valid or none")]
        if self.saved:
            out.append(("saved -wal sets", ", ".join(self.saved)))
        if self.orphaned:
            out.append(("orphaned -wal set aside", ", ".join(self.orphaned)))
        return out


def check_journal(ctx: DoctorContext) -> CheckResult:
    """A symlink or non-regular file at ``-wal``/``-shm``/``-journal``, named with its fix.

    SQLite opens those by name and follows a link; a folder in their place makes every
    read fail as SQLITE_CANTOPEN, which is not damage: moving the file away fixes it.
    """
    try:
        check_journal_files(ctx.db_path)
    except UnsafePathError as exc:
        # engine's message: "<file> is a symlink; SQLite would keep ... there. Move it away ..."
        text = str(exc)
        split = text.rfind("Move it away")
        cause, fix = (text[:split].rstrip(". "), text[split:]) if split > 0 else (text, text)
        return CheckResult("journal", None, [Finding("journal-file-unsafe", "error", cause, fix)])
    return CheckResult("journal", None)


def check_wal_header(ctx: DoctorContext) -> CheckResult:
    """A ``-wal`` whose header is invalid: saved aside before this doctor's first read.

    SQLite would treat it as empty (and the next read-write open deletes it), so its
    committed frames are in no read the other checks make: they would call the store
    healthy. Sets saved earlier (by any open) stay a finding until salvaged and removed.
    """
    if any(f.code == "journal-file-unsafe" for f in ctx.findings):
        return CheckResult("wal_header", None)  # check_journal named the file
    try:
        found = walcheck.preserve_damaged_wal(ctx.db_path)
    except walcheck.WalSaveError as exc:
        cause, _, fix = str(exc).partition("; ")
        return CheckResult("wal_header", None, [Finding("wal-header-damaged", "error", cause, fix)])
    except StoreFileReplacedError as exc:
        # The checks that read through SQLite skip (DoctorContext refuses to connect).
        cause, _, fix = str(exc).partition(". Stop ")
        return CheckResult(
            "wal_header", None, [Finding("wal-removed", "error", cause, "Stop " + fix)]
        )
    saved = [str(p) for p in walcheck.saved_sets(ctx.db_path)]
    orphaned = [str(p) for p in walcheck.orphaned_sets(ctx.db_path)]
    if found is None and not saved and not orphaned:
        return CheckResult("wal_header", None)  # the usual case: nothing worth a section
    facts = WalHeaderFacts(damaged=found.reason if found else None, saved=saved, orphaned=orphaned)
    findings: list[Finding] = [_orphaned(ctx, Path(p)) for p in orphaned]
    if found is not None:
        findings.append(
            Finding(
                "wal-header-damaged",
                "error",
                found.message(),
                f"{STOP_FIRST} `{found.salvage_command()}`, then put the new store in place "
                f"of the old one with `{ctx.command('hermes-repo db replace')} "
                f"{shlex.quote(str(recovered_path(ctx.db_path)))}`",
            )
        )
    elif saved:
        source = shlex.quote(saved[-1][: -len("-wal")])
        findings.append(
            Finding(
                "wal-saved",
                "warning",
                f"{len(saved)} -wal file(s) with a damaged header were saved beside the store "
                f"({', '.join(Path(p).name for p in saved)}); their committed frames may hold "
                "messages the store lost when SQLite discarded the log",
                f"check with `hermes-repo sessions salvage --source {source} --inspect-only`; "
                "salvage what is missing, then delete the saved set",
            )
        )
    return CheckResult("wal_header", facts, findings)


def _orphaned(ctx: DoctorContext, wal: Path) -> Finding:
    """An orphaned ``-wal`` set aside (by this doctor or any open): it stays a finding
    until the operator has put it back with its database, or deleted it."""
    base = shlex.quote(str(wal.with_name(wal.name[: -len("-wal")])))
    recover = ctx.command(f"hermes-repo sessions salvage --source {base}")
    return Finding(
        "wal-orphaned",
        "error",
        f"{wal.name} ({wal.stat().st_size if wal.exists() else 0} bytes) holds committed "
        f"writes of a {ctx.db_path.name} that was moved away or removed while the store "
        "was open; it was set aside so SQLite could not discard it",
        f"put the moved database at {base} (`mv MOVED.db {base}`), then check the pair "
        f"with `{recover} --inspect-only` and recover it with `{recover} --output NEW.db` "
        f"and `{ctx.command('hermes-repo db replace NEW.db')}`; delete the set once its "
        "rows are safe",
    )
