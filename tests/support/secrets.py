"""A PostgreSQL role with a real password, and the URLs that carry it every way.

The test server trusts loopback connections of this role, so the password is not checked;
it still travels to libpq as given, and every output must still hide it. The connection
errors of these tests come from a database that does not exist and a port nothing
listens on, each with the password in the URL (a refused password is proved by
tests/faults/test_pg_refusals.py, with a role whose password the server checks).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from psycopg import sql
from sqlalchemy.engine import URL

from tests.support.pg import PgServer, free_port

#: Distinctive, so a hit can only be the password: no message, path or id holds it.
PASSWORD = "Pw-7Kq9zXv-neverShown"


@dataclass(frozen=True)
class SecretRole:
    """A login role whose password is :data:`PASSWORD`, owning database ``database``."""

    server: PgServer
    role: str
    database: str

    def _base(self, database: str | None = None, port: int | None = None) -> URL:
        return self.server.url_of(database or self.database).set(
            username=self.role, password=None, port=port or self.server.url.port
        )

    def text(self, url: URL) -> str:
        return url.render_as_string(hide_password=False)

    def forms(self, database: str | None = None, port: int | None = None) -> dict[str, str]:
        """The database's URL with the password in each place libpq takes it from."""
        base = self._base(database, port)
        quoted = urllib.parse.quote(f"password={PASSWORD}")
        plain = self.text(base)
        return {
            "userinfo": self.text(base.set(password=PASSWORD)),
            "query": f"{plain}?password={PASSWORD}",
            "sslpassword": f"{plain}?sslpassword={PASSWORD}&password={PASSWORD}",
            "conninfo": f"{plain}?conninfo={quoted}",
            "everywhere": self.text(base.set(password=PASSWORD))
            + f"?password={PASSWORD}&sslpassword={PASSWORD}",
        }

    def plain(self) -> str:
        """The URL without any password (for PGPASSWORD and ~/.pgpass)."""
        return self.text(self._base())

    def unknown_database(self) -> str:
        return self.forms(database=f"{self.database}_missing")["everywhere"]

    def closed_port(self) -> str:
        return self.forms(port=free_port())["everywhere"]


@contextmanager
def secret_role(server: PgServer, template: str | None = None) -> Iterator[SecretRole]:
    """A new role with :data:`PASSWORD` and a database of its own (dropped after).

    A superuser: the database is a copy of the migrated template, whose tables
    belong to the cluster's superuser, and the role must read and write them.
    """
    role = server.new_name("role")
    database = server.new_name("secret")
    with server.admin() as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(PASSWORD)
            )
        )
    try:
        server.create(database, template=template)
        try:
            yield SecretRole(server, role, database)
        finally:
            server.drop(database)
    finally:
        with server.admin() as conn:
            conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def leaks(*texts: object) -> list[str]:
    """Each text that holds the password (as is or percent-encoded), shortened."""
    found = []
    for text in texts:
        shown = str(text)
        if PASSWORD in shown or urllib.parse.quote(PASSWORD) in shown:
            at = shown.find(PASSWORD)
            found.append(shown[max(0, at - 120) : at + 40])
    return found
