"""The file header: without ``SQLite format 3`` every read answers NOTADB."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .context import CheckResult, DoctorContext, Finding
from .fixes import damaged_file_fix

__all__ = ["HeaderFacts", "check_header"]


@dataclass
class HeaderFacts:
    """The first bytes of ``state.db``: an SQLite database says ``SQLite format 3``."""

    title = "file header"
    ok: bool
    magic: str  # the first 16 bytes, as text a person can read

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        verdict = "valid SQLite database" if self.ok else "NOT an SQLite database (NOTADB)"
        return [("header", f"{verdict}: {self.magic}")]


def check_header(ctx: DoctorContext) -> CheckResult:
    """The SQLite header: without it SQLite answers NOTADB to every read."""
    head = ctx.header
    if not ctx.exists or not head:
        return CheckResult("header", None)  # no store, or an empty one: check_store says so
    magic = head[:16]
    if ctx.header_ok:
        magic = magic.rstrip(b"\0")  # the terminating NUL of "SQLite format 3\0"
    facts = HeaderFacts(ok=ctx.header_ok, magic=repr(magic)[2:-1])
    if facts.ok:
        return CheckResult("header", facts)
    finding = Finding(
        "file-not-a-database",
        "error",
        f"{ctx.db_path} does not start with the SQLite header (its first bytes are "
        f"{facts.magic}): "
        "the file is damaged (SQLITE_NOTADB) and cannot be opened or repaired in place",
        damaged_file_fix(ctx),
    )
    return CheckResult("header", facts, [finding])
