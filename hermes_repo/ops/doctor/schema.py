"""The schema: its revision against the code's head, its tables against the models.

:func:`revision_findings` judges the revision and the canonical tables that
:func:`~.store.check_store` read; :func:`check_schema` compares a store at head with the
models, as ``db check`` does.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, Final

from ...schema.head import HEAD_REVISION
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


#: The fingerprint (:func:`schema_fingerprint`) of a store the migrations built at
#: each revision listed: a store at head whose schema has this fingerprint is the
#: migrations' schema, object for object and statement for statement, so it cannot
#: differ from the models (the migrations' own test proves they agree) and the doctor
#: need not load Alembic to compare them. Any other fingerprint (a dropped index, an
#: added column, another tool's table, SQL text another SQLite version wrote) takes
#: Alembic's full comparison, which names the drift if there is one. A test builds a
#: store by the migrations and checks the value here, so a new migration cannot leave
#: it stale: it then fails, naming the new value.
HEAD_FINGERPRINTS: Final[dict[str, str]] = {
    "0007_tool_call_search": "cbc6829ebd8efd67d6a0034b3297e2a2a8546630de4e39f2b399c173feaa2c92",
}


def schema_fingerprint(ctx: DoctorContext) -> str:
    """A sha256 of every schema object of the store (type, name, table and its SQL with
    runs of whitespace made one space), in name order.

    ``sqlite_stat*`` tables are left out: ``ANALYZE`` makes them and they change no
    table, column or index.
    """
    rows = ctx.rows(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_stat%' ORDER BY type, name"
    )
    digest = hashlib.sha256()
    for kind, name, table, sql in rows:
        text = " ".join(str(sql).split()) if sql is not None else ""
        digest.update(f"{kind}\x1f{name}\x1f{table}\x1f{text}\x1e".encode())
    return digest.hexdigest()


def _has_model_columns(ctx: DoctorContext) -> bool:
    """Whether each canonical table has every column of this code's models."""
    from ...models import Base  # only for a store that lost its revision

    for name in CANONICAL_TABLES:
        have = {str(r[1]) for r in ctx.rows(f"PRAGMA table_info({name})")}
        if not {c.name for c in Base.metadata.tables[name].columns} <= have:
            return False
    return True


def revision_findings(
    ctx: DoctorContext, revision: str | None, head: str | None, tables: set[str]
) -> list[Finding]:
    """What is wrong with the schema ``revision`` of a store holding ``tables``."""
    at_head = revision is not None and revision == head
    missing = [t for t in CANONICAL_TABLES if t not in tables]
    if at_head and not missing:
        return []  # the usual case: nothing below applies, and none of it is loaded
    from ...schema import migrate  # the findings' advice (it loads the ORM models)

    findings: list[Finding] = []
    upgrade = ctx.command("hermes-repo db upgrade")
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
    if revision != HEAD_REVISION:
        return CheckResult("schema", None)
    if HEAD_FINGERPRINTS.get(HEAD_REVISION) == schema_fingerprint(ctx):
        return CheckResult("schema", SchemaFacts(drift=None))
    return CheckResult("schema", *_compare_with_models(ctx))


def _compare_with_models(ctx: DoctorContext) -> tuple[SchemaFacts, list[Finding]]:
    """Alembic's comparison of the store with the models (as ``db check`` does)."""
    from sqlalchemy.exc import DBAPIError

    from ...schema import migrate
    from ...schema.backup import read_only_engine

    engine = read_only_engine(ctx.db_path, ctx.driver)
    try:
        drift = migrate.check(engine)
    except DBAPIError as exc:
        raise DoctorReadError(error_text(exc.orig or exc)) from exc
    finally:
        engine.dispose()
    facts = SchemaFacts(drift=" ".join(drift.split()) if drift else None)
    if drift is None:
        return facts, []
    recover = salvage_commands(ctx.db_path)[1]
    finding = Finding(
        "schema-drift",
        "error",
        f"the schema of {ctx.db_path} differs from the models ({facts.drift})",
        f"{STOP_FIRST} `{recover}` (a store built by the migrations) and install it with "
        f"`{replace_command(ctx.db_path)}`",
    )
    return facts, [finding]
