"""What every command shares: the store folder, a lazily opened store, the log handler."""

from __future__ import annotations

import logging
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import click

from ..engine import db_path_for_home
from ..errors import HermesRepoError
from ..homes import STORE_FOLDER, store_kind
from ._output import CliError, log_line, warning_line

if TYPE_CHECKING:
    from ..engine_pg import PgTarget
    from ..store import StateStore
    from ._reads import QuickReader

__all__ = ["CliState"]

_LIBRARY_LOGGER = "hermes_repo"

T = TypeVar("T")


class _DeferredWarnings(logging.Handler):
    """Holds the library's warnings until the command ends.

    After a success they are printed as ``warning: ...`` lines; after a failure they are
    dropped, because the library logs the same cause it raises (e.g. a quarantine) and
    the failure must stay one ``error:`` line.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def flush_to_stderr(self) -> None:
        for record in self.records:
            click.echo(warning_line(record.getMessage()), err=True)
        self.records.clear()


class _SafeFormatter(logging.Formatter):
    """``-v`` log lines with control characters escaped and no password in them."""

    def format(self, record: logging.LogRecord) -> str:
        return log_line(super().format(record))


class CliState:
    """What every command shares: the store folder and a lazily opened store."""

    def __init__(self, home: Path | None, *, url: str | None = None, verbose: bool = False) -> None:
        # None means "the library's default" ($HERMES_HOME/hermes-repo): resolving it
        # here would duplicate that rule, so it is passed through as is.
        self.home = home
        #: The PostgreSQL URL (--url or HERMES_REPO_URL); None: the SQLite file in home.
        self.url = url
        self._store: StateStore | None = None
        self._log_handler: logging.Handler
        if verbose:
            self._log_handler = logging.StreamHandler(sys.stderr)
            self._log_handler.setFormatter(_SafeFormatter("%(levelname)s %(name)s: %(message)s"))
            self._log_handler.setLevel(logging.INFO)
        else:
            self._log_handler = _DeferredWarnings()
        logger = logging.getLogger(_LIBRARY_LOGGER)
        logger.addHandler(self._log_handler)
        if verbose:
            logger.setLevel(logging.INFO)

    def finish(self, *, failed: bool) -> None:
        """Detach the log handler; print deferred warnings unless the command failed."""
        logging.getLogger(_LIBRARY_LOGGER).removeHandler(self._log_handler)
        if isinstance(self._log_handler, _DeferredWarnings) and not failed:
            self._log_handler.flush_to_stderr()

    @property
    def server(self) -> PgTarget | None:
        """The PostgreSQL database of this invocation (checked), or None for SQLite."""
        # The store and the URL rules load SQLAlchemy: imported when a command needs
        # them, never for `--help`.
        from ..engine_pg import resolve_url

        return resolve_url(self.url)

    @property
    def db_path(self) -> Path:
        """The ``state.db`` this invocation operates on."""
        return db_path_for_home(self.home)

    @property
    def store(self) -> StateStore:
        """The store, opened on first use (created at head if the file is missing)."""
        if self._store is None:
            from ..store import StateStore

            self._store = StateStore.open(self.home, url=self.url)
        return self._store

    @property
    def existing_store(self) -> StateStore:
        """The store for a command that only reads it: never created here.

        A mistyped ``--home`` must say there is no store, not answer "no sessions" from
        an empty store it just built (and left behind).
        """
        if self._store is None:
            server = self.server
            if server is None:
                db_path = self.db_path
                if store_kind(db_path) == "none":
                    raise CliError(self.no_store_message(db_path))
            elif _server_is_empty(server):
                raise CliError(self.no_server_store_message(server))
        return self.store

    def read(self, quick: Callable[[QuickReader], T], full: Callable[[StateStore], T]) -> T:
        """A read command's answer: ``quick`` on a :class:`QuickReader` when the store is
        a SQLite file that needs nothing of an open but reading (no ORM is loaded),
        else ``full`` on :attr:`existing_store`. The two give the same answer (a test
        compares them); a quick read that meets anything else is done by ``full``.
        """
        if self._store is None and self.url is None:
            db_path = self.db_path
            kind = store_kind(db_path)
            if kind == "none":
                raise CliError(self.no_store_message(db_path))
            if kind == "ours":
                from ._reads import NEEDS_OPEN, quick_read

                answer = quick_read(db_path, quick)
                if answer is not NEEDS_OPEN:
                    return answer  # type: ignore[return-value]
        return full(self.existing_store)

    def no_server_store_message(self, server: PgTarget) -> str:
        """Why a read found no store in a server's database, and how to make one."""
        from ..engine_pg import safe_url

        home = "" if self.home is None else f" --home {shlex.quote(str(self.home))}"
        # URL, not the URL itself: it may hold a password, which is never printed.
        again = f"hermes-repo{home} --url URL"
        return (
            f"no store at {safe_url(server.url)} (the database is empty: no hermes_repo "
            "schema, nothing was created); check --url / HERMES_REPO_URL, or create the "
            f"store there with `{again} import FILE` or `{again} db upgrade` (URL: this "
            "database's)"
        )

    def no_store_message(self, db_path: Path) -> str:
        """Why a read found nothing to read, and the commands that make a store there."""
        folder = shlex.quote(str(db_path.parent))
        where = (
            "check --home"
            if self.home is not None
            else f"--home was left out, so this is the default $HERMES_HOME/{STORE_FOLDER}"
        )
        return (
            f"no store at {db_path} ({where}); point --home at the folder that holds "
            f"your state.db, or create a store there with `hermes-repo --home {folder} "
            f"import FILE` or `hermes-repo --home {folder} db upgrade`"
        )

    def close(self) -> None:
        """Close the store if a command opened it."""
        store, self._store = self._store, None
        if store is not None:
            store.close()


def _server_is_empty(server: PgTarget) -> bool:
    """True when the server's database holds no schema at all (no table of ours or
    anyone's): a read must say so, not build the store there as an open would.

    Any failure to tell (the server is down, the database missing) answers False: the
    store's own open then meets the same cause and reports it as every command does.
    """
    from sqlalchemy.exc import SQLAlchemyError

    from ..engine_pg import create_pg_engine
    from ..schema.migrate import schema_status

    try:
        engine = create_pg_engine(server)
    except (SQLAlchemyError, HermesRepoError):
        return False
    try:
        with engine.connect() as conn:
            return schema_status(conn).status == "empty"
    except (SQLAlchemyError, HermesRepoError):
        return False
    finally:
        engine.dispose()
