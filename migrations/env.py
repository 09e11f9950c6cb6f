"""Alembic environment for hermes_repo.

Three ways in, one engine setup:

* ``hermes-repo db upgrade`` / ``StateStore.open`` pass their own connection in
  ``config.attributes["connection"]`` (the store's engine, hooks included);
* ``alembic -x url=sqlite:///path/state.db ...`` or ``sqlalchemy.url`` in the ini;
* otherwise ``$HERMES_HOME/state.db`` (default ``~/.hermes/state.db``).

Migrations run in one real transaction (``transactional_ddl``): the engine's begin hook
emits ``BEGIN IMMEDIATE``, so a failing revision leaves no half-applied schema behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import context
from sqlalchemy import make_url
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from hermes_repo.engine import WRITE_OPTION, create_store_engine, db_path_for_home
from hermes_repo.models import Base
from hermes_repo.schema.fts import DERIVED_NAMES

config = context.config
target_metadata = Base.metadata


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    # FTS5 virtual tables, their shadow tables and source views, and the partial indexes
    # over rows longer than an index's cap are derived objects that live outside
    # MetaData; without this filter autogenerate proposes dropping them.
    if type_ in ("table", "index"):
        return name not in DERIVED_NAMES
    return True


def _configured_url() -> str | None:
    x_url = context.get_x_argument(as_dictionary=True).get("url")
    if x_url:
        return x_url
    ini_url = config.get_main_option("sqlalchemy.url")
    return ini_url or None


def _db_path() -> Path:
    url = _configured_url()
    if url is None:
        return db_path_for_home(None)
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        raise SystemExit(f"hermes_repo migrations need a SQLite file URL, got {url!r}")
    return Path(parsed.database)


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
    engine = create_store_engine(_db_path(), poolclass=NullPool)
    try:
        with engine.execution_options(**{WRITE_OPTION: True}).connect() as connection:
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
