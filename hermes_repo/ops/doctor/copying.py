"""A store that an unfinished ``db copy`` wrote into: ``copy-unfinished``.

A copy marks its target before the first row and clears the mark only after its final
verification (see :mod:`hermes_repo.schema.copy_mark`). A marked store holds part of
its source, so it is reported with the command that runs the copy again; that run
resumes, verifies and clears the mark.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ...schema.copy_mark import COPY_MARK_KEY, parse_copy_mark
from .context import CheckResult, DoctorContext, DoctorReadError, Finding, when
from .server_context import ServerContext

__all__ = ["CopyFacts", "check_copy"]


@dataclass
class CopyFacts:
    """Whether a copy into this store is unfinished, and from where."""

    title = "copy"
    unfinished: bool = False
    source: str | None = None
    source_store_id: str | None = None
    started_at: float | None = None
    command: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        if not self.unfinished:
            return [("unfinished copy", "none")]
        return [
            ("unfinished copy", f"from {self.source}, started {when(self.started_at)}"),
        ]


def _has_meta(ctx: DoctorContext) -> bool:
    if isinstance(ctx, ServerContext):
        return ctx.value("SELECT to_regclass('state_meta') IS NOT NULL") is True
    found = ctx.value(
        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'state_meta'"
    )
    return bool(found)


def check_copy(ctx: DoctorContext) -> CheckResult:
    """Report a ``db copy`` into this store that started and never finished."""
    facts = CopyFacts()
    if not ctx.exists or not ctx.header_ok:
        return CheckResult("copy", facts)  # the store and header checks report it
    if any(f.code.startswith(("schema-", "server-")) for f in ctx.findings):
        return CheckResult("copy", facts)  # no tables to read
    try:
        if not _has_meta(ctx):
            return CheckResult("copy", facts)
        # The key is a constant of ours: no parameter (the two contexts bind differently).
        value = ctx.value(f"SELECT value FROM state_meta WHERE key = '{COPY_MARK_KEY}'")
    except DoctorReadError:
        return CheckResult("copy", facts)  # the store's own checks report what cannot be read
    mark = parse_copy_mark(value if isinstance(value, str) else None)
    if mark is None:
        return CheckResult("copy", facts)
    facts.unfinished = True
    facts.source, facts.source_store_id = mark.source, mark.source_store_id
    facts.started_at, facts.command = mark.started_at, mark.command
    finding = Finding(
        "copy-unfinished",
        "error",
        f"a `db copy` from {mark.source} into this store started {when(mark.started_at)} "
        "and never finished (killed, or it failed): the store holds only part of its "
        "source",
        f"run `{mark.command}` again (it resumes, writing only what is missing, verifies, "
        "and clears this mark)"
        + (" with the password in PGPASSWORD or ~/.pgpass" if "://" in mark.command else ""),
    )
    return CheckResult("copy", facts, [finding])
