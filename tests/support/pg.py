"""A throwaway PostgreSQL cluster for the tests, and the databases each test gets.

Run as a script to start or stop a cluster (what ``.ci/run`` and ``make test-pg`` do)::

    python -m tests.support.pg start DIR PORT     # prints the URL (PORT "auto": a free one)
    python -m tests.support.pg stop DIR
    python -m tests.support.pg createdb URL NAME  # prints the new database's URL
    python -m tests.support.pg pgbouncer start DIR PG_URL  # prints the pooled URL
    python -m tests.support.pg pgbouncer stop DIR

``initdb -D DIR -A trust -U postgres -E UTF8 --locale=C.UTF-8`` (without ``-E UTF8`` a
cluster may default to SQL_ASCII, which stores bytes unchecked), started on a loopback
port with its socket in DIR. The server refuses to run as root: as root both run as the
``postgres`` user (``runuser``), with DIR owned by it and its parents traversable; as
anyone else they run directly. ``initdb``/``pg_ctl`` come from PATH, else from
``/usr/lib/postgresql/*/bin``.

The fixtures use :class:`PgServer`: one migrated template database per test run, and a
``CREATE DATABASE ... TEMPLATE`` copy of it per test (a file-level copy: much faster
than running the migrations again).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row, tuple_row
from sqlalchemy.engine import URL, make_url

URL_ENV = "HERMES_TEST_PG_URL"
#: A PgBouncer in front of the server of URL_ENV: the tests' stores go through it.
PGBOUNCER_URL_ENV = "HERMES_TEST_PGBOUNCER_URL"
REQUIRE_ENV = "HERMES_TEST_REQUIRE_PG"


#: Whether the running test is a ``pg`` test (set by the conftest before each test's
#: fixtures); None outside a pytest run (a worker process, the script below).
_server_allowed: bool | None = None


def allow_server(allowed: bool) -> None:
    """Let (or not) the test about to run reach the server through :func:`required_url`."""
    global _server_allowed
    _server_allowed = allowed


def required_url() -> str:
    """The test server's URL; without one the calling test skips, saying how to get one,
    or fails when :data:`REQUIRE_ENV` is ``1`` (CI: a PostgreSQL test never skips there).

    Every test and support helper that needs the server gets it here or through the
    ``pg_server`` fixture, which calls this. Only a test marked ``pg`` may: one that is
    not fails, so that ``pytest -m "not pg"`` never needs a server."""
    import pytest  # only tests call this; the module also runs as a script

    if _server_allowed is False:
        pytest.fail(
            "this test reaches the PostgreSQL test server but is not marked: add "
            "@pytest.mark.pg (or use the pg_server fixture, which marks it)"
        )
    url = os.environ.get(URL_ENV, "").strip()
    if url:
        return url
    why = f"no PostgreSQL server: set {URL_ENV}, or run `make test-pg`"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {why}")
    pytest.skip(why)


HOW_TO_RUN = "make test-pg (starts a throwaway PostgreSQL cluster, runs pytest with it, stops it)"


def find_binary(name: str) -> str:
    """``initdb`` or ``pg_ctl``: on PATH, else the newest ``/usr/lib/postgresql/*/bin``."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if not candidates:
        raise SystemExit(
            f"{name} not found on PATH or under /usr/lib/postgresql/*/bin; install the "
            "PostgreSQL server (Debian: apt-get install postgresql postgresql-contrib)"
        )
    return candidates[-1]


def _as_server_user(cmd: list[str]) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


def _hand_to_server_user(folder: Path) -> None:
    """As root: DIR owned by ``postgres``, every parent traversable (``o+x``)."""
    if os.geteuid() != 0:
        return
    shutil.chown(folder, "postgres", "postgres")
    for parent in folder.resolve().parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


#: Members of this group role log in with a password even on loopback (every other
#: login is trusted): the refusal of a wrong password is then a real one.
PASSWORD_GROUP = "hermes_password_checked"


def _check_group_passwords(hba: Path) -> None:
    """Put a password rule for :data:`PASSWORD_GROUP` before the trust rules (read top
    down, first match wins); written in place so the file keeps its owner."""
    rule = f"host all +{PASSWORD_GROUP} 127.0.0.1/32 scram-sha-256\n"
    text = hba.read_text()
    if rule not in text:
        hba.write_text(rule + text)


