"""The CLI meets a server that refuses the store: one ``error:`` line, exit 1.

A port that is not a port (out of range or not a number), an unknown database, a
database not in UTF8: never a traceback, never the password, never a wait.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg import sql

from tests.cli.conftest import Cli, Result
from tests.support.pg import PgServer

SECRET = "s3cret-pw"


def _one_error_line(result: Result, *words: str) -> str:
    assert result.code == 1, result.stdout + result.stderr
    assert len(result.error_lines) == 1, result.stderr
    line = result.error_lines[0]
    assert line.startswith("error: ") and SECRET not in result.stderr + result.stdout
    for word in words:
        assert word in line
    return line


@pytest.mark.parametrize(("port", "words"), [("99999", "not a port"), ("abc", "port must be")])
def test_db_copy_to_a_bad_port_is_one_error_line(
    cli: Cli, home: Path, port: str, words: str
) -> None:
    target = f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:{port}/somewhere"
    _one_error_line(cli("--home", home, "db", "copy", "--to", target), words)


def test_db_upgrade_on_an_unknown_database_names_it_at_once(cli: Cli, pg_server: PgServer) -> None:
    missing = pg_server.new_name("never_created")
    url = pg_server.url_of(missing).set(password=SECRET).render_as_string(hide_password=False)
    _one_error_line(cli("--url", url, "db", "upgrade"), "does not exist", "CREATE DATABASE")


def test_db_upgrade_on_a_sql_ascii_database_is_refused_naming_the_encoding(
    cli: Cli, pg_server: PgServer
) -> None:
    name = pg_server.new_name("ascii")
    with pg_server.admin() as admin:
        admin.execute(
            sql.SQL(
                "CREATE DATABASE {} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
                "TEMPLATE template0"
            ).format(sql.Identifier(name))
        )
    try:
        url = pg_server.url_of(name).render_as_string(hide_password=False)
        _one_error_line(cli("--url", url, "db", "upgrade"), "SQL_ASCII", "ENCODING 'UTF8'")
    finally:
        pg_server.drop(name)
