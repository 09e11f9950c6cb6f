"""A ``Session`` for the OpenAI Agents SDK that keeps its items in a hermes store.

::

    from agents import Agent, Runner
    from hermes_repo.integrations.openai_agents import HermesSession

    session = HermesSession("support-42")          # the store of $HERMES_HOME, else ~/.hermes
    result = await Runner.run(agent, "Where is my order?", session=session)

What the store adds over the SDK's ``SQLiteSession``:

* a write the database cannot take in time (locked past the budget, a server away) is
  spooled to ``sessions/<sid>.pending.jsonl`` and replayed exactly once; the session's
  objects in this process still return those items meanwhile. On a damaged file the
  items go to the salvage file and ``add_items`` raises ``StateDbCorruptError`` naming
  ``hermes-repo sessions recover``; a full disk raises ``StorageFullError``;
* ``pop_item`` and ``clear_session`` archive rows with a reason, never delete them
  (``hermes-repo sessions show SID --include-inactive`` shows them);
* every item is an ordinary message row: ``hermes-repo search`` finds its text (CJK
  included), and ``doctor``, ``snapshot`` and the repair tools work on the session;
* a locked database is retried within a budget, a damaged file is quarantined.

Every call runs the store's blocking work in a worker thread: the event loop never waits
on SQLite, a lock or an fsync.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hermes_repo import (
    ConfigurationError,
    DatabaseBusyError,
    IntegrityViolation,
    NotFoundError,
    SessionTakenError,
    StateDbCorruptError,
    StateStore,
    StorageFullError,
    StoreClosedError,
    TranscriptWriter,
    UnitOfWork,
    WriteFailedError,
)

from ._agents_items import SOURCE, item_to_message, message_to_item, normalise_items
from ._ids import door_session_id

try:
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
    raise ImportError(
        "hermes_repo.integrations.openai_agents needs the OpenAI Agents SDK; install it "
        "with: pip install 'hermes_repo[openai-agents]'"
    ) from exc

__all__ = ["CLEAR_REASON", "POP_REASON", "SOURCE", "HermesSession", "session_key"]

log = logging.getLogger("hermes_repo.integrations.openai_agents")

T = TypeVar("T")

# A limit at least this large asks for every item.
_ALL = 2**62

#: The archive reason of a row removed by ``pop_item``.
POP_REASON = "openai-agents: pop_item"
#: The archive reason of the rows removed by ``clear_session``.
CLEAR_REASON = "openai-agents: clear_session"


def session_key(session_id: str) -> str:
    """The hermes session id that keeps the SDK session ``session_id``: the id itself
    when hermes accepts it (letters, digits, ``._:-``, at most 128 characters, no
    ``..``), else ``oa-`` and 40 hex digits of its SHA-256. The SDK's id is the session's
    title either way."""
    if not isinstance(session_id, str) or not session_id:
        raise IntegrityViolation(
            f"session_id must be a non-empty string, got {session_id!r}; pass the conversation's id"
        )
    return door_session_id(session_id, "oa")


@dataclass
class _Door:
    """What every HermesSession of one session on one open store shares: the writer
    (which uids it knows are committed: loaded once, not per HermesSession), the items
    spooled and not yet in the database, and the lock that orders the calls."""

    writer: TranscriptWriter
    spooled: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    known: bool = False  # the session row exists and is ours
    users: int = 0  # open HermesSessions on it: the last close forgets it (unless spooled)


_DoorKey = tuple[int, str, float | None]
_doors: dict[_DoorKey, _Door] = {}
_doors_lock = threading.Lock()


def _door_key(store: StateStore, key: str, write_budget_s: float | None) -> _DoorKey:
    return (id(store), key, write_budget_s)


def _open_door(store: StateStore, key: str, write_budget_s: float | None) -> _Door:
    # A gateway builds a HermesSession per request: one writer per session and store
    # (TranscriptWriter's intended use) keeps the first flush's read of every stored
    # uid from being paid again on each. Keyed by the store's identity while a session
    # holds it open (the door's writer keeps the store alive until then).
    with _doors_lock:
        door = _doors.get(_door_key(store, key, write_budget_s))
        if door is None:
            writer = store.transcript_writer(key, write_budget_s=write_budget_s, source=SOURCE)
            door = _doors[_door_key(store, key, write_budget_s)] = _Door(writer)
        door.users += 1
        return door


def _close_door(door_key: _DoorKey) -> None:
    with _doors_lock:
        door = _doors.get(door_key)
        if door is not None:
            door.users -= 1
            # Kept while it holds spooled items: the next HermesSession of the session
            # must still return them.
            if door.users <= 0 and not door.spooled:
                del _doors[door_key]


async def _settle(call: Callable[[], T]) -> T:
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


class HermesSession:
    """The OpenAI Agents SDK's ``Session`` protocol on a hermes store.

    ``HermesSession(session_id)`` opens the store of ``home`` (default
    ``$HERMES_HOME``, else ``~/.hermes``) and closes it in :meth:`close`; pass ``store=``
    to share one open :class:`~hermes_repo.StateStore` between sessions (it is then the
    caller's to close). ``session_settings`` is a ``SessionSettings`` or a dict (unknown
    keys are refused, as the SDK does); its ``limit`` is :meth:`get_items`'s default.
    ``write_budget_s``: how long a locked database is waited for before items go to the
    spool (default: the store's transcript budget).

    Items must be JSON (as for ``SQLiteSession``); NaN and infinities are refused. The
    store's errors are :class:`~hermes_repo.HermesRepoError` subclasses naming the cause
    and the fix (the SDK's own ``TypeError`` for unknown settings keys is left as it is).
    """

    session_id: str
    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        store: StateStore | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        write_budget_s: float | None = None,
    ) -> None:
        self.session_id = session_id
        self.key = session_key(session_id)
        self.session_settings = (
            coerce_session_settings(session_settings)
            if session_settings is not None
            else SessionSettings()
        )
        if store is not None and home is not None:
            raise ConfigurationError(
                "pass store= (an open store) or home= (a folder to open), not both"
            )
        if write_budget_s is not None and not (
            isinstance(write_budget_s, int | float) and 0 <= write_budget_s < math.inf
        ):
            raise ConfigurationError(
                f"write_budget_s must be a number of seconds >= 0, got {write_budget_s!r}"
            )
        self._close_lock = threading.Lock()
        self._closed = False
        self._owns_store = store is None
        self.store = store if store is not None else StateStore.open(home)
        self._door_key = _door_key(self.store, self.key, write_budget_s)
        try:
            self._door = _open_door(self.store, self.key, write_budget_s)
            self._writer: TranscriptWriter = self._door.writer
            self._pending: Path = self._writer.pending_path
            # Items spooled and not in the database yet, oldest first: get_items still
            # returns them, after the stored ones. Shared by the session's HermesSessions.
            self._spooled: list[dict[str, Any]] = self._door.spooled
            self._lock = self._door.lock
            if not self._door.known:
                self._door.known = self._owned_here()
        except BaseException:
            self.close()  # an opened store is not left behind
            raise

    def _owned_here(self) -> bool:
        # Never read or archive rows of a session another door wrote: refused up front.
        try:
            found = self.store.get_session(self.key)
        except NotFoundError:
            return False
        if found.source != SOURCE:
            raise SessionTakenError(
                f"session {self.key!r} was written by {found.source!r}, not through the "
                "OpenAI Agents SDK; use another session_id (hermes-repo sessions list shows "
                "the ones taken)"
            )
        # One a spool replay created has no title yet: the first write names it.
        return found.title is not None

    def __repr__(self) -> str:
        return f"HermesSession({self.session_id!r}, store={self.store!r})"

    # -- the protocol ------------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """The session's items, oldest first; with ``limit`` (default: the settings'),
        only the newest ``limit`` of them, still oldest first (0: none; a negative
        limit: all, as ``SQLiteSession`` does)."""
        self._check_open()
        wanted = resolve_session_limit(limit, self.session_settings)
        if wanted is not None and (isinstance(wanted, bool) or not isinstance(wanted, int)):
            raise IntegrityViolation(
                f"limit must be a whole number or None, got {wanted!r}; pass e.g. limit=50"
            )
        if wanted == 0:
            return []
        # Beyond any session's length (and SQLite's 64-bit LIMIT): the same as all.
        last = wanted if wanted is not None and 0 < wanted < _ALL else None
        return await asyncio.to_thread(self._get_items, last)

    async def add_items(self, items: list[Any]) -> None:
        """Append ``items`` in order, all in one transaction; when the database cannot
        take them within the budget they are spooled (safe on disk, returned by
        :meth:`get_items`, replayed exactly once by the next call or open)."""
        self._check_open()
        normalised = normalise_items(items)
        if not normalised:
            return
        await _settle(lambda: self._add_items(normalised))

    async def pop_item(self) -> Any | None:
        """Remove the newest item and return it (None when there is none): its row is
        archived with the reason :data:`POP_REASON`, never deleted."""
        self._check_open()
        return await _settle(self._pop_item)

    async def clear_session(self) -> None:
        """Remove every item: the rows are archived with the reason
        :data:`CLEAR_REASON`, never deleted; the session stays and takes new items."""
        self._check_open()
        await _settle(self._clear_session)

    def close(self) -> None:
        """Close the session, and the store when this session opened it. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            if hasattr(self, "_door"):
                _close_door(self._door_key)
            if self._owns_store:
                self.store.close()

    # -- the blocking halves, run in a worker thread -------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(
                f"HermesSession {self.session_id!r} is closed; create a new HermesSession"
            )

    def _ensure_session(self) -> None:
        if self._door.known:
            return
        key = self.key

        def work(uow: UnitOfWork) -> str:
            if not uow.sessions.ensure(key, source=SOURCE, title=self.session_id):
                # Created by a spool replay (source recorded, no title): name it now.
                uow.sessions.title_if_untitled(key, self.session_id)
            return uow.sessions.require(key).source

        try:
            # Within the writer's budget: a locked database must spool the items, not
            # fail the call on the session row.
            source = self.store.write(work, self._writer.policy)
        except WriteFailedError:
            return  # the flush spools; the row (and its title) comes with a later call
        if source != SOURCE:
            self._owned_here()  # raises, naming the session's source
        self._door.known = True

    def _replay_spooled(self, *, required: bool) -> None:
        # A spool left by this session, or by an earlier process for this session id.
        if not self._spooled and not self._pending.exists():
            return
        # A read tries once (it must not wait on a writer's lock: the spooled items are
        # returned from memory meanwhile); pop and clear wait as a write does.
        budget = self._writer.policy.budget_s if required else 0.0
        report = self.store.recover_pending(self.key, write_budget_s=budget)
        if not self._pending.exists():
            self._spooled.clear()  # in place: the list is the door's
            return
        if required:
            raise DatabaseBusyError(
                f"items of session {self.session_id!r} are still in the spool "
                f"({'; '.join(report.errors) or 'not replayed'}); retry when the database "
                "takes writes again, or run: hermes-repo pending recover"
            )

    def _get_items(self, last: int | None) -> list[Any]:
        with self._lock:  # held for the read: a replay in between would count twice
            self._replay_spooled(required=False)
            # Copies: a caller editing what it got must not edit what is pending.
            spooled = copy.deepcopy(self._spooled)
            messages = self.store.load_conversation(self.key, last=last).messages
        items = [message_to_item(m) for m in messages] + spooled
        return items if last is None else items[max(0, len(items) - last) :]

    def _add_items(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            self._ensure_session()
            messages = [item_to_message(item) for item in items]
            # The flush writes the session's spooled backlog first, then these.
            result = self._writer.flush(messages)
            if self._spooled and not self._pending.exists():
                self._spooled.clear()
            if result.rejections:
                reasons = "; ".join(f"item {r.index}: {r.reason}" for r in result.rejections)
                raise IntegrityViolation(
                    f"{result.rejected} item(s) can never be stored ({reasons}); the other "
                    f"{len(items) - result.rejected} were saved and the refused ones kept in "
                    f"sessions/ beside the store; pass plain JSON values"
                )
            if result.unsaved:
                # Neither the database nor the spool took them: a full or failing disk.
                raise StorageFullError(
                    f"{result.unsaved} item(s) were not saved: {result.error}; nothing was "
                    "lost that was saved before, retry add_items"
                )
            if result.spooled and self.store.quarantined:
                # Kept in the salvage file, which only `sessions recover` brings back:
                # not returned as if they were pending, and the caller must know.
                raise StateDbCorruptError(
                    f"the store's file is damaged and quarantined: {result.spooled} item(s) "
                    f"of session {self.session_id!r} were kept in the salvage file under "
                    f"sessions/ beside it ({result.error}); run hermes-repo doctor, then "
                    "hermes-repo sessions recover"
                )
            if result.spooled:
                spooled = set(result.spooled_uids)
                self._spooled += [
                    item for item, m in zip(items, messages, strict=True) if m["uid"] in spooled
                ]
                log.warning(
                    "session %s: %d item(s) spooled (%s); they are replayed by the next call",
                    self.session_id,
                    result.spooled,
                    result.error,
                )

    def _pop_item(self) -> Any | None:
        with self._lock:
            self._replay_spooled(required=True)
            key = self.key

            def work(uow: UnitOfWork) -> dict[str, Any] | None:
                # The session row locked first (FOR UPDATE on a server, where units run
                # side by side under READ COMMITTED): two pops never take one item.
                if uow.sessions.source_and_extra(key, lock=True) is None:
                    return None
                newest = uow.messages.list(key, last=1)
                if not newest:
                    return None
                uow.messages.archive_active(key, reason=POP_REASON, uid=newest[0]["uid"])
                uow.messages.recount(key)
                return newest[0]

            popped = self.store.write(work)
        return None if popped is None else message_to_item(popped)

    def _clear_session(self) -> None:
        with self._lock:
            self._replay_spooled(required=True)
            key = self.key

            def work(uow: UnitOfWork) -> None:
                uow.sessions.source_and_extra(key, lock=True)  # ordered with the pops
                if uow.messages.archive_active(key, reason=CLEAR_REASON):
                    uow.messages.recount(key)

            self.store.write(work)
