"""The doctor on a PostgreSQL store: the checks that make sense on a server.

A server keeps its own files, so the file checks (header, journal, quick_check, FTS5,
quarantine, snapshots, holders) do not apply. What does: the connection (and the
server's version), the revision against this code's head and drift from the models,
the validity of the store's indexes (a failed ``CREATE INDEX CONCURRENTLY`` or
``REINDEX CONCURRENTLY`` leaves an invalid one that the planner ignores), the
extensions search needs, the canonical counts with the sessions' counters against
their rows, whether commits wait for a synchronous standby (:mod:`.durability`: what a
failover can lose), and the spool files in ``home`` (a server outage is when they fill). Every
read runs in one ``READ ONLY`` transaction that is rolled back.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.exc import DBAPIError

from ...driver_errors import describe
from ...engine_pg import PgTarget
from ...maintenance.sqlite_only import SEARCH_INDEXES, reindex_commands
from ...schema import migrate
from ...schema.tables import CANONICAL_TABLES, COUNT_SQL
from .context import Check, CheckResult, DoctorContext, DoctorReadError, Finding
from .copying import check_copy
from .durability import check_durability
from .report import DoctorReport, collect
from .server_context import ServerContext
from .spool import check_spool
from .values import check_server_values

__all__ = [
    "SERVER_CHECKS",
    "ServerContext",
    "ServerFacts",
    "ServerIndexFacts",
    "ServerSchemaFacts",
    "ServerStoreFacts",
    "diagnose_server",
]

#: Extensions revision 0004 creates: trigram search and accent folding.
EXTENSIONS = ("pg_trgm", "unaccent")

_INDEXES_SQL = (
    "SELECT c.relname, i.indisvalid, i.indisready FROM pg_index i "
    "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid "
    "WHERE t.relnamespace = current_schema()::regnamespace AND t.relname = ANY(%(tables)s) "
    "ORDER BY c.relname"
)
# Sessions whose message_count is not the number of their active rows.
_SERVER_SQL = "SELECT current_setting('server_version'), current_database()"
_COUNTER_DRIFT_SQL = (
    "SELECT count(*) FROM sessions s WHERE s.message_count <> "
    "(SELECT count(*) FROM messages m WHERE m.session_id = s.id AND m.active = 1)"
)
_RECOUNT_SQL = (
    "UPDATE sessions s SET message_count = (SELECT count(*) FROM messages m "
    "WHERE m.session_id = s.id AND m.active = 1)"
)


def _ctx(ctx: DoctorContext) -> ServerContext:
    assert isinstance(ctx, ServerContext), "a server check runs on a ServerContext"
    return ctx


@dataclass
class ServerFacts:
    """The server the store runs on."""

    title = "server"
    url: str
    server_version: str | None = None
    database: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        return [
            ("url", self.url),
            ("server", f"PostgreSQL {self.server_version or '?'}"),
            ("database", self.database or "?"),
        ]


def check_server(ctx: DoctorContext) -> CheckResult:
    """The connection: which server, which database."""
    sctx = _ctx(ctx)
    facts = ServerFacts(url=str(sctx.target))
    try:
        ((version, database),) = sctx.rows(
            "SELECT current_setting('server_version'), current_database()"
        )
    except DoctorReadError as exc:
        finding = Finding(
            "server-unreachable",
            "error",
            f"the PostgreSQL database {sctx.target} cannot be read: {exc}",
            "start the server (or fix the network), check the URL's user, password and "
            f"database, then run `{sctx.command('hermes-repo doctor')}`; meanwhile "
            "transcripts go to the spool in --home",
        )
        return CheckResult("server", facts, [finding])
    facts.server_version, facts.database = str(version), str(database)
    return CheckResult("server", facts)


@dataclass
class ServerSchemaFacts:
    """The store's revision against this code's head, and drift from the models."""

    title = "schema"
    revision: str | None
    head: str
    status: str
    drift: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "at_head": self.status == "at-head"}

    def rows(self) -> list[tuple[str, str]]:
        out = [("revision", f"{self.revision or '-'} (head {self.head}: {self.status})")]
        out.append(("drift", self.drift or "none"))
        return out


def check_server_schema(ctx: DoctorContext) -> CheckResult:
    """Revision at head, and Alembic's comparison with the models."""
    sctx = _ctx(ctx)
    status = migrate.schema_status(sctx.server_connection())
    facts = ServerSchemaFacts(status.revision, status.head, status.status)
    findings: list[Finding] = []
    upgrade = sctx.command("hermes-repo db upgrade")
    if status.status == "empty":
        # As a file's doctor says of a missing file: no store here, and how to make one
        # (a read never builds it), not a revision to catch up with.
        findings.append(
            Finding(
                "store-missing",
                "error",
                f"there is no store in {sctx.target} (the database is empty: no "
                "hermes_repo schema; the URL may name the wrong database)",
                f"check --url / HERMES_REPO_URL; to create the store there run `{upgrade}` "
                "or import into it",
            )
        )
    elif status.status == "behind":
        findings.append(
            Finding(
                "schema-behind",
                "error",
                f"the database is at revision {status.revision or '(none)'}, this code's head "
                f"is {status.head}",
                f"run `{upgrade}`",
            )
        )
    elif status.status != "at-head":
        findings.append(
            Finding(
                f"schema-{status.status}",
                "error",
                f"the database is {status.status} (revision {status.revision or '-'}, head "
                f"{status.head}); this code cannot use it as a store",
                "point --url / HERMES_REPO_URL at a hermes_repo store, or install the "
                "hermes_repo version whose head it is",
            )
        )
    else:
        try:
            facts.drift = migrate.check(sctx.engine)
        except DBAPIError as exc:
            raise DoctorReadError(describe(exc)) from exc
        if facts.drift:
            findings.append(
                Finding(
                    "schema-drift",
                    "error",
                    f"the schema differs from this code's models: {facts.drift}",
                    "undo the manual change (compare with `alembic -x url=... check`), or "
                    "restore the database from a `pg_dump` taken before it",
                )
            )
    return CheckResult("schema", facts, findings)


