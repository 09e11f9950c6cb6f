"""How the commands that check or repair the store print its findings and failures."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._output import Text

if TYPE_CHECKING:
    from rich.console import Console

    from ..ops.doctor import Finding
    from ..ops.repair import RepairReport

__all__ = ["print_findings", "repair_failure_line"]

_SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}


def repair_failure_line(report: RepairReport) -> str:
    """The one ``error:`` line of a repair that did not fix the store."""
    steps = "; ".join(report.next_steps)
    return f"{report.summary}. Next: {steps}" if steps else report.summary


def print_findings(console: Console, findings: list[Finding]) -> None:
    """Each finding as two lines: severity, code and summary; then its fix."""
    for finding in findings:
        line = Text("  ")
        line.append(finding.severity, style=_SEVERITY_STYLE.get(finding.severity, ""))
        line.append(f" [{finding.code}] {finding.summary}")
        # soft_wrap: a command people copy must not get line breaks inserted into it.
        console.print(line, soft_wrap=True)
        console.print(Text(f"    fix: {finding.fix}"), soft_wrap=True)
