"""What every ``HermesSession`` of one session shares in this process, and how its
blocking calls are run.

The :class:`Tail` of a session (the items spooled and not yet in the database, and the
lock that orders the calls) is shared by every ``HermesSession`` of that session of one
store, whichever ``StateStore`` object it was built on; :func:`settle` runs a blocking
mutation in a worker thread and delivers a cancellation only once its outcome is known.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hermes_repo import StateStore

__all__ = ["Tail", "TailKey", "hold_tail", "release_tail", "settle", "tail_key", "tails"]

T = TypeVar("T")


@dataclass
class Tail:
    """What every HermesSession of one session of one store shares in this process,
    whichever :class:`StateStore` object it was built on: the items spooled and not yet
    in the database (oldest first), and the lock that orders the calls."""

    spooled: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    titled: bool = False  # the row is known to carry its title: no UPDATE per call
    users: int = 0  # HermesSessions holding it: the last close forgets it (unless spooled)


# (the home's real path, the database: its real file path or the server's URL without
# its password, the session id). Not the StateStore object: a second object of the
# same store, or one opened after the first was closed, must see the same tail.
TailKey = tuple[str, str, str]
tails: dict[TailKey, Tail] = {}
tails_lock = threading.Lock()


def tail_key(store: StateStore, key: str) -> TailKey:
    home = os.path.realpath(store.home)
    if store.backend.is_file:
        return home, os.path.realpath(store.path), key
    # The spool files live in the home, so two homes on one server keep two tails.
    return home, str(store.database.location), key


def hold_tail(tail_key: TailKey) -> Tail:
    with tails_lock:
        tail = tails.get(tail_key)
        if tail is None:
            tail = tails[tail_key] = Tail()
        tail.users += 1
        return tail


def release_tail(tail_key: TailKey) -> None:
    with tails_lock:
        tail = tails.get(tail_key)
        if tail is not None:
            tail.users -= 1
            # Kept while it holds spooled items: the next HermesSession of the session
            # must still return them.
            if tail.users <= 0 and not tail.spooled:
                del tails[tail_key]


async def settle(call: Callable[[], T]) -> T:
    """Run a blocking mutation in a thread and wait for its outcome even if the caller
    is cancelled meanwhile: the write runs on either way, so the cancellation is
    delivered only once it is known whether it committed."""
    task: asyncio.Future[T] = asyncio.ensure_future(asyncio.to_thread(call))
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller gets
        raise cancelled
    return task.result()
