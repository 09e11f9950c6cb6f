"""Alembic environment for hermes_repo.

Three ways in, one engine setup:

* ``hermes-repo db upgrade`` / ``StateStore.open`` pass their own connection in
  ``config.attributes["connection"]`` (the store's engine, hooks included);
* ``alembic -x url=sqlite:///path/state.db ...``,
  ``alembic -x url=postgresql+psycopg://user:pw@host/db ...`` or ``sqlalchemy.url`` in
  the ini;
* otherwise the default store, ``$HERMES_HOME/hermes-repo/state.db`` (default
  ``~/.hermes/hermes-repo/state.db``; see :mod:`hermes_repo.homes`).

On PostgreSQL the migration holds the database's migration advisory lock
(``hermes_repo.schema.server``) for its transaction: the store's own paths take it
before they pass their connection in, and a migration run by ``alembic`` itself takes
it here.

Migrations run in one real transaction (``transactional_ddl``): on SQLite the engine's
begin hook emits ``BEGIN IMMEDIATE``; PostgreSQL's DDL is transactional. A failing
revision leaves no half-applied schema behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import context
from sqlalchemy import make_url, text
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from hermes_repo.engine import WRITE_OPTION, create_store_engine, db_path_for_home
from hermes_repo.engine_pg import PgTarget, create_pg_engine, resolve_url
from hermes_repo.models import Base
from hermes_repo.schema.fts import DERIVED_NAMES
from hermes_repo.schema.server import MIGRATION_LOCK_KEY

config = context.config
target_metadata = Base.metadata


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    # FTS5 virtual tables, their shadow tables and source views, the partial indexes
    # over rows longer than an index's cap, and PostgreSQL's search columns are derived
    # objects that live outside MetaData; without this filter autogenerate proposes
    # dropping them.
    if type_ in ("table", "index", "column"):
        return name not in DERIVED_NAMES
    return True


def _configured_url() -> str | None:
    x_url = context.get_x_argument(as_dictionary=True).get("url")
    if x_url:
        return x_url
    ini_url = config.get_main_option("sqlalchemy.url")
    return ini_url or None


def _target() -> Path | PgTarget:
    """The SQLite file or the PostgreSQL database to migrate."""
    url = _configured_url()
    if url is None:
        return db_path_for_home(None)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database:
        return Path(parsed.database)
    if parsed.get_backend_name() == "postgresql":
        target = resolve_url(parsed)
        assert target is not None  # a URL was given
        return target
    raise SystemExit(
        "hermes_repo migrations need a SQLite file URL (sqlite:///path/state.db) or a "
        f"PostgreSQL one (postgresql+psycopg://...), got {parsed.render_as_string()!r}"
    )


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        transactional_ddl=True,
        include_name=include_name,
        compare_type=True,
    )


def run_migrations_offline() -> None:
    context.configure(
        url=_configured_url() or f"sqlite:///{db_path_for_home(None)}",
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        transactional_ddl=True,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    given = config.attributes.get("connection")
    if given is not None:
        _configure(given)
        with context.begin_transaction():
            context.run_migrations()
        return
    target = _target()
    engine = (
        create_store_engine(target, poolclass=NullPool)
        if isinstance(target, Path)
        else create_pg_engine(target, poolclass=NullPool)
    )
    try:
        with engine.execution_options(**{WRITE_OPTION: True}).connect() as connection:
            _configure(connection)
            with context.begin_transaction():
                if isinstance(target, PgTarget):
                    # The lock StateStore.open and `hermes-repo db upgrade` take: a host
                    # opening the store meanwhile waits for this migration, and this one
                    # reads the revision only once it holds the lock.
                    connection.execute(
                        text("SELECT pg_advisory_xact_lock(hashtext(:k))"),
                        {"k": MIGRATION_LOCK_KEY},
                    )
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