def start(folder: Path, port: int, *, synchronous_commit: bool = False) -> str:
    """Create and start a cluster in ``folder`` (empty or missing); returns its URL.

    ``synchronous_commit``: commits wait for their WAL (and, when the configuration
    names synchronous standbys, for a standby's confirmation) as in production; off by
    default, see below. A folder that already holds a data directory (a base backup, a
    stopped cluster) is started as it is."""
    folder = folder.absolute()
    folder.mkdir(parents=True, exist_ok=True)
    _hand_to_server_user(folder)
    data = folder / "data"
    if not (data / "PG_VERSION").exists():
        subprocess.run(
            _as_server_user(
                [
                    find_binary("initdb"),
                    "-D",
                    str(data),
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ]
            ),
            check=True,
            stdout=subprocess.DEVNULL,
        )
        _check_group_passwords(data / "pg_hba.conf")
    # A throwaway cluster needs no durability across an OS crash: without fsync each
    # test's CREATE/DROP DATABASE and every commit cost a fraction of the time.
    options = (
        f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    )
    if not synchronous_commit:
        options += " -c synchronous_commit=off"
    subprocess.run(
        _as_server_user(
            [
                find_binary("pg_ctl"),
                "-D",
                str(data),
                "-l",
                str(folder / "log"),
                "-o",
                options,
                "-w",
                "start",
            ]
        ),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"


def stop(folder: Path, mode: str = "fast") -> None:
    """Stop the cluster in ``folder`` (``mode``: ``fast``, or ``immediate`` for a crash
    the next start recovers from); a stopped one is left alone."""
    data = folder.absolute() / "data"
    if not (data / "postmaster.pid").exists():
        return
    subprocess.run(
        _as_server_user([find_binary("pg_ctl"), "-D", str(data), "-m", mode, "-w", "stop"]),
        check=True,
        stdout=subprocess.DEVNULL,
    )


class PgServer:
    """Databases on the server at ``url`` (a superuser's URL to any database).

    When ``url`` is the test server's (``HERMES_TEST_PG_URL``) and
    ``HERMES_TEST_PGBOUNCER_URL`` names a pooler in front of it, the databases it
    creates are handed out through the pooler (:meth:`store_url_of`): every store of
    the tests reaches its database in transaction-mode pooling, while creating and
    dropping databases still talks to the server itself."""

    def __init__(self, url: str) -> None:
        self.url: URL = make_url(url)
        self.prefix = f"hermes_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self._count = 0
        pooled = os.environ.get(PGBOUNCER_URL_ENV, "").strip()
        on_test_server = url.strip() == os.environ.get(URL_ENV, "").strip()
        self.pooled: URL | None = make_url(pooled) if pooled and on_test_server else None

    def url_of(self, database: str) -> URL:
        """``database`` on the server itself."""
        return self.url.set(drivername="postgresql+psycopg", database=database)

    def store_url_of(self, database: str) -> URL:
        """``database`` as the stores reach it: through the pooler when there is one."""
        if self.pooled is None:
            return self.url_of(database)
        return self.pooled.set(drivername="postgresql+psycopg", database=database)

    def admin(self) -> psycopg.Connection[tuple[object, ...]]:
        """An autocommit connection for CREATE/DROP DATABASE (never in a transaction)."""
        url = self.url_of(self.url.database or "postgres")
        return psycopg.connect(
            url.set(drivername="postgresql").render_as_string(hide_password=False),
            autocommit=True,
        )

    def new_name(self, label: str) -> str:
        self._count += 1
        return f"{self.prefix}_{label}_{self._count}"

    def create(self, name: str, *, template: str | None = None) -> URL:
        """A new database (a copy of ``template``); its URL for a store."""
        with self.admin() as conn:
            if template is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            else:
                if self.pooled is not None:
                    # The pooler keeps idle server connections to the template (it was
                    # migrated through it); a copy needs a template nobody is on.
                    conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE datname = %s AND pid <> pg_backend_pid()",
                        (template,),
                    )
                conn.execute(
                    sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                        sql.Identifier(name), sql.Identifier(template)
                    )
                )
        return self.store_url_of(name)

    def drop(self, name: str) -> None:
        with self.admin() as conn:
            # WITH (FORCE): a store a test forgot to close must not keep the database.
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


