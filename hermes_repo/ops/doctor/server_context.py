"""The doctor's context on a PostgreSQL store: one ``READ ONLY`` transaction, rolled back,
and commands that name the store by ``$HERMES_REPO_URL`` (never printing a password)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...driver_errors import describe
from ...engine import select_driver
from .context import DoctorContext, DoctorReadError

if TYPE_CHECKING:
    from sqlalchemy import Connection, Engine

    from ...engine_pg import PgTarget

# SQLAlchemy and the server's URL rules are imported by the methods that use them: the
# checks that ask ``isinstance(ctx, ServerContext)`` run on a file too, which loads
# neither.

__all__ = ["ServerContext"]


class ServerContext(DoctorContext):
    """The doctor's context on a server: one ``READ ONLY`` transaction, rolled back."""

    def __init__(self, home: Path, target: PgTarget) -> None:
        super().__init__(home, select_driver())
        self.target = target
        self._engine: Engine | None = None
        self._server_conn: Connection | None = None

    @property
    def exists(self) -> bool:
        return True  # a database, not a file: whether it answers is the connection check

    @property
    def engine(self) -> Engine:
        """The engine of the doctor's reads (one connection, never pooled)."""
        if self._engine is None:
            from sqlalchemy.pool import NullPool

            from ...engine_pg import create_pg_engine

            self._engine = create_pg_engine(self.target, poolclass=NullPool)
        return self._engine

    def server_connection(self) -> Connection:
        """The read-only connection (opened on first use); unreachable: DoctorReadError."""
        if self._server_conn is None:
            from sqlalchemy.exc import DBAPIError

            try:
                conn = self.engine.connect()
                conn.exec_driver_sql("SET TRANSACTION READ ONLY")
            except DBAPIError as exc:
                raise DoctorReadError(describe(exc)) from exc
            self._server_conn = conn
        return self._server_conn

    def rows(self, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run a read (``%(name)s`` parameters); a server error becomes
        :class:`DoctorReadError`."""
        from sqlalchemy.exc import DBAPIError

        conn = self.server_connection()
        try:
            return [tuple(r) for r in conn.exec_driver_sql(sql, params or {})]
        except DBAPIError as exc:
            raise DoctorReadError(describe(exc)) from exc

    def command(self, cmd: str) -> str:
        """A ``hermes-repo ...`` command for this store: its ``--home`` and its URL
        (taken from the environment, so no password is ever printed)."""
        from ...engine_pg import URL_ENV

        head, _, rest = cmd.partition(" ")
        home = shlex.quote(str(self.home))
        return f'{head} --home {home} --url "${URL_ENV}" {rest}'.rstrip()

    def close(self) -> None:
        from sqlalchemy.exc import DBAPIError

        conn, self._server_conn = self._server_conn, None
        try:
            if conn is not None:
                conn.rollback()
                conn.close()
        except DBAPIError:
            pass  # a failed read may have ended it already; nothing was written
        finally:
            if self._engine is not None:
                self._engine.dispose()
        super().close()
