"""The store on a PostgreSQL server: which URLs, the engine, and what differs from SQLite.

A store is chosen by URL: ``None`` (and no ``HERMES_REPO_URL``) is the embedded SQLite
file in ``home``; ``postgresql+psycopg://user:pw@host:port/db`` is a PostgreSQL
database. ``home`` still holds the local files either way (the transcript spool above
all: a server outage is exactly when the spool matters).

Why the engine is built this way:

* ``pool_pre_ping``: a connection the server dropped (a restart, ``pg_terminate_backend``,
  an idle timeout) is found and replaced at checkout, not met by the next write;
  SQLAlchemy's disconnect handling discards the rest of the pool when one is found dead.
* No session state between transactions, so a transaction-mode pooler (PgBouncer) may
  hand each transaction another server connection: server-side prepared statements are
  off (``prepare_threshold=None``) and nothing is ``SET`` at session level; a unit that
  needs a timeout sets it with ``SET LOCAL`` inside its own transaction.
* ``client_encoding=utf8`` in the startup packet: a conversation holds any Unicode text,
  and ``PGCLIENTENCODING=LATIN1`` in the environment must not make it unencodable.
* ``?hermes_schema=NAME`` puts the store in a schema of its own: it becomes
  ``-c search_path=NAME`` in the startup packet (the driver never sees the parameter).
  Behind a pooler that drops startup options, set the role's search_path instead
  (``ALTER ROLE ... SET search_path = NAME``); the open checks the schema either way.
* Transactions are the server's default ``READ COMMITTED``: the append's counters are an
  ``UPDATE ... SET n = n + k`` whose row lock serialises concurrent appends to a session.

The password never appears in an error, a log line or a ``repr``, whichever way it was
given: in the URL's userinfo, as a query parameter libpq reads (``?password=``,
``?sslpassword=``, a whole ``?conninfo=`` string), in ``PGPASSWORD`` or in ``~/.pgpass``.
Every message renders the URL with :func:`safe_url`, which masks all of them; the engine
is built from the URL *without* its secrets (they travel in ``connect_args``), so even
``repr(engine)`` and ``engine.url`` hold none; :func:`redact` is the last net for text the
store did not compose (a driver's message), used by the CLI on every line it prints.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from .backend import POSTGRESQL
from .engine import Driver
from .errors import ConfigurationError

__all__ = [
    "ACCEPTED_FORM",
    "SCHEMA_PARAM",
    "SQLITE_FILE",
    "URL_ENV",
    "PgTarget",
    "create_pg_engine",
    "load_psycopg",
    "pg_driver",
    "redact",
    "resolve_url",
    "safe_url",
    "split_secrets",
]

URL_ENV = "HERMES_REPO_URL"
SQLITE_FILE = "sqlite"
ACCEPTED_FORM = "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"
_DRIVERNAME = "postgresql+psycopg"
#: The URL query parameter naming the schema a store lives in (see :class:`PgTarget`).
SCHEMA_PARAM = "hermes_schema"
# Unquoted in search_path and SQL alike: lower case, so no folding can change it.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


#: libpq's connection parameters whose value is a secret, or may hold one (a whole
#: connection string: psycopg hands ``conninfo``/``dsn`` to libpq as one).
SECRET_PARAMS = frozenset({"password", "sslpassword", "conninfo", "dsn"})
_MASK = "***"
# ``password=...`` inside a connection string (quoted or not), and the userinfo password
# of a URL inside a value (``postgresql://user:pw@host``).
_CONNINFO_SECRET = re.compile(r"(?i)(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s&]*)")
_USERINFO_SECRET = re.compile(r"(://[^:/@\s]*:)([^@\s]*)(@)")
# Secrets seen by this process (URLs resolved, PGPASSWORD), for :func:`redact`. Shorter
# ones are left out: masking every "pw" in a message would garble it for nothing.
_KNOWN_SECRETS: set[str] = set()
_MIN_REDACTED = 4


def _is_secret(key: str) -> bool:
    return key.lower() in SECRET_PARAMS or "password" in key.lower()


def _mask_value(value: str) -> str:
    masked = _CONNINFO_SECRET.sub(lambda m: m.group(1) + _MASK, value)
    return _USERINFO_SECRET.sub(lambda m: m.group(1) + _MASK + m.group(3), masked)


def _remember(secret: str | None) -> None:
    if secret and len(secret) >= _MIN_REDACTED:
        _KNOWN_SECRETS.add(secret)


def split_secrets(url: URL) -> tuple[URL, dict[str, str]]:
    """``url`` without any secret (userinfo password, secret query parameters), and the
    secrets as psycopg connection keywords (``password``, ``sslpassword``...).

    The engine is built from the first and gets the second as ``connect_args``: libpq
    receives the same parameters, but the engine (its ``repr``, ``engine.url``, every
    message rendering it) never holds a password.
    """
    secrets: dict[str, str] = {}
    if url.password is not None:
        secrets["password"] = str(url.password)
    query: dict[str, str | tuple[str, ...]] = {}
    for key, value in url.query.items():
        if _is_secret(key):
            # A repeated parameter: libpq keeps the last one given.
            secrets[key] = value[-1] if isinstance(value, tuple) else value
        else:
            query[key] = value
    # URL.set ignores None (it cannot take a value away): the tuple's own _replace can.
    return url._replace(password=None).set(query=query), secrets


def safe_url(url: URL) -> str:
    """The URL as text with every secret masked: the only form it is ever shown in.

    The userinfo password and each secret query parameter (``password``,
    ``sslpassword``, ``conninfo``, ``dsn``, any ``*password*``) show as ``***``; a
    ``password=`` inside any other parameter's value is masked too.
    """
    query: dict[str, str | tuple[str, ...]] = {}
    for key, value in url.query.items():
        if _is_secret(key):
            query[key] = _MASK
        elif isinstance(value, tuple):
            query[key] = tuple(_mask_value(v) for v in value)
        else:
            query[key] = _mask_value(value)
    text = url.set(query=query).render_as_string(hide_password=True)
    # The query's "***" comes back percent-encoded; show it as the userinfo's is.
    return text.replace("=%2A%2A%2A", f"={_MASK}")


def redact(text: str) -> str:
    """``text`` with every secret this process has seen replaced by ``***``.

    The net under :func:`safe_url` for text the store did not compose itself (a
    driver's or server's message): the CLI passes every error, warning and log line
    through it. ``PGPASSWORD`` counts as seen.
    """
    _remember(os.environ.get("PGPASSWORD"))
    for secret in sorted(_KNOWN_SECRETS, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, _MASK)
    return text


@dataclass(frozen=True)
class PgTarget:
    """A PostgreSQL database the store runs on (the parsed, checked URL)."""

    url: URL

    def __repr__(self) -> str:
        return f"PgTarget({safe_url(self.url)!r})"

    @property
    def schema(self) -> str | None:
        """The schema the store lives in (``?hermes_schema=NAME``), None: the database's
        search_path decides (``public`` by default)."""
        given = self.url.query.get(SCHEMA_PARAM)
        if given is None:
            return None
        if not isinstance(given, str) or not _SCHEMA_NAME.fullmatch(given):
            raise ConfigurationError(
                f"{SCHEMA_PARAM} in {safe_url(self.url)!r} must be one schema name of "
                "lower-case letters, digits and _ (not starting with a digit, at most 63 "
                f"characters), e.g. ?{SCHEMA_PARAM}=tenant_a"
            )
        return given

    def __str__(self) -> str:
        return safe_url(self.url)


def _mask_text(text: str) -> str:
    """``text`` with the password of any URL-looking part hidden (for refusal messages)."""
    try:
        return safe_url(make_url(text))
    except (ArgumentError, ValueError):
        return "<unparsable URL>"


def resolve_url(url: str | URL | None) -> PgTarget | None:
    """The store's database from ``url``, else from ``$HERMES_REPO_URL``; None: SQLite.

    Only ``postgresql+psycopg://...`` is accepted; any other URL is refused with the
    accepted form (a ``sqlite://`` URL too: a SQLite store is chosen by ``home``).
    ``url=SQLITE_FILE`` (``"sqlite"``) means the SQLite file whatever the environment
    says: for work that exists only on a file (installing a recovered file, say).
    """
    if isinstance(url, str) and url == SQLITE_FILE:
        return None
    given: str | URL | None = url
    if given is None or (isinstance(given, str) and not given.strip()):
        given = os.environ.get(URL_ENV, "").strip() or None
    if given is None:
        return None
    where = f"{URL_ENV}" if url is None else "url"
    try:
        parsed = given if isinstance(given, URL) else make_url(given)
    except (ArgumentError, ValueError):
        # Not chained: the parser's message repeats the whole text, password included.
        raise ConfigurationError(
            f"{where} {_mask_text(str(given))!r} is not a database URL; give one of the form "
            f"{ACCEPTED_FORM} (or leave it out for the SQLite store in --home)"
        ) from None
    if parsed.drivername != _DRIVERNAME:
        shown = safe_url(parsed)
        if parsed.get_backend_name() == "sqlite":
            fix = "a SQLite store is chosen by its folder: leave the URL out and pass home"
        else:
            fix = f"use {ACCEPTED_FORM}"
        raise ConfigurationError(
            f"{where} {shown!r} is not a supported store URL (only PostgreSQL through "
            f"psycopg 3 is: {ACCEPTED_FORM}); {fix}"
        )
    _remember(None if parsed.password is None else str(parsed.password))
    for key, value in parsed.query.items():
        if _is_secret(key):
            for one in value if isinstance(value, tuple) else (value,):
                _remember(one)
                for found in _CONNINFO_SECRET.finditer(one):
                    _remember(found.group(2).strip("'"))
    if not parsed.database:
        raise ConfigurationError(
            f"{where} {safe_url(parsed)!r} names no database; give one of the form {ACCEPTED_FORM}"
        )
    return PgTarget(parsed)


def load_psycopg() -> ModuleType:
    """The psycopg 3 module, or a :class:`ConfigurationError` naming the extra to install."""
    try:
        return importlib.import_module("psycopg")
    except ImportError as exc:
        raise ConfigurationError(
            "a PostgreSQL store needs the psycopg 3 driver, which is not installed; run "
            "`pip install 'psycopg[binary]>=3.2'` (the postgresql extra: `pip install "
            "'.[postgresql]'` in a hermes_repo checkout)"
        ) from exc


def pg_driver() -> Driver:
    """The :class:`~hermes_repo.engine.Driver` of a PostgreSQL store (psycopg 3)."""
    return Driver("psycopg", load_psycopg(), "", POSTGRESQL)


def create_pg_engine(target: PgTarget, **engine_kwargs: Any) -> Engine:
    """The engine of a PostgreSQL store (see the module's docstring for each choice)."""
    drv = pg_driver()
    connect_args = dict(engine_kwargs.pop("connect_args", {}))
    # Server-side prepared statements live in the server session: behind a
    # transaction-mode pooler the next transaction may run on another one.
    connect_args.setdefault("prepare_threshold", None)
    connect_args.setdefault("application_name", "hermes_repo")
    # Text goes both ways as UTF8 whatever PGCLIENTENCODING says: a startup-packet
    # parameter (PgBouncer passes it on), which wins over the environment's.
    connect_args["client_encoding"] = "utf8"
    url = target.url
    schema = target.schema
    if schema is not None:
        # The driver knows no hermes_schema: it becomes the search_path of every
        # connection, set in the startup packet (no SET, nothing left in a pooled
        # server session), appended to any options the URL itself gives.
        url = url.difference_update_query([SCHEMA_PARAM])
        given = connect_args.get("options", url.query.get("options", ""))
        given = given if isinstance(given, str) else " ".join(given)
        connect_args["options"] = f"{given} -c search_path={schema}".strip()
    engine_kwargs.setdefault("pool_pre_ping", True)
    # The secrets travel beside the URL, never in it: see split_secrets.
    bare_url, secrets = split_secrets(url)
    connect_args.update(secrets)
    engine = create_engine(bare_url, connect_args=connect_args, **engine_kwargs)
    engine.info_driver = drv  # type: ignore[attr-defined]
    return engine
