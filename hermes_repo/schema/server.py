"""What a PostgreSQL database must be before a store opens on it, and the migration lock.

* **UTF8 only.** A conversation holds any Unicode text. A ``SQL_ASCII`` database stores
  bytes unchecked (psycopg then hands back ``bytes`` where text belongs) and a
  ``LATIN1`` one cannot hold most of Unicode; either ends in a driver traceback halfway
  through some later write. They are refused at open with the encoding found and the
  fix. The client side is forced to UTF8 by the engine (``client_encoding`` in the
  startup packet, which overrides ``PGCLIENTENCODING`` and which PgBouncer passes
  through), so this check only fires for a client encoding set some other way.
* **One schema, the configured one.** A store lives in the first schema its search_path
  names (``?hermes_schema=NAME``, ``options=-csearch_path=NAME`` or the role's
  setting). When that schema does not exist the server silently works in the next one,
  perhaps another store's: refused at open instead.
* **One migration at a time.** Several hosts opening a fresh database at once would
  each run the migrations; the losers met a duplicate ``alembic_version`` or, reading
  the schema halfway through the winner's commit, took it for a damaged store. The
  migration runs holding a transaction-level advisory lock (released by its own COMMIT
  or ROLLBACK, so safe behind a transaction-mode pooler), and whoever gets the lock
  reads the schema's status again before deciding anything: a loser finds the
  winner's schema at head and opens it. One key for the whole database, not one per
  schema: two stores in two schemas install the same extensions, which must not race
  either.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, text
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from ..driver_errors import pg_sqlstate
from ..engine import WRITE_OPTION
from ..errors import ConfigurationError, DatabaseBusyError

__all__ = ["MIGRATION_LOCK_KEY", "check_database", "configured_schema", "migration_lock"]

#: Hashed by the server (``hashtext``) into the advisory lock's key.
MIGRATION_LOCK_KEY = "hermes_repo.migrate"

_UTF8 = "UTF8"
_LOCK_NOT_AVAILABLE = "55P03"
# One round trip at open: the encodings, the schema the connection works in, what its
# search_path says, and the schemas the store's table names resolve to.
_FACTS_SQL = (
    "SELECT current_setting('server_encoding'), current_setting('client_encoding'), "
    "current_schema(), current_setting('search_path'), current_user, "
    "ARRAY(SELECT DISTINCT n.nspname FROM unnest(ARRAY['alembic_version', 'sessions', "
    "'messages', 'state_meta']) AS t(name) JOIN pg_class c ON c.oid = to_regclass(t.name) "
    "JOIN pg_namespace n ON n.oid = c.relnamespace)"
)


def check_database(conn: Connection, where: str, *, schema: str | None = None) -> None:
    """Refuse a database, or a client connection, whose encoding is not UTF8, and a
    connection whose first configured schema (``schema``: the one the URL asked for) is
    not the one it works in."""
    server, client, current, path, user, found = conn.execute(text(_FACTS_SQL)).one()
    if str(server).upper() != _UTF8:
        raise ConfigurationError(
            f"{where} is a database of encoding {server}; a store needs UTF8 (every "
            "Unicode character of a conversation must round-trip). Create the database "
            "with CREATE DATABASE name ENCODING 'UTF8' TEMPLATE template0 (LC_COLLATE and "
            "LC_CTYPE 'C' or a UTF-8 locale) and point the URL at it"
        )
    if str(client).upper() != _UTF8:
        raise ConfigurationError(
            f"{where}: the connection's client encoding is {client}, not UTF8; remove "
            "client_encoding from PGOPTIONS or the role's and database's settings "
            "(ALTER ROLE / ALTER DATABASE ... RESET client_encoding)"
        )
    expected = configured_schema(str(path), current, str(user))
    if schema is not None and expected != schema:
        # hermes_schema went out as a startup option and did not arrive: a pooler in
        # between drops it (PgBouncer's ignore_startup_parameters).
        raise ConfigurationError(
            f"{where}: the store's schema is {schema} but the connection's search_path "
            f"is {path}: something between the store and the server dropped the startup "
            f"option (a pooler's ignore_startup_parameters); set it for the role instead "
            f"(ALTER ROLE {user} SET search_path = {schema}) and leave hermes_schema in "
            "the URL, it is checked at every open"
        )
    if expected is not None and current == expected:
        elsewhere = sorted({str(name) for name in found or ()} - {current})
        if elsewhere:
            # Unqualified names would reach another schema's store tables, which this
            # schema lacks: a migration or a write would mix the two stores.
            raise ConfigurationError(
                f"{where}: the store's schema {current} lacks store tables that its "
                f"search_path ({path}) finds in schema {', '.join(elsewhere)}, another "
                f"store's; the store never uses another schema's tables: give it a "
                f"search_path of its own schema alone (?hermes_schema={current})"
            )
        return
    if expected is None:
        raise ConfigurationError(
            f"{where}: no schema of the search_path ({path}) exists, so the store has no "
            "schema to live in; create one (CREATE SCHEMA name) and name it with "
            "?hermes_schema=name in the URL"
        )
    # The search_path names a schema that does not exist: the server would quietly
    # use the next one, which may hold another store's tables.
    raise ConfigurationError(
        f"{where}: the store's schema {expected} does not exist (search_path {path}), "
        f"and the store never falls back to another schema's tables; create it (CREATE "
        f"SCHEMA {expected}) or correct the schema named in the URL"
    )


def configured_schema(path: str, current: str | None, user: str) -> str | None:
    """The schema a ``search_path`` names first (``"$user"`` counts when it exists,
    which is when it is ``current``); None when it names none."""
    for entry in (e.strip() for e in path.split(",")):
        if not entry:
            continue
        name = entry[1:-1].replace('""', '"') if entry.startswith('"') else entry.lower()
        if name == "$user":
            if current == user:
                return user
            continue
        return name
    return None


@contextmanager
def migration_lock(engine: Engine, *, wait_s: float) -> Iterator[Connection]:
    """A connection in a transaction holding the database's migration lock.

    Waits at most ``wait_s`` for another host's migration to commit (``lock_timeout``:
    past it the server raises 55P03, a transient error the caller's retry budget
    handles). The transaction commits when the block ends normally, rolls back when it
    raises; either releases the lock.
    """
    # At least 1 ms: lock_timeout 0 means "wait for ever".
    timeout_ms = max(1, int(wait_s * 1000))
    with engine.execution_options(**{WRITE_OPTION: True}).connect() as conn, conn.begin():
        conn.execute(text("SELECT set_config('lock_timeout', :t, true)"), {"t": f"{timeout_ms}ms"})
        try:
            conn.execute(
                text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": MIGRATION_LOCK_KEY}
            )
        except DBAPIError as exc:
            if pg_sqlstate(exc) != _LOCK_NOT_AVAILABLE:
                raise
            raise DatabaseBusyError(
                f"another process has been migrating this database's schema for the whole "
                f"{wait_s:g} s budget (it holds the advisory lock {MIGRATION_LOCK_KEY!r}; "
                "pg_stat_activity shows it); let it finish and open again, or raise "
                "write_budget_s",
                elapsed_s=wait_s,
            ) from exc
        yield conn