def free_port() -> int:
    """A loopback port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


#: The pooler's admin user and the user it lets in (trust, as the test clusters).
POOLER_USER = "postgres"


def find_pgbouncer() -> str | None:
    """The ``pgbouncer`` program (Debian: ``/usr/sbin``, often not on a user's PATH)."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if Path("/usr/sbin/pgbouncer").exists() else None


def _wait_listening(port: int, *, alive: Any = None) -> None:
    """Return once something accepts connections on the loopback ``port``."""
    for _ in range(1000):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if alive is not None and not alive():
                break
            time.sleep(0.01)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def start_pgbouncer(
    folder: Path, pg_url: str, port: int | None = None, *, pool_size: int = 4
) -> str:
    """Start PgBouncer in transaction mode in ``folder``, in front of the server of
    ``pg_url``; returns ``pg_url`` with the pooler's address instead of the server's.

    Every database of the server is reachable through it (``* =``), each transaction
    may get another server connection (``pool_mode = transaction``), at most
    ``pool_size`` server connections per database and user: several clients share each
    one, so session state left by one transaction would be met by another client's.
    The configuration and the port stay in ``folder``: :func:`restart_pgbouncer` starts
    the same pooler again. PgBouncer refuses to run as root: as root it runs as ``postgres``.
    """
    program = find_pgbouncer()
    if program is None:
        raise SystemExit(
            "pgbouncer not found on PATH or in /usr/sbin; install it "
            "(Debian: apt-get install pgbouncer)"
        )
    folder = folder.absolute()
    folder.mkdir(parents=True, exist_ok=True)
    _hand_to_server_user(folder)
    server = make_url(pg_url)
    config = folder / "pgbouncer.ini"
    if port is None:
        port = free_port()
    (folder / "userlist.txt").write_text(f'"{POOLER_USER}" ""\n')
    config.write_text(
        "[databases]\n"
        f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {folder / 'userlist.txt'}\n"
        f"admin_users = {POOLER_USER}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {pool_size}\n"
        "max_client_conn = 500\n"
        f"pidfile = {folder / 'pgbouncer.pid'}\n"
        f"logfile = {folder / 'pgbouncer.log'}\n"
    )
    _run_pgbouncer(folder)
    return server.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


def _pooler_port(folder: Path) -> int:
    for line in (folder / "pgbouncer.ini").read_text().splitlines():
        if line.startswith("listen_port"):
            return int(line.split("=")[1])
    raise RuntimeError(f"no listen_port in {folder / 'pgbouncer.ini'}")


def _run_pgbouncer(folder: Path) -> None:
    program = find_pgbouncer()
    assert program is not None
    subprocess.run(
        _as_server_user([program, "-d", "-q", str(folder / "pgbouncer.ini")]),
        check=True,
        stdout=subprocess.DEVNULL,
    )
    _wait_listening(_pooler_port(folder))


def _pooler_pid(folder: Path) -> int | None:
    try:
        pid = int((folder.absolute() / "pgbouncer.pid").read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    try:
        # A killed pooler no init has reaped yet (a container's first process may never
        # do it) still answers signal 0: a zombie is gone all the same.
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return None
    except (FileNotFoundError, IndexError):
        pass
    return pid


def stop_pgbouncer(folder: Path, sig: int = signal.SIGTERM) -> None:
    """Stop the pooler of ``folder`` (``SIGKILL``: a crash, nothing closed cleanly) and
    wait until it is gone; a stopped one is left alone."""
    pid = _pooler_pid(folder)
    if pid is None:
        return
    os.kill(pid, sig)
    while _pooler_pid(folder) == pid:
        time.sleep(0.01)
    # A killed pooler leaves its pidfile, and the next start refuses to run while the
    # pid it names still exists (an unreaped zombie does): it is stale, remove it.
    (folder.absolute() / "pgbouncer.pid").unlink(missing_ok=True)


def restart_pgbouncer(folder: Path, sig: int = signal.SIGKILL) -> None:
    """Stop the pooler (killed by default) and start it again on the same port."""
    stop_pgbouncer(folder, sig)
    _run_pgbouncer(folder.absolute())


def pooler_command(pooled_url: str, command: str) -> None:
    """Run ``command`` (``RECONNECT``, ``KILL db``, ``RESUME db``...) on the pooler's
    admin console (the ``pgbouncer`` database; simple queries only)."""
    url = make_url(pooled_url).set(drivername="postgresql", database="pgbouncer")
    with psycopg.connect(
        url.render_as_string(hide_password=False),
        autocommit=True,
        cursor_factory=psycopg.ClientCursor,
    ) as conn:
        conn.execute(command)


def _main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[:2] == ["pgbouncer", "start"]:
        print(start_pgbouncer(Path(argv[2]), argv[3]))
        return 0
    if len(argv) == 3 and argv[:2] == ["pgbouncer", "stop"]:
        stop_pgbouncer(Path(argv[2]))
        return 0
    if len(argv) == 3 and argv[0] == "start":
        port = free_port() if argv[2] == "auto" else int(argv[2])
        print(start(Path(argv[1]), port))
        return 0
    if len(argv) == 3 and argv[0] == "createdb":
        server = PgServer(argv[1])
        print(server.create(argv[2]).render_as_string(hide_password=False))
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        stop(Path(argv[1]))
        return 0
    print(
        "usage: python -m tests.support.pg start DIR PORT|auto | stop DIR | createdb URL NAME"
        " | pgbouncer start DIR PG_URL | pgbouncer stop DIR",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))


class RawPg:
    """A raw handle on a PostgreSQL store for tests that read rows behind the store's
    back, taking SQLite's ``?`` placeholders (the same test SQL runs on both)."""

    def __init__(self, url: str, *, as_dicts: bool = False) -> None:
        self._conn: psycopg.Connection[Any] = psycopg.connect(
            make_url(url).set(drivername="postgresql").render_as_string(hide_password=False),
            autocommit=True,
            row_factory=dict_row if as_dicts else tuple_row,
        )

    def execute(self, statement: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self._conn.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]

    def close(self) -> None:
        self._conn.close()


def store_url() -> str | None:
    """The PostgreSQL URL of this test's store (set by the ``backend`` fixture), if any."""
    return os.environ.get("HERMES_REPO_URL") or None
