"""Programmatic Alembic: the migrations that ship inside the package.

Alembic is imported only to run or inspect the migrations (``upgrade``, ``check``,
:func:`known_revisions`): opening a store that is already at :data:`HEAD_REVISION` reads
the revision row with SQLAlchemy and compares it with that constant, so a read pays
nothing for Alembic. A test checks the constant against Alembic's head of the shipped
migrations.
"""

from __future__ import annotations

import contextlib
import io
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import Connection

from ..engine import WRITE_OPTION
from ..errors import ConfigurationError
from ..models import Base
from .files import recovered_path

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

__all__ = [
    "CANONICAL_TABLES",
    "HEAD_REVISION",
    "SchemaStatus",
    "alembic_config",
    "alembic_head",
    "check",
    "current_revision",
    "damaged_schema_fix",
    "head_revision",
    "is_empty",
    "known_revisions",
    "migrations_dir",
    "missing_tables",
    "schema_status",
    "upgrade",
    "upgrade_in",
]


def migrations_dir() -> Path:
    """Where the migrations are: inside the installed wheel, or at the source root."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "migrations", package.parent / "migrations"):
        if (candidate / "env.py").is_file():
            return candidate
    raise ConfigurationError(
        "the hermes_repo migrations are missing from this installation; reinstall the package"
    )


HEAD_REVISION = "0006_tool_call_search"
"""The newest revision in ``migrations/versions``: a new migration changes it too (a test
compares it with Alembic's head, so the two cannot drift apart)."""


def alembic_config(connection: Connection | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def _script() -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str:
    """The schema revision this code builds and expects: :data:`HEAD_REVISION`."""
    return HEAD_REVISION


def alembic_head() -> str:
    """The head of the migrations as Alembic reads them from the scripts."""
    head = _script().get_current_head()
    if head is None:  # pragma: no cover - the package always ships a revision
        raise ConfigurationError("no migrations found")
    return head


def known_revisions() -> set[str]:
    return {rev.revision for rev in _script().walk_revisions()}


def current_revision(connection: Connection) -> str | None:
    """The revision recorded in ``alembic_version``; None when there is none.

    Read with one SELECT, as Alembic's ``MigrationContext`` reads it (the table in the
    connection's default schema); a table holding more than one row (branches, which
    these migrations never make) is left to Alembic, which refuses it by name.
    """
    if not inspect(connection).has_table("alembic_version"):
        return None
    rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    if len(rows) > 1:
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(connection).get_current_revision()
    return str(rows[0][0]) if rows else None


def is_empty(connection: Connection) -> bool:
    """True for a file with no schema of ours or anyone's: new, zero bytes, or downgraded
    to base (only Alembic's empty version table is left)."""
    return not set(inspect(connection).get_table_names()) - {"alembic_version"}


CANONICAL_TABLES = ("sessions", "messages", "state_meta")
"""The tables whose rows are the store's data (everything else is derived)."""


def missing_tables(connection: Connection) -> list[str]:
    """The canonical tables the file lacks (a hand edit or damage dropped them)."""
    present = set(inspect(connection).get_table_names())
    return [t for t in CANONICAL_TABLES if t not in present]


def _has_our_tables(connection: Connection) -> bool:
    """Every canonical table with every column of this code's models (Hermes' own
    ``state.db`` has tables of the same names, without our columns)."""
    insp = inspect(connection)
    if missing_tables(connection):
        return False
    for name in CANONICAL_TABLES:
        have = {c["name"] for c in insp.get_columns(name)}
        if not {c.name for c in Base.metadata.tables[name].columns} <= have:
            return False
    return True


@dataclass(frozen=True)
class SchemaStatus:
    """Where a file stands against the migrations shipped with this code.

    ``status`` is ``empty`` (no schema: build it), ``foreign`` (tables but no revision:
    not ours), ``unversioned`` (our tables, but the revision record is gone),
    ``at-head``, ``damaged`` (at head but a canonical table is missing, listed in
    ``missing``), ``behind`` (upgradable) or ``ahead`` (newer than this code: never
    touched).
    """

    revision: str | None
    head: str
    status: str
    missing: tuple[str, ...] = ()


def damaged_schema_fix(db_path: Path, status: SchemaStatus) -> str:
    """The cause and the fix for an ``unversioned`` or ``damaged`` schema, one sentence.

    ``state_meta`` holds only markers (``fts_stale``) that a repair re-derives, so a
    missing one is recreated by ``sessions repair``; a lost table of rows or a lost
    revision record is not guessed at: the rows are salvaged into a store the
    migrations build, which ``db replace`` installs.
    """
    home = shlex.quote(str(db_path.parent))
    source = shlex.quote(str(db_path))
    new_db = shlex.quote(str(recovered_path(db_path)))
    salvage = (
        f"salvage the rows with `hermes-repo sessions recover --source {source} --output "
        f"{new_db}` and install them "
        f"with `hermes-repo --home {home} db replace "
        f"{new_db}`, or restore a "
        f"snapshot taken before the damage (`hermes-repo --home {home} snapshot list`)"
    )
    if status.status == "unversioned":
        return (
            f"{db_path} holds the hermes_repo tables but no schema revision (its "
            f"alembic_version table is missing or empty), so its schema cannot be trusted; "
            f"{salvage}"
        )
    missing = ", ".join(status.missing)
    if status.missing == ("state_meta",):
        return (
            f"{db_path} is at schema head but its table state_meta is missing; stop every "
            f"process using the store, then run `hermes-repo --home {home} sessions repair` "
            "(it recreates state_meta, which holds only markers the repair re-derives)"
        )
    return (
        f"{db_path} is at schema head but its table(s) {missing} are missing, with every "
        f"row they held; {salvage}"
    )


def schema_status(connection: Connection) -> SchemaStatus:
    current = current_revision(connection)
    head = head_revision()
    missing: tuple[str, ...] = ()
    if current is None:
        if is_empty(connection):
            status = "empty"
        elif _has_our_tables(connection):
            status = "unversioned"
        else:
            status = "foreign"
    elif current == head:
        missing = tuple(missing_tables(connection))
        status = "damaged" if missing else "at-head"
    elif current in known_revisions():
        status = "behind"
    else:
        status = "ahead"
    return SchemaStatus(current, head, status, missing)


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the store in one transaction (a failing revision leaves nothing behind)."""
    from alembic import command

    with engine.execution_options(**{WRITE_OPTION: True}).connect() as conn:
        command.upgrade(alembic_config(conn), revision)


def upgrade_in(connection: Connection, revision: str = "head") -> None:
    """Upgrade within ``connection``'s open transaction, which the caller commits (the
    PostgreSQL migration lock is held by that transaction)."""
    from alembic import command

    command.upgrade(alembic_config(connection), revision)


def downgrade(engine: Engine, revision: str) -> None:
    from alembic import command

    with engine.execution_options(**{WRITE_OPTION: True}).connect() as conn:
        command.downgrade(alembic_config(conn), revision)


def check(engine: Engine) -> str | None:
    """None when the schema matches the models, else Alembic's description of the drift."""
    from alembic import command
    from alembic.util.exc import AutogenerateDiffsDetected

    with engine.connect() as conn, contextlib.redirect_stdout(io.StringIO()):
        # Alembic prints "No new upgrade operations detected." itself; the caller reports.
        config = alembic_config(conn)
        # Config binds sys.stdout when alembic is imported, past redirect_stdout's reach:
        # doctor --json must print nothing but its JSON.
        config.stdout = io.StringIO()
        try:
            command.check(config)
        except AutogenerateDiffsDetected as exc:
            return str(exc)
    return None
