"""The schema: its revision against the code's head, its tables against the models.

:func:`revision_findings` judges the revision and the canonical tables that
:func:`~.store.check_store` read; :func:`check_schema` compares a store at head with the
models, as ``db check`` does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy.exc import DBAPIError

from ...models import Base
from ...schema import migrate
from ...schema.backup import read_only_engine
from ...schema.tables import CANONICAL_TABLES
from .context import (
    STOP_FIRST,
    CheckResult,
    DoctorContext,
    DoctorReadError,
    Finding,
    JournalFileError,
    error_text,
)
from .fixes import replace_command, salvage_commands

__all__ = ["SchemaFacts", "check_schema", "revision_findings"]

_SCHEMA_FINDINGS = frozenset(
    {
        "store-missing",
        "store-unreadable",
        "schema-empty",
        "schema-foreign",
        "schema-unversioned",
        "schema-behind",
        "schema-ahead",
        "schema-damaged",
        "schema-meta-missing",
        "file-not-a-database",
    }
)


def _has_model_columns(ctx: DoctorContext) -> bool:
    """Whether each canonical table has every column of this code's models."""
    for name in CANONICAL_TABLES:
        have = {str(r[1]) for r in ctx.rows(f"PRAGMA table_info({name})")}
        if not {c.name for c in Base.metadata.tables[name].columns} <= have:
            return False
    return True


def revision_findings(
    ctx: DoctorContext, revision: str | None, head: str | None, tables: set[str]
) -> list[Finding]:
    """What is wrong with the schema ``revision`` of a store holding ``tables``."""
    findings: list[Finding] = []
    at_head = revision is not None and revision == head
    upgrade = ctx.command("hermes-repo db upgrade")
    missing = [t for t in CANONICAL_TABLES if t not in tables]
    if revision is None and tables and not missing and _has_model_columns(ctx):
        status = migrate.SchemaStatus(None, migrate.head_revision(), "unversioned")
        findings.append(
            Finding(
                "schema-unversioned",
                "error",
                f"{ctx.db_path} holds the hermes_repo tables but no schema revision (its "
                "alembic_version table is missing or empty): every open of the store fails",
                migrate.damaged_schema_fix(ctx.db_path, status).split("; ", 1)[1],
            )
        )
    elif at_head and missing:
        status = migrate.SchemaStatus(revision, migrate.head_revision(), "damaged", tuple(missing))
        findings.append(
            Finding(
                "schema-meta-missing" if missing == ["state_meta"] else "schema-damaged",
                "error",
                f"{ctx.db_path} is at schema head but lacks the table(s) "
                f"{', '.join(missing)}: every open of the store fails",
                migrate.damaged_schema_fix(ctx.db_path, status).split("; ", 1)[1],
            )
        )
    elif revision is None:
        if tables:
            findings.append(
                Finding(
                    "schema-foreign",
                    "error",
                    f"{ctx.db_path} holds tables but no hermes_repo schema revision: "
                    "it is not a hermes_repo store",
                    "point --home / HERMES_HOME at the folder of the hermes_repo store",
                )
            )
        else:
            findings.append(
                Finding(
                    "schema-empty",
                    "error",
                    "the store has no schema yet",
                    f"run `{upgrade}`",
                )
            )
    elif not at_head:
        if revision in migrate.known_revisions():
            findings.append(
                Finding(
                    "schema-behind",
                    "error",
                    f"the schema is at revision {revision}, behind this code "
                    f"({head}): the store refuses to open",
                    f"{STOP_FIRST} `{upgrade}` (it backs up first)",
                )
            )
        else:
            findings.append(
                Finding(
                    "schema-ahead",
                    "error",
                    f"the schema is at revision {revision}, newer than this version "
                    "of hermes_repo knows",
                    "upgrade the hermes_repo package (`pip install -U hermes_repo`)",
                )
            )
    return findings


@dataclass
class SchemaFacts:
    """The schema compared with the models, as `db check` does (Alembic's comparison)."""

    title = "schema"
    drift: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The facts as JSON-ready data."""
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """The facts as (label, value) lines for a person."""
        return [("models", "no drift" if self.drift is None else f"DRIFT: {self.drift}")]


def check_schema(ctx: DoctorContext) -> CheckResult:
    """A store at head whose tables, columns or indexes differ from the models.

    Run only where the store check found a sound revision at head: a missing table
    is that check's finding, and a store behind head differs by design.
    """
    codes = {f.code for f in ctx.findings}
    if not ctx.exists or not ctx.header_ok or codes & _SCHEMA_FINDINGS:
        return CheckResult("schema", None)
    try:
        revision = ctx.value("SELECT version_num FROM alembic_version")
    except JournalFileError:
        raise  # reported once, by check_journal
    except DoctorReadError:
        return CheckResult("schema", None)  # the store check reported why
    if revision != migrate.head_revision():
        return CheckResult("schema", None)
    engine = read_only_engine(ctx.db_path, ctx.driver)
    try:
        drift = migrate.check(engine)
    except DBAPIError as exc:
        raise DoctorReadError(error_text(exc.orig or exc)) from exc
    finally:
        engine.dispose()
    facts = SchemaFacts(drift=" ".join(drift.split()) if drift else None)
    if drift is None:
        return CheckResult("schema", facts)
    recover = salvage_commands(ctx.db_path)[1]
    finding = Finding(
        "schema-drift",
        "error",
        f"the schema of {ctx.db_path} differs from the models ({facts.drift})",
        f"{STOP_FIRST} `{recover}` (a store built by the migrations) and install it with "
        f"`{replace_command(ctx.db_path)}`",
    )
    return CheckResult("schema", facts, [finding])
