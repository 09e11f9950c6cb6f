"""A PostgreSQL cluster a test owns, so that it may stop and start it: outages for real.

The shared server of ``HERMES_TEST_PG_URL`` must stay up for every other test; a test
that takes the server down starts its own throwaway cluster (``tests.support.pg``: a
few seconds), with a migrated template database to copy per test, and checks the
store's rows through :class:`Rows` (plain psycopg, no store in between).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_repo import StateStore
from tests.support.pg import PgServer, RawPg, free_port, start, stop

__all__ = ["OwnCluster", "Rows", "copied_database", "own_cluster"]


@dataclass
class OwnCluster:
    """A running cluster in ``folder`` on ``port`` and its migrated template database."""

    folder: Path
    port: int
    server: PgServer
    template: str

    def down(self, mode: str = "immediate") -> None:
        """Stop the server (``immediate``: no clean shutdown, as a crash or power cut)."""
        stop(self.folder, mode)

    def up(self) -> None:
        """Start it again on the same port (recovering from an immediate stop); a
        running one is left alone."""
        if not (self.folder / "data" / "postmaster.pid").exists():
            start(self.folder, self.port)

    def restart(self) -> None:
        self.down("fast")
        self.up()

    def new_database(self, label: str) -> str:
        """A fresh copy of the migrated template; its URL (no password: trust auth)."""
        name = self.server.new_name(label)
        return self.server.create(name, template=self.template).render_as_string(
            hide_password=False
        )


@contextmanager
def own_cluster() -> Iterator[OwnCluster]:
    """Start a cluster with a migrated template in a new temporary folder; stopped and
    removed when the block ends."""
    # Not under pytest's base temp: its clean-up of older runs may remove or re-mode
    # folders there while the server (another user) still works in them.
    folder = Path(tempfile.mkdtemp(prefix="hermes-pg-cluster-"))
    port = free_port()
    try:
        url = start(folder, port)
        server = PgServer(url)
        with server.admin() as admin:
            # The throwaway clusters commit without waiting for the WAL write
            # (synchronous_commit=off on the command line); an immediate stop would then
            # lose commits the store was told about. The role's setting wins over it.
            admin.execute("ALTER ROLE postgres SET synchronous_commit = on")
        template = server.new_name("template")
        template_url = server.create(template).render_as_string(hide_password=False)
        StateStore.open(folder / "template-home", url=template_url).close()
        yield OwnCluster(folder, port, server, template)
    finally:
        try:
            stop(folder, "fast")
        finally:
            shutil.rmtree(folder, ignore_errors=True)


class Rows:
    """The store's rows read behind its back (a plain connection per call)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def query(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        pg = RawPg(self.url)
        try:
            return [tuple(r) for r in pg.execute(statement, params).fetchall()]
        finally:
            pg.close()

    def uids(self, session_id: str) -> list[str]:
        """The session's uids in id order (the replay order)."""
        sql = "SELECT uid FROM messages WHERE session_id = ? ORDER BY id"
        return [str(r[0]) for r in self.query(sql, (session_id,))]

    def counter_drift(self) -> list[tuple[Any, ...]]:
        """Sessions whose counters differ from their active rows (should be none)."""
        return self.query(
            "SELECT s.id, s.message_count, s.tool_call_count, count(m.id), "
            "coalesce(sum(CASE WHEN m.tool_calls IS NULL THEN 0 "
            "ELSE json_array_length(m.tool_calls::json) END), 0) "
            "FROM sessions s LEFT JOIN messages m ON m.session_id = s.id AND m.active = 1 "
            "GROUP BY s.id, s.message_count, s.tool_call_count "
            "HAVING s.message_count != count(m.id) OR s.tool_call_count != "
            "coalesce(sum(CASE WHEN m.tool_calls IS NULL THEN 0 "
            "ELSE json_array_length(m.tool_calls::json) END), 0)"
        )

    def duplicated_uids(self) -> list[tuple[Any, ...]]:
        return self.query(
            "SELECT session_id, uid, count(*) FROM messages GROUP BY session_id, uid "
            "HAVING count(*) > 1"
        )


@contextmanager
def copied_database(server: PgServer, template: str, label: str) -> Iterator[str]:
    """A copy of ``template`` on ``server`` for one test (its URL), dropped after it."""
    name = server.new_name(label)
    url = server.create(name, template=template)
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        server.drop(name)
