"""Schema commands (``db upgrade``, ``db current``, ``db check``) on a PostgreSQL store.

The SQLite versions (:mod:`hermes_repo.maintenance.upgrade`) take a snapshot of the file first;
a server's backups are its own (``pg_dump``), and every revision runs in one transaction
(PostgreSQL's DDL is transactional), so a failing upgrade leaves the database as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from ..driver_errors import translate
from ..engine_pg import PgTarget, create_pg_engine, safe_url
from ..maintenance.upgrade import upgrade_server_schema
from ..retry import STORE_WRITE_BUDGET_S
from ..schema import migrate, server

__all__ = ["ServerRevision", "check_server", "server_revision", "upgrade_server"]


@dataclass(frozen=True)
class ServerRevision:
    """Where a PostgreSQL store stands against the migrations of this code."""

    location: str  # the URL without its password
    revision: str | None
    head: str
    status: str  # empty | foreign | unversioned | at-head | damaged | behind | ahead

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.location,
            "revision": self.revision,
            "head": self.head,
            "status": self.status,
        }


@contextmanager
def _engine(target: PgTarget) -> Iterator[Engine]:
    engine = create_pg_engine(target, poolclass=NullPool)
    try:
        yield engine
    except DBAPIError as exc:
        raise translate(exc, action=f"reading the schema of {safe_url(target.url)}") from exc
    finally:
        engine.dispose()


def _revision(engine: Engine, target: PgTarget) -> ServerRevision:
    with engine.connect() as conn:
        # A revision read through a missing schema or a wrong encoding would describe
        # some other state than the store's: refused the way an open refuses.
        server.check_database(conn, safe_url(target.url), schema=target.schema)
        status = migrate.schema_status(conn)
    return ServerRevision(safe_url(target.url), status.revision, status.head, status.status)


def server_revision(target: PgTarget) -> ServerRevision:
    """The revision and status of the store's database (reads only)."""
    with _engine(target) as engine:
        return _revision(engine, target)


def upgrade_server(target: PgTarget) -> tuple[ServerRevision, ServerRevision]:
    """Bring the database to head; the revision before and after. A database that is
    not a hermes_repo store, or is newer than this code, is refused."""
    with _engine(target) as engine:
        before = _revision(engine, target)
        if before.status != "at-head":
            # The upgrade every open of a server store runs too: one decision, one lock.
            upgrade_server_schema(engine, where=before.location, wait_s=STORE_WRITE_BUDGET_S)
        return before, _revision(engine, target)


def check_server(target: PgTarget) -> tuple[ServerRevision, str | None]:
    """The revision, and Alembic's description of any drift from the models (None: none)."""
    with _engine(target) as engine:
        rev = _revision(engine, target)
        drift = migrate.check(engine) if rev.status == "at-head" else None
        return rev, drift
