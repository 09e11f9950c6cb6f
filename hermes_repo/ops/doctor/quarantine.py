"""This process's quarantine of the store (a damaged file met by a write)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...quarantine import quarantine_info
from .context import CheckResult, DoctorContext, Finding, when
from .fixes import damaged_file_fix

__all__ = ["QuarantineFacts", "check_quarantine"]


@dataclass
class QuarantineFacts:
    """Whether this process has quarantined the store (a damaged file met by a write)."""

    title = "quarantine"
    quarantined: bool
    since: float | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        if not self.quarantined:
            return [("this process", "not quarantined")]
        return [("this process", f"QUARANTINED since {when(self.since)}: {self.error}")]


def check_quarantine(ctx: DoctorContext) -> CheckResult:
    """The quarantine of this process: it refuses every write to the file until restart."""
    info = quarantine_info(ctx.db_path)
    if info is None:
        return CheckResult("quarantine", QuarantineFacts(quarantined=False))
    facts = QuarantineFacts(quarantined=True, since=info.since, error=info.error)
    finding = Finding(
        "quarantined",
        "error",
        f"this process quarantined {ctx.db_path} at {when(info.since)} after {info.error}: "
        "it writes nothing more to the file until it restarts on a repaired or recovered one",
        damaged_file_fix(ctx) + "; then restart this process",
    )
    return CheckResult("quarantine", facts, [finding])
