"""A PostgreSQL cluster a test owns, so that it may stop and start it: outages for real.

:func:`replicated_pair` goes one further: a primary and a synchronous streaming standby
built with PostgreSQL's own tools (``pg_basebackup -R``, ``pg_ctl promote``), for a test
that kills the primary and promotes the standby.

The shared server of ``HERMES_TEST_PG_URL`` must stay up for every other test; a test
that takes the server down starts its own throwaway cluster (``tests.support.pg``: a
few seconds), with a migrated template database to copy per test, and checks the
store's rows through :class:`Rows` (plain psycopg, no store in between).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hermes_repo import StateStore
from tests.support.pg import (
    PgServer,
    RawPg,
    _as_server_user,
    _hand_to_server_user,
    find_binary,
    free_port,
    start,
    stop,
)

__all__ = [
    "OwnCluster",
    "ReplicatedPair",
    "Rows",
    "copied_database",
    "own_cluster",
    "replicated_pair",
]


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


#: What makes the pair's commits wait for the standby: every standby is a candidate
#: (``*``), and a commit returns once one has flushed its WAL (``synchronous_commit=on``).
#: Written into the primary's postgresql.conf, so a base backup (the standby) has it
#: too: whichever node is primary demands a synchronous standby.
_SYNCHRONOUS = """
synchronous_commit = on
synchronous_standby_names = '*'
wal_keep_size = '256MB'
"""


@dataclass
class ReplicatedPair:
    """Two nodes on loopback ports: one primary, one synchronous standby streaming from
    it. :meth:`fail_over` kills the primary and promotes the standby, then rebuilds
    the old primary as the new one's standby (``pg_basebackup``): after it the pair
    is whole again, with the roles swapped."""

    root: Path
    ports: tuple[int, int]
    primary: int = 0
    database: str = "hermes_ha"

    def folder(self, node: int) -> Path:
        return self.root / f"node{node}"

    @property
    def standby(self) -> int:
        return 1 - self.primary

    def node_url(self, node: int, database: str | None = None) -> str:
        """One node's URL (the store's database unless another is named)."""
        return (
            f"postgresql+psycopg://postgres@127.0.0.1:{self.ports[node]}/"
            f"{database or self.database}"
        )

    def multi_host_url(self) -> str:
        """The URL writers use: both nodes, the one that accepts writes is chosen at
        each connect (``target_session_attrs=read-write``)."""
        hosts = "&".join(f"host=127.0.0.1:{port}" for port in self.ports)
        return (
            f"postgresql+psycopg://postgres@/{self.database}?{hosts}"
            "&target_session_attrs=read-write&connect_timeout=2"
        )

    def _pg(self, *args: str) -> None:
        subprocess.run(_as_server_user(list(args)), check=True, stdout=subprocess.DEVNULL)

    def build_standby(self, node: int) -> None:
        """``node`` as a fresh standby of the primary: its data removed, a base backup
        with the standby's configuration (``-R``) streamed from the primary, started."""
        folder = self.folder(node)
        stop(folder, "immediate")
        shutil.rmtree(folder / "data", ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        _hand_to_server_user(folder)
        self._pg(
            find_binary("pg_basebackup"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.ports[self.primary]),
            "-U",
            "postgres",
            "-D",
            str(folder / "data"),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
        )
        start(folder, self.ports[node], synchronous_commit=True)
        # Started is not yet streaming: the primary's commits wait until it is.
        for _ in range(6000):
            if self.is_streaming_synchronously():
                return
            time.sleep(0.01)
        raise RuntimeError(f"the standby on port {self.ports[node]} never began to stream")

    def kill_primary(self) -> None:
        """The primary stops as in a crash or power cut (``pg_ctl stop -m immediate``)."""
        stop(self.folder(self.primary), "immediate")

    def promote(self) -> None:
        """The standby becomes the primary (``pg_ctl promote``, waiting until it is)."""
        self._pg(
            find_binary("pg_ctl"), "-D", str(self.folder(self.standby) / "data"), "-w", "promote"
        )
        self.primary = self.standby

    def fail_over(self) -> None:
        """Kill the primary, promote the standby, rebuild the old primary as standby."""
        self.kill_primary()
        self.promote()
        self.build_standby(self.standby)

    def is_streaming_synchronously(self) -> bool:
        """Whether the primary has a standby it waits for (``sync_state = 'sync'``)."""
        rows = Rows(self.node_url(self.primary, "postgres")).query(
            "SELECT sync_state FROM pg_stat_replication"
        )
        return ("sync",) in rows


@contextmanager
def replicated_pair() -> Iterator[ReplicatedPair]:
    """A primary with a synchronous standby and a migrated store database
    (:attr:`ReplicatedPair.database`); both stopped and removed when the block ends."""
    root = Path(tempfile.mkdtemp(prefix="hermes-pg-pair-"))
    pair = ReplicatedPair(root, (free_port(), free_port()))
    try:
        start(pair.folder(0), pair.ports[0], synchronous_commit=True)
        conf = pair.folder(0) / "data" / "postgresql.conf"
        # Appended in place (the file keeps its owner): the settings take effect at a
        # reload, and the standby's base backup copies them.
        with conf.open("a") as f:
            f.write(_SYNCHRONOUS)
        pair._pg(find_binary("pg_ctl"), "-D", str(pair.folder(0) / "data"), "reload")
        server = PgServer(pair.node_url(0, "postgres"))
        pair.build_standby(1)
        server.create(pair.database)
        StateStore.open(root / "template-home", url=pair.node_url(0)).close()
        yield pair
    finally:
        try:
            for node in (0, 1):
                stop(pair.folder(node), "immediate")
        finally:
            shutil.rmtree(root, ignore_errors=True)
