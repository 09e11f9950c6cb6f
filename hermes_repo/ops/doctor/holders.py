"""The other processes that have the store open, named when they stand in a fix's way."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...holders import holder_pids
from .context import CheckResult, DoctorContext, Finding

__all__ = ["HolderFacts", "check_holders"]


@dataclass
class HolderFacts:
    """The other processes that have the store open (registered holders)."""

    title = "holders"
    pids: list[int]

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        if not self.pids:
            return [("other processes", "none has the store open")]
        return [("other processes", "pids " + ", ".join(str(p) for p in self.pids))]


def check_holders(ctx: DoctorContext) -> CheckResult:
    """Who else has the store open; a finding only when it stands in the way of a fix.

    A running gateway holding the store is normal, not a fault. But every fix above
    (repair, recover, restore) needs the store to itself, so when there is something to
    fix, the processes to stop are named. Runs after the other checks for that reason.
    """
    if not ctx.exists:
        return CheckResult("holders", None)
    facts = HolderFacts(pids=list(holder_pids(ctx.db_path)))
    if not facts.pids or not any(f.severity == "error" for f in ctx.findings):
        return CheckResult("holders", facts)
    listed = ", ".join(str(p) for p in facts.pids)
    finding = Finding(
        "store-held",
        "warning",
        f"process(es) {listed} have the store open: the fixes above refuse to run while they do",
        "stop them first (e.g. the gateway), then run the fixes above",
    )
    return CheckResult("holders", facts, [finding])
