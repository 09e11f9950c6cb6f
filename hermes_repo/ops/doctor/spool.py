"""Transcript spool files beside the store: pending, rejected and hold files.

(The finding code ``salvage-transcripts`` and the ``salvage_*`` facts keep their names:
scripts read them. They are about hold files, not the ``sessions salvage`` command.)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ...transcript import spool
from .context import CheckResult, DoctorContext, Finding
from .server_context import ServerContext

if TYPE_CHECKING:
    from ...provenance import StoreIdentity

__all__ = ["SpoolFacts", "check_spool"]


@dataclass
class SpoolFacts:
    """Transcript spool files in ``<home>/sessions``: pending, rejected, salvage."""

    title = "spool files"
    folder: str
    pending_files: int = 0
    pending_records: int = 0
    oldest_pending_age_s: float | None = None
    rejected_files: int = 0
    rejected_lines: int = 0
    salvage_files: int = 0
    salvage_records: int = 0
    #: Pending records that belong to another store (never replayed by this one).
    other_store_files: int = 0
    other_store_records: int = 0
    unreadable: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        age = (
            ""
            if self.oldest_pending_age_s is None
            else f", oldest {self.oldest_pending_age_s / 3600:.1f} h old"
        )
        out = [
            ("pending", f"{self.pending_files} file(s), {self.pending_records} record(s){age}"),
            ("rejected", f"{self.rejected_files} file(s), {self.rejected_lines} line(s)"),
            ("salvage", f"{self.salvage_files} file(s), {self.salvage_records} record(s)"),
        ]
        if self.other_store_files:
            out.append(
                (
                    "other stores",
                    f"{self.other_store_files} file(s), {self.other_store_records} record(s)",
                )
            )
        if self.unreadable:
            out.append(("unreadable", ", ".join(self.unreadable)))
        return out


def _here(ctx: DoctorContext) -> StoreIdentity:
    # The identity and the replay's rules load the store's models: only pending files
    # need them, so a home with none (the usual case) loads neither.
    from ...provenance import StoreIdentity, peek_file_identity, url_target

    if isinstance(ctx, ServerContext):
        return StoreIdentity(None, url_target(ctx.target.url), is_file=False)
    return peek_file_identity(ctx.db_path)


def check_spool(ctx: DoctorContext) -> CheckResult:
    """Pending (replayed later), rejected and salvage (never replayed) spool files."""
    now = time.time()
    folder = spool.sessions_dir(ctx.home)
    try:
        pending = spool.list_pending(ctx.home)
        rejected = spool.list_pending(ctx.home, suffix=spool.REJECTED_SUFFIX)
        salvage = spool.list_pending(ctx.home, suffix=spool.HOLD_SUFFIX)
    except OSError as exc:  # e.g. `sessions` is a file: the folder cannot be listed
        finding = Finding(
            "spool-unreadable",
            "warning",
            f"the spool folder {folder} cannot be listed: {exc}",
            f"make {folder} a folder (mode 0700) owned by the store's user",
        )
        return CheckResult("spool", SpoolFacts(folder=str(folder)), [finding])
    ages = [a for f in pending if (a := f.age_s(now)) is not None]
    facts = SpoolFacts(
        folder=str(folder),
        pending_files=len(pending),
        pending_records=sum(f.records for f in pending),
        oldest_pending_age_s=max(ages) if ages else None,
        rejected_files=len(rejected),
        rejected_lines=sum(f.records + f.bad_lines for f in rejected),
        salvage_files=len(salvage),
        salvage_records=sum(f.records for f in salvage),
        unreadable=[f"{f.name}: {f.error}" for f in (*pending, *rejected, *salvage) if f.error],
    )
    if pending:
        from ...transcript.replay import why_not_here

        here = _here(ctx)
    unknown_files = unknown_records = 0
    for f in pending:
        elsewhere = unknown = 0
        for owner, n in f.owners:
            if why_not_here(owner, here, spooled_at=f.mtime) is None:
                continue
            if owner.known:
                elsewhere += n
            else:
                unknown += n
        facts.other_store_files += bool(elsewhere)
        facts.other_store_records += elsewhere
        unknown_files += bool(unknown)
        unknown_records += unknown
    listing = ctx.command("hermes-repo pending list")
    findings: list[Finding] = []
    if facts.other_store_files:
        findings.append(
            Finding(
                "pending-of-another-store",
                "warning",
                f"{facts.other_store_files} spool file(s) in {folder} hold "
                f"{facts.other_store_records} message(s) of another store; this store never "
                "replays them, so they wait for the store they belong to",
                f"`{listing}` names each file's store and the command that replays it there",
            )
        )
    if unknown_files:
        findings.append(
            Finding(
                "pending-of-unknown-store",
                "warning",
                f"{unknown_files} spool file(s) in {folder} hold {unknown_records} message(s) "
                "spooled by an older version, which did not record their store; this store "
                "does not replay them by itself (a server never does; a SQLite store not "
                "when it was created after them)",
                "if they belong to this store, run "
                f"`{ctx.command('hermes-repo pending replay --adopt legacy')}`; "
                f"`{listing}` shows them",
            )
        )
    mine = facts.pending_records - facts.other_store_records - unknown_records
    if pending and mine > 0:
        findings.append(
            Finding(
                "pending-transcripts",
                "warning",
                f"{facts.pending_files} spool file(s) in {folder} hold {facts.pending_records} "
                "message(s) not yet in the database (the next open of the store replays them)",
                f"run `{ctx.command('hermes-repo pending replay')}`",
            )
        )
    if salvage:
        names = ", ".join(f.name for f in salvage[:3]) + (", ..." if len(salvage) > 3 else "")
        findings.append(
            Finding(
                "salvage-transcripts",
                "error",
                f"{facts.salvage_files} hold file(s) in {folder} ({names}) keep "
                f"{facts.salvage_records} message(s) written while the database file was "
                "damaged; they are in no database and are never replayed by themselves",
                "once the store is salvaged or restored, append each <sid>.jsonl to "
                f"<sid>.pending.jsonl in {folder}, delete it, and run "
                f"`{ctx.command('hermes-repo pending replay')}` (already stored messages "
                f"are skipped); `{listing}` shows them",
            )
        )
    if rejected:
        findings.append(
            Finding(
                "rejected-spool-lines",
                "warning",
                f"{facts.rejected_files} file(s) in {folder} keep {facts.rejected_lines} "
                "spool line(s) that the replay could not use (torn or invalid), for inspection",
                f"read them (`{listing}` names them) and delete each <sid>.rejected.jsonl "
                "once nothing in it is needed",
            )
        )
    if facts.unreadable:
        findings.append(
            Finding(
                "spool-unreadable",
                "warning",
                f"spool file(s) could not be read: {'; '.join(facts.unreadable)}",
                f"check the files' owner and mode in {folder} (they must be regular files)",
            )
        )
    return CheckResult("spool", facts, findings)