@dataclass
class ServerIndexFacts:
    """The store's indexes, valid or not, and the extensions search needs."""

    title = "indexes"
    valid: list[str] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extensions: dict[str, bool] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        out = [("valid", f"{len(self.valid)} index(es)")]
        if self.invalid:
            out.append(("invalid", ", ".join(self.invalid)))
        if self.missing:
            out.append(("missing", ", ".join(self.missing)))
        out.append(
            (
                "extensions",
                ", ".join(f"{n} {'yes' if ok else 'MISSING'}" for n, ok in self.extensions.items()),
            )
        )
        return out


def check_server_indexes(ctx: DoctorContext) -> CheckResult:
    """``pg_index.indisvalid`` of every index on the store's tables; search extensions."""
    sctx = _ctx(ctx)
    facts = ServerIndexFacts()
    for name, valid, ready in sctx.rows(_INDEXES_SQL, {"tables": list(CANONICAL_TABLES)}):
        (facts.valid if valid and ready else facts.invalid).append(str(name))
    if not any(
        f.code.startswith("schema-") for f in ctx.findings
    ):  # an old or foreign schema lacks them for its own reason
        facts.missing = [n for n in SEARCH_INDEXES if n not in facts.valid + facts.invalid]
    present = {str(r[0]) for r in sctx.rows("SELECT extname FROM pg_extension")}
    facts.extensions = {name: name in present for name in EXTENSIONS}
    findings: list[Finding] = []
    if facts.invalid:
        findings.append(
            Finding(
                "index-invalid",
                "error",
                f"index(es) {', '.join(facts.invalid)} are invalid (a concurrent build or "
                "reindex failed part way); queries do not use them",
                f"rebuild them with {reindex_commands(sctx.target, tuple(facts.invalid))}",
            )
        )
    if facts.missing:
        findings.append(
            Finding(
                "search-index-missing",
                "error",
                f"search index(es) {', '.join(facts.missing)} are missing; search scans "
                "every message",
                "restore the database from a `pg_dump` taken before they were dropped, or "
                "recreate them as migration 0004 does (`alembic -x url=... downgrade 0003` "
                "then `upgrade head`)",
            )
        )
    lacking = [name for name, ok in facts.extensions.items() if not ok]
    if lacking:
        findings.append(
            Finding(
                "extension-missing",
                "error",
                f"extension(s) {', '.join(lacking)} are not installed in the database; "
                "search needs them",
                "install the server's contrib package (Debian: postgresql-contrib), then as "
                "a superuser run " + "; ".join(f"CREATE EXTENSION {name}" for name in lacking),
            )
        )
    return CheckResult("indexes", facts, findings)


@dataclass
class ServerStoreFacts:
    """The canonical counts, and sessions whose counter disagrees with their rows."""

    title = "store"
    path: str
    counts: dict[str, int] = field(default_factory=dict)
    counter_drift: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        counts = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        return [("counts", counts or "-"), ("counter drift", f"{self.counter_drift} session(s)")]


def check_server_counts(ctx: DoctorContext) -> CheckResult:
    """Row counts, and ``sessions.message_count`` against the active rows."""
    sctx = _ctx(ctx)
    facts = ServerStoreFacts(path=str(sctx.target))
    if any(f.code.startswith(("schema-", "server-")) for f in ctx.findings):
        return CheckResult("store", facts)  # no store tables to count
    facts.counts = {name: int(sctx.rows(sql)[0][0]) for name, sql in COUNT_SQL.items()}
    facts.counter_drift = int(sctx.rows(_COUNTER_DRIFT_SQL)[0][0])
    findings: list[Finding] = []
    if facts.counter_drift:
        findings.append(
            Finding(
                "counter-drift",
                "warning",
                f"{facts.counter_drift} session(s) have a message_count that differs from "
                "their active messages (listings show the wrong number)",
                f"recount them: `psql ... -c '{_RECOUNT_SQL}'`",
            )
        )
    return CheckResult("store", facts, findings)


#: Report order; the spool check is the file doctor's own (it reads only ``home``).
SERVER_CHECKS: list[Check] = [
    check_server,
    check_durability,  # reads only the server's settings: before any store read fails
    check_server_schema,
    check_server_indexes,
    check_server_counts,
    check_copy,
    check_server_values,
    check_spool,
]


def diagnose_server(home: Path, target: PgTarget) -> DoctorReport:
    """Examine the PostgreSQL store ``target`` and the spool files in ``home``.

    Writes nothing. A check that cannot read is reported as a finding; once the server
    cannot be reached, only the spool (local files) is examined.
    """
    ctx = ServerContext(home, target)
    report = DoctorReport(path=str(target))
    try:
        collect(report, ctx, SERVER_CHECKS, _run)
    finally:
        ctx.close()
    return report


def _run(check: Check, ctx: DoctorContext) -> CheckResult | None:
    if check is not check_spool and any(f.code == "server-unreachable" for f in ctx.findings):
        return None  # only the local files can still be examined
    name = check.__name__.removeprefix("check_")
    try:
        return check(ctx)
    except DoctorReadError as exc:
        again = ctx.command("hermes-repo doctor")
        finding = Finding(
            f"{name}-unreadable",
            "error",
            f"the {name} check could not read the database: {exc}",
            f"fix the cause above, then run `{again}`",
        )
        return CheckResult(name, None, [finding])
