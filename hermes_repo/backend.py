"""What the write core asks of the database it runs on, answered in one place.

The SQLite rules of the write core (quarantine of a damaged file, detaching a damaged
FTS5 index, the holder lock file, the driver-cursor fast paths, ``BEGIN IMMEDIATE``)
belong to a store *file*. On a PostgreSQL server none of them applies: the server keeps
its own files, full-text search is kept by the database, and there is no lock file to
hold. The write core asks a :class:`Backend` instead of testing the dialect here and
there, so each rule is switched in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["POSTGRESQL", "SQLITE", "Backend"]


@dataclass(frozen=True)
class Backend:
    """The database a store runs on, as the write core sees it."""

    name: Literal["sqlite", "postgresql"]

    @property
    def is_file(self) -> bool:
        """An embedded database file (SQLite): the store owns its bytes."""
        return self.name == "sqlite"

    @property
    def may_quarantine(self) -> bool:
        """A structurally damaged file is quarantined (never on a server: its files are
        the server's, and it reports damage as errors of its own)."""
        return self.is_file

    @property
    def has_fts_triggers(self) -> bool:
        """Search is kept by FTS5 triggers that a damaged index makes the store detach."""
        return self.is_file

    @property
    def search_dialect(self) -> Literal["fts5", "postgresql"]:
        """Which search dialect runs the store's searches (see
        :mod:`hermes_repo.repositories.search`)."""
        return "fts5" if self.is_file else "postgresql"

    @property
    def holds_lock_file(self) -> bool:
        """Processes register in a holder lock file next to the store."""
        return self.is_file

    @property
    def cursor_fast_path(self) -> bool:
        """The one-message append runs its SQL straight on the driver's cursor.

        On SQLite SQLAlchemy's per-statement cost exceeded SQLite's own work; on a
        server the round trips dominate, so PostgreSQL takes the SQLAlchemy Core path
        (its events and disconnect handling included).
        """
        return self.is_file

    @property
    def refuses_stale_writes(self) -> bool:
        """A read transaction that starts writing after another writer committed is
        refused (SQLite: one writer at a time, a stale snapshot cannot write). On a
        server, transactions interleave: a read-then-write unit must lock what it read."""
        return self.is_file


SQLITE = Backend("sqlite")
POSTGRESQL = Backend("postgresql")
