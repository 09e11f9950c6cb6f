"""A server that refuses the store for a reason waiting cannot fix: said at once.

An unknown database, an unknown role, a role that may not log in, a wrong password, a
port that is not a port, a host name the resolver does not know: ``StateStore.open``
raises :class:`ServerConfigError` naming the cause and the fix (the password masked),
never a 20 s "outage". A transcript flush that meets one still spools every message
(invariant 1), at once, with the cause in ``FlushResult.error``. A database or client
whose encoding is not UTF8 is refused at open in one line naming the encoding found. A
refused connection (nothing listens) stays an outage: tests/faults/test_pg_faults.py.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from hermes_repo import (
    ConfigurationError,
    ServerConfigError,
    StateStore,
    TranscriptWriter,
)
from hermes_repo.driver_errors import classify
from hermes_repo.errors import ErrorKind
from tests.support.pg import PASSWORD_GROUP, PgServer, RawPg
from tests.support.spooling import pending_files

SECRET = "s3cret-pw"


@pytest.fixture
def pg_url(pg_server: PgServer, pg_template: str) -> Iterator[str]:
    name = pg_server.new_name("refusal")
    url = pg_server.create(name, template=pg_template)
    yield url.render_as_string(hide_password=False)
    pg_server.drop(name)


@pytest.fixture
def role(pg_server: PgServer) -> Iterator[str]:
    """A role of this test (``NOLOGIN`` until the test says otherwise), dropped after."""
    name = f"hermes_role_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(name)))
    yield name
    with pg_server.admin() as admin:
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def _url(server: PgServer, *, user: str | None = None, database: str = "postgres") -> str:
    url = server.url_of(database).set(password=SECRET)
    if user is not None:
        url = url.set(username=user)
    return url.render_as_string(hide_password=False)


def _refused_at_once(home: Path, url: str) -> ServerConfigError:
    # A budget long enough that an "outage" would end as DatabaseBusyError instead.
    with pytest.raises(ServerConfigError) as caught:
        StateStore.open(home, url=url, write_budget_s=60)
    error = caught.value
    assert classify(error) is ErrorKind.CONFIG and isinstance(error, ConfigurationError)
    message = str(error)
    assert SECRET not in message and "\n" not in message
    assert not any(p.name.startswith("state.db") for p in home.iterdir())
    return error


def test_an_unknown_database_fails_at_once_naming_it_and_how_to_create_it(
    pg_server: PgServer, tmp_path: Path
) -> None:
    missing = pg_server.new_name("never_created")
    error = _refused_at_once(tmp_path / "home", _url(pg_server, database=missing))
    assert "the database does not exist" in str(error)
    assert f'"{missing}"' in str(error) and "CREATE DATABASE" in str(error)


def test_an_unknown_role_fails_at_once_naming_the_login_to_check(
    pg_server: PgServer, tmp_path: Path
) -> None:
    error = _refused_at_once(tmp_path / "home", _url(pg_server, user="nobody_of_hermes"))
    assert "the user (role) does not exist" in str(error) and "pg_hba.conf" in str(error)


def test_a_role_that_may_not_log_in_fails_at_once(
    pg_server: PgServer, role: str, tmp_path: Path
) -> None:
    error = _refused_at_once(tmp_path / "home", _url(pg_server, user=role))
    assert "may not log in" in str(error)


def _checks_group_passwords(server: PgServer) -> bool:
    """Whether the cluster checks the passwords of :data:`PASSWORD_GROUP`'s members
    (every cluster :func:`tests.support.pg.start` creates does)."""
    with server.admin() as admin:
        rules = admin.execute(
            "SELECT auth_method FROM pg_hba_file_rules WHERE type = 'host' AND %s = ANY(user_name)",
            (f"+{PASSWORD_GROUP}",),
        ).fetchall()
    return bool(rules) and rules[0][0] in ("md5", "scram-sha-256", "password")


def test_a_wrong_password_fails_at_once_without_showing_it(
    pg_server: PgServer, role: str, tmp_path: Path
) -> None:
    if not _checks_group_passwords(pg_server):
        why = (
            f"this server has no password rule for the role group {PASSWORD_GROUP} (a "
            "cluster made before tests.support.pg wrote one): no password can be wrong"
        )
        if os.environ.get("HERMES_TEST_REQUIRE_PG") == "1":
            pytest.fail(why)
        pytest.skip(why)
    with pg_server.admin() as admin:
        admin.execute(
            sql.SQL(
                "DO $$ BEGIN CREATE ROLE {} NOLOGIN; EXCEPTION WHEN duplicate_object "
                "THEN NULL; END $$"
            ).format(sql.Identifier(PASSWORD_GROUP))
        )
        admin.execute(
            sql.SQL("ALTER ROLE {} LOGIN PASSWORD 'the-right-one'").format(sql.Identifier(role))
        )
        admin.execute(
            sql.SQL("GRANT {} TO {}").format(sql.Identifier(PASSWORD_GROUP), sql.Identifier(role))
        )
    error = _refused_at_once(tmp_path / "home", _url(pg_server, user=role))
    assert "refused the password" in str(error)
    assert SECRET not in str(error) and "the-right-one" not in str(error)


@pytest.mark.parametrize("port", [65536, 99999])
def test_a_port_that_is_not_a_port_fails_at_once(
    pg_server: PgServer, tmp_path: Path, port: int
) -> None:
    url = pg_server.url_of("postgres").set(password=SECRET, port=port)
    error = _refused_at_once(tmp_path / "home", url.render_as_string(hide_password=False))
    assert "not a port" in str(error) and "1 to 65535" in str(error)


def test_a_host_name_the_resolver_does_not_know_fails_at_once(tmp_path: Path) -> None:
    host = f"hermes-{uuid.uuid4().hex[:8]}.invalid"  # RFC 6761: never resolves
    try:
        socket.getaddrinfo(host, 5432)
    except socket.gaierror as exc:
        if exc.errno != socket.EAI_NONAME:
            pytest.skip(f"this machine's resolver cannot answer now ({exc}): an outage")
    else:  # pragma: no cover - a resolver that invents answers
        pytest.skip(f"this machine's resolver answers for {host}")
    url = f"postgresql+psycopg://postgres:{SECRET}@{host}:5432/db"
    error = _refused_at_once(tmp_path / "home", url)
    assert "host name is unknown" in str(error)


def test_a_flush_meeting_a_dropped_database_spools_at_once_naming_the_cause(
    pg_server: PgServer, pg_url: str, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    store = StateStore.open(home, url=pg_url)
    try:
        writer = TranscriptWriter(home, "s-gone", store, write_budget_s=60)
        first = writer.flush([{"role": "user", "content": "before"}])
        assert first.written == 1
        name = pg_url.rsplit("/", 1)[1]
        pg_server.drop(name)  # terminates the store's connections
        messages = [{"role": "user", "content": "after"}, {"role": "assistant", "content": "ok"}]
        result = writer.flush(messages)
    finally:
        store.close()
    assert result.spooled == 2 and result.written == 0
    assert result.error is not None and result.error.startswith("config: ")
    assert "the database does not exist" in result.error
    assert pending_files(home) != []


@pytest.mark.parametrize("encoding", ["SQL_ASCII", "LATIN1"])
def test_a_database_not_in_utf8_is_refused_at_open_in_one_line(
    pg_server: PgServer, tmp_path: Path, encoding: str
) -> None:
    name = pg_server.new_name(encoding.lower())
    with pg_server.admin() as admin:
        admin.execute(
            sql.SQL(
                "CREATE DATABASE {} ENCODING {} LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
            ).format(sql.Identifier(name), sql.Literal(encoding))
        )
    try:
        url = pg_server.url_of(name).render_as_string(hide_password=False)
        with pytest.raises(ConfigurationError) as caught:
            StateStore.open(tmp_path / "home", url=url)
        message = str(caught.value)
        assert f"encoding {encoding}" in message and "ENCODING 'UTF8'" in message
        assert "\n" not in message
        raw = RawPg(url)
        try:  # refused before anything was created
            tables = raw.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchone()
        finally:
            raw.close()
        assert tables == (0,)
    finally:
        pg_server.drop(name)


def test_a_latin1_client_encoding_in_the_environment_is_overridden_to_utf8(
    pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    text = "café 服务器 😀 \u0394"
    with StateStore.open(tmp_path / "home", url=pg_url) as store:
        store.write(lambda uow: uow.sessions.ensure("s-enc"))
        store.append_message("s-enc", {"role": "user", "content": text})
        loaded = store.load_conversation("s-enc").messages
    assert [m["content"] for m in loaded] == [text]
    # What the server stored is the text itself, not a LATIN1 reading of its bytes.
    raw_url = pg_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(raw_url, client_encoding="utf8") as conn:
        stored = conn.execute("SELECT content FROM messages WHERE session_id = 's-enc'").fetchone()
    assert stored == (text,)
