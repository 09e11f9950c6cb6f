"""What a PostgreSQL server can promise of an acknowledged write when it fails over.

A commit the store acknowledged is on the primary's disk. Whether it is also on a
standby before the acknowledgement depends on two settings: ``synchronous_standby_names``
(which standbys a commit waits for) and ``synchronous_commit`` (``on`` or
``remote_apply``: wait for them; ``remote_write``: wait until their OS has it; ``local``
or ``off``: do not wait). With no standby named, or a commit that does not wait, a
standby promoted after the primary is lost may lack the last acknowledged writes. The
check reads both settings, whether this server is itself a standby
(``pg_is_in_recovery()``) and the standbys streaming from it (``pg_stat_replication``,
their ``sync_state``), and :func:`classify` draws the verdict from them:

* one server, no standby: a note (nothing to fix; a failover is not protected, a write
  is as durable as this server's ``fsync``);
* standbys streaming, but commits do not wait for one: a warning naming the settings;
* a synchronous standby named but none connected: a warning (commits wait for it);
* a synchronous standby connected and commits waiting for it: OK.

``synchronous_commit`` is read in the doctor's own session: a role or database setting
(``ALTER ROLE ... SET``) applies to it as to the store's writers that log in the same
way. Without ``pg_monitor`` (or superuser) ``pg_stat_replication`` hides the standbys'
state: the verdict then says it cannot tell.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .context import CheckResult, DoctorContext, Finding

__all__ = [
    "DurabilityFacts",
    "Standby",
    "Verdict",
    "check_durability",
    "classify",
    "durability_findings",
]

Verdict = Literal[
    "single-server", "asynchronous", "sync-standby-missing", "synchronous", "standby", "unknown"
]

#: ``synchronous_commit`` values that make a commit wait for the synchronous standbys.
WAITING = frozenset({"on", "remote_apply", "remote_write"})

_SETTINGS_SQL = (
    "SELECT current_setting('synchronous_commit'), "
    "current_setting('synchronous_standby_names'), pg_is_in_recovery()"
)
_STANDBYS_SQL = (
    "SELECT application_name, state, sync_state FROM pg_stat_replication ORDER BY application_name"
)


@dataclass(frozen=True)
class Standby:
    """One standby streaming from this server (``pg_stat_replication``)."""

    name: str
    state: str | None
    sync_state: str | None  # async, potential, sync, quorum; None when hidden


@dataclass
class DurabilityFacts:
    """The settings and standbys that decide whether a failover keeps every commit."""

    title = "durability"
    synchronous_commit: str
    synchronous_standby_names: str
    in_recovery: bool
    standbys: list[Standby] = field(default_factory=list)
    verdict: Verdict = "unknown"

    @property
    def commits_wait_for_standby(self) -> bool:
        """True when a commit is acknowledged only once a synchronous standby has it."""
        return self.verdict == "synchronous"

    def note(self) -> str | None:
        """What needs nothing done but should be known (see the module docstring)."""
        if self.verdict == "single-server":
            if self.synchronous_commit.strip().lower() == "off":
                # Not even the server's own disk: the commit returns before its flush.
                return (
                    "one PostgreSQL server, no standby, and synchronous_commit = off: a "
                    "failover is not protected, and a crash of this server can lose the "
                    "last acknowledged writes (set synchronous_commit = on to keep them)"
                )
            return (
                "one PostgreSQL server, no standby: a failover is not protected; an "
                "acknowledged write is as durable as this server's disk (fsync)"
            )
        if self.verdict == "standby":
            return "this server is a standby (in recovery): the store writes to its primary"
        if self.verdict == "unknown":
            return (
                "standbys stream from this server but their sync_state is hidden from "
                "this user: grant it pg_monitor to let the doctor tell whether commits "
                "wait for a synchronous standby"
            )
        return None

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return {
            **asdict(self),
            "standbys": [asdict(s) for s in self.standbys],
            "commits_wait_for_standby": self.commits_wait_for_standby,
        }

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        names = self.synchronous_standby_names or "(empty)"
        streaming = ", ".join(f"{s.name} ({s.sync_state or '?'})" for s in self.standbys) or "none"
        verdict = {
            "single-server": "one server: not protected against a failover",
            "asynchronous": "commits do NOT wait for a standby: a failover may lose them",
            "sync-standby-missing": "commits wait for a synchronous standby that is not connected",
            "synchronous": "OK: commits wait for a synchronous standby",
            "standby": "this server is a standby",
            "unknown": "cannot tell (pg_stat_replication hidden)",
        }[self.verdict]
        return [
            ("synchronous_commit", self.synchronous_commit),
            ("sync standby names", names),
            ("standbys", streaming),
            ("failover", verdict),
        ]


def classify(
    synchronous_commit: str,
    synchronous_standby_names: str,
    in_recovery: bool,
    standbys: list[Standby],
) -> Verdict:
    """The verdict on a server with these settings and these streaming standbys."""
    if in_recovery:
        return "standby"
    waits = synchronous_commit.strip().lower() in WAITING
    named = bool(synchronous_standby_names.strip())
    if not standbys:
        return "sync-standby-missing" if waits and named else "single-server"
    if not named or not waits:
        return "asynchronous"
    if all(s.sync_state is None for s in standbys):
        return "unknown"
    if any(s.sync_state in ("sync", "quorum") for s in standbys):
        return "synchronous"
    return "sync-standby-missing"  # named, but none of those streaming matches


def durability_findings(facts: DurabilityFacts) -> list[Finding]:
    """The warnings the verdict in ``facts`` calls for (none for a note or OK)."""
    names = ", ".join(s.name for s in facts.standbys) or "STANDBY"
    if facts.verdict == "asynchronous":
        why = (
            f"synchronous_commit is {facts.synchronous_commit}"
            if facts.synchronous_commit.lower() not in WAITING
            else "synchronous_standby_names is empty"
        )
        return [
            Finding(
                "failover-may-lose-writes",
                "warning",
                f"{len(facts.standbys)} standby(s) stream from this server but commits do "
                f"not wait for any ({why}): a write the store acknowledged may be missing "
                "from a standby promoted after a failover",
                f"on the primary set synchronous_standby_names = 'FIRST 1 ({names})' and "
                "synchronous_commit = on (or remote_apply), then `SELECT "
                "pg_reload_conf()`",
            )
        ]
    if facts.verdict == "sync-standby-missing":
        return [
            Finding(
                "sync-standby-missing",
                "warning",
                "synchronous_standby_names is "
                f"'{facts.synchronous_standby_names}' but no standby it names is connected "
                "as synchronous: every commit waits (writers stall) until one is",
                "start or reconnect the standby (its primary_conninfo application_name "
                "must be one synchronous_standby_names lists), or empty "
                "synchronous_standby_names to run on one server knowingly",
            )
        ]
    return []


def check_durability(ctx: DoctorContext) -> CheckResult:
    """Whether commits wait for a synchronous standby (PostgreSQL stores)."""
    ((commit, names, in_recovery),) = ctx.rows(_SETTINGS_SQL)
    standbys = [
        Standby(str(name or ""), state and str(state), sync and str(sync))
        for name, state, sync in ctx.rows(_STANDBYS_SQL)
    ]
    facts = DurabilityFacts(str(commit), str(names or ""), bool(in_recovery), standbys)
    facts.verdict = classify(
        facts.synchronous_commit, facts.synchronous_standby_names, facts.in_recovery, standbys
    )
    return CheckResult("durability", facts, durability_findings(facts))
