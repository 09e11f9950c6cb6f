"""Operations on a store *file* refuse a PostgreSQL store, naming the server's tool.

Snapshots, salvage, installing a file as the store and rebuilding FTS5 act on the
SQLite file in ``home``. On a PostgreSQL store that file is not the store: acting on it
would report success about the wrong data. Each such operation calls
:func:`refuse_on_server` first, before touching anything, with the store's URL as
:meth:`StateStore.open` takes it (``None``: ``$HERMES_REPO_URL``, else SQLite;
``"sqlite"``: the file whatever the environment says). The refusal says what the
operation applies to and what does the job on a server.
"""

from __future__ import annotations

from sqlalchemy.engine import URL

from ..engine_pg import SCHEMA_PARAM, PgTarget, resolve_url, split_secrets
from ..errors import NotOnThisBackendError

__all__ = [
    "SEARCH_INDEXES",
    "libpq_url",
    "refuse_on_server",
    "reindex_commands",
    "server_tool",
]

#: The search indexes revision 0004 makes on PostgreSQL (what ``REINDEX`` rebuilds).
SEARCH_INDEXES = (
    "ix_messages_search_vector",
    "ix_messages_search_trgm",
    "ix_messages_over_search_cap",
)

_DUMP = "hermes.dump"


def libpq_url(target: PgTarget) -> str:
    """The database as ``pg_dump``/``psql`` take it, without its password (they read
    ``PGPASSWORD`` or ``~/.pgpass``)."""
    # A password given as a query parameter stays out of the command too.
    given, _secrets = split_secrets(target.url)
    query = dict(given.query)
    schema = target.schema
    if schema is not None:
        # libpq knows no hermes_schema: the same search_path as a startup option.
        del query[SCHEMA_PARAM]
        options = query.get("options", "")
        options = options if isinstance(options, str) else " ".join(options)
        query["options"] = f"{options} -csearch_path={schema}".strip()
    url = URL.create(
        "postgresql",
        username=given.username,
        host=given.host,
        port=given.port,
        database=given.database,
        query=query,
    )
    return url.render_as_string(hide_password=False)


def reindex_commands(target: PgTarget, indexes: tuple[str, ...] = SEARCH_INDEXES) -> str:
    """The ``psql`` command rebuilding ``indexes`` without blocking writers (one ``-c``
    each: ``REINDEX ... CONCURRENTLY`` cannot run inside a transaction block)."""
    statements = " ".join(f"-c 'REINDEX INDEX CONCURRENTLY {name}'" for name in indexes)
    return f"`psql '{libpq_url(target)}' {statements}`"


def server_tool(job: str, target: PgTarget) -> str:
    """What does ``job`` (snapshot, search-index, salvage, replace) on a PostgreSQL server."""
    url = libpq_url(target)
    dump = f"`pg_dump -Fc -f {_DUMP} '{url}'`"
    if job == "snapshot":
        return (
            f"on PostgreSQL take a backup with {dump} and restore it with "
            f"`pg_restore -d NEW_DATABASE {_DUMP}` (then point --url at NEW_DATABASE)"
        )
    if job == "search-index":
        return (
            "PostgreSQL keeps the search columns itself; rebuild its search indexes with "
            f"{reindex_commands(target)}"
        )
    if job == "salvage":
        return (
            "recover a PostgreSQL database from the server's own backups (a base backup "
            f"with WAL archiving, or the last {dump} restored with `pg_restore`); to "
            "salvage a damaged SQLite file, run this without --url (HERMES_REPO_URL unset) "
            "and move the result with `hermes-repo db copy --to URL`"
        )
    if job == "replace":
        return (
            f"restore a dump into a new database (`createdb NEW_DATABASE && pg_restore -d "
            f"NEW_DATABASE {_DUMP}`), check it, then point --url / HERMES_REPO_URL at it"
        )
    raise ValueError(f"unknown job {job!r}")


def refuse_on_server(operation: str, job: str, url: str | URL | None = None) -> None:
    """Raise :class:`NotOnThisBackendError` when the store is on PostgreSQL.

    ``operation`` names what was asked (``"snapshot create"``); ``job`` selects the
    server's tool (see :func:`server_tool`). Returns quietly for a SQLite store.
    """
    target = resolve_url(url)
    if target is None:
        return
    raise NotOnThisBackendError(
        f"{operation} applies to SQLite stores (a file in --home), and this store is the "
        f"PostgreSQL database {target}; nothing was done; {server_tool(job, target)}"
    )
