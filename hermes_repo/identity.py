"""The identities one write call mints, the same on every attempt, and what it wrote.

A write is replayed whole when it fails in a way a new attempt may fix (a lock, a lost
connection). An id minted *inside* the unit (a generated session id, the uid of a
message handed over without one) would then differ from one attempt to the next, and
when the first attempt's commit did land (the server committed, its reply was lost) the
replay stores the same thing twice under new ids. So every id a unit mints comes from
an :class:`Identities` made once per :meth:`Database.write
<hermes_repo.database.Database.write>` call: the first attempt mints them, each later
attempt gets the same values in the same order.

It also records what the current attempt wrote under an identity (sessions created,
message rows inserted): after a commit whose outcome is unknown, the write core looks
for exactly those on a fresh connection instead of running the unit again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Identities", "Written"]


@dataclass
class Written:
    """What one attempt of a unit wrote under an identity: the ids of the sessions it
    created and the message rows it inserted (as inserted: session id, uid, columns)."""

    sessions: list[str] = field(default_factory=list)
    messages: list[Mapping[str, Any]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.sessions or self.messages)


class Identities:
    """Ids minted for one write call, replayed in order on each of its attempts.

    ``take(kind, mint)`` returns the next id of ``kind`` ("session", "uid"): minted by
    ``mint`` the first time that position is asked for, the same value on every later
    attempt (kinds count apart, so an attempt that asks in another order still gets a
    session id where it wants one). :meth:`restart` begins the next attempt.
    """

    __slots__ = ("_minted", "_next", "written")

    def __init__(self) -> None:
        self._minted: dict[str, list[str]] = {}
        self._next: dict[str, int] = {}
        #: What the current attempt wrote (see :class:`Written`).
        self.written = Written()

    def take(self, kind: str, mint: Callable[[], str]) -> str:
        """The next id of ``kind`` for this attempt (minted once per call)."""
        minted = self._minted.setdefault(kind, [])
        n = self._next.get(kind, 0)
        if n == len(minted):
            minted.append(mint())
        self._next[kind] = n + 1
        return minted[n]

    def restart(self) -> None:
        """Begin another attempt: the same ids again from the first, nothing written."""
        self._next.clear()
        self.written = Written()

    def session_created(self, session_id: str) -> None:
        self.written.sessions.append(session_id)

    def rows_inserted(self, rows: list[Mapping[str, Any]]) -> None:
        self.written.messages.extend(rows)
