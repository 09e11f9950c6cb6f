"""A ``Session`` for the OpenAI Agents SDK that keeps its items in a hermes store.

::

    from agents import Agent, Runner
    from hermes_repo.integrations.openai_agents import HermesSession

    session = HermesSession("support-42")          # the store of $HERMES_HOME/hermes-repo
    result = await Runner.run(agent, "Where is my order?", session=session)

What the store adds over the SDK's ``SQLiteSession``:

* a write the database cannot take in time (locked past the budget, a server away) is
  spooled to ``sessions/<sid>.pending.jsonl`` and replayed exactly once; the session's
  objects in this process still return those items meanwhile. On a damaged file the
  items go to the hold file and ``add_items`` raises ``StateDbCorruptError`` naming
  ``hermes-repo sessions salvage``; a full disk raises ``StorageFullError``;
* ``pop_item`` and ``clear_session`` archive rows with a reason, never delete them
  (``hermes-repo sessions show SID --include-inactive`` shows them);
* every item is an ordinary message row: ``hermes-repo search`` finds its text (CJK
  included), and ``doctor``, ``snapshot`` and the repair tools work on the session;
* a locked database is retried within a budget, a damaged file is quarantined.

Every call runs the store's blocking work in a worker thread, the opening of the store
(and the spool replay it runs) included: the event loop never waits on SQLite, a lock
or an fsync, and building a ``HermesSession`` does no I/O.

Every call checks, in the transaction that does its work, that the session is the SDK's
(its source): a session another door or an agent made under the id, even after the
``HermesSession`` was built, is refused with ``SessionTakenError`` and nothing of it is
read, popped, cleared or written; a spool of the session is never replayed into it.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.engine import Connection

from hermes_repo import (
    ConfigurationError,
    DatabaseBusyError,
    HermesRepoError,
    IntegrityViolation,
    MessageRepository,
    SessionRepository,
    SessionTakenError,
    StateDbCorruptError,
    StateStore,
    StorageFullError,
    StoreClosedError,
    UnitOfWork,
    WriteFailedError,
)

from ._agents_items import SOURCE, message_to_item, normalise_items, session_key, to_messages
from ._agents_tail import Tail, TailKey, hold_tail, release_tail, settle, tail_key

# The registry of shared tails, under the name it had here (a program inspecting it).
from ._agents_tail import tails as _tails  # noqa: F401

try:
    from agents.memory.session_settings import (
        SessionSettings,
        coerce_session_settings,
        resolve_session_limit,
    )
except ImportError as exc:  # pragma: no cover - the extra is part of the dev install
    raise ImportError(
        "hermes_repo.integrations.openai_agents needs the OpenAI Agents SDK; install it "
        "with: pip install 'openai-agents>=0.24' (the openai-agents extra: pip install "
        "'.[openai-agents]' in a hermes_repo checkout)"
    ) from exc

__all__ = ["CLEAR_REASON", "POP_REASON", "SOURCE", "HermesSession", "session_key"]

log = logging.getLogger("hermes_repo.integrations.openai_agents")

T = TypeVar("T")

# A limit at least this large asks for every item.
_ALL = 2**62

# Failures the database, not an item, causes (a lock past the budget, a server away, a
# full disk, a damaged file or index): the items go to the spool (or the hold file).
# Any other failure rolled the call's unit back and is raised: nothing of it is stored.
_SOURCE_SQL = "SELECT source FROM sessions WHERE id = ?"
_SPOOLED_KINDS = frozenset({"transient", "disk", "corrupt", "fts", "timeout"})

#: The archive reason of a row removed by ``pop_item``.
POP_REASON = "openai-agents: pop_item"
#: The archive reason of the rows removed by ``clear_session``.
CLEAR_REASON = "openai-agents: clear_session"


class HermesSession:
    """The OpenAI Agents SDK's ``Session`` protocol on a hermes store.

    ``HermesSession(session_id)`` opens the store of ``home`` (default
    ``$HERMES_HOME/hermes-repo``) at its first call, in a worker thread (the
    constructor does no I/O), and closes it in :meth:`close`; pass ``store=`` to share
    one open :class:`~hermes_repo.StateStore` between sessions (it is then the caller's
    to close; once it is closed every call raises :class:`~hermes_repo.StoreClosedError`).
    ``session_settings`` is a ``SessionSettings`` or a dict (unknown keys are refused, as
    the SDK does); its ``limit`` is :meth:`get_items`'s default. ``write_budget_s``: how
    long a locked database is waited for before items go to the spool (default: the
    store's transcript budget).

    Every call checks, in the transaction that does its work, that the session is the
    SDK's: a session another door or an agent made under the id (even after this object
    was built) is refused with :class:`~hermes_repo.SessionTakenError`, and nothing of
    it is read, popped, cleared or written.

    Items must be JSON (as for ``SQLiteSession``); NaN and infinities are refused. A
    call's items are checked whole before any is written: one that cannot be stored
    refuses the call, naming its index. The store's errors are
    :class:`~hermes_repo.HermesRepoError` subclasses naming the cause and the fix (the
    SDK's own ``TypeError`` for unknown settings keys is left as it is).
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
        self._write_budget_s = write_budget_s
        self._home = home
        # Opening a store, and the spool replay its open runs, wait on locks and disks:
        # done at the first call, in the worker thread (the event loop never waits).
        self._lock = threading.Lock()  # guards the fields below, never held across I/O
        self._closed = False
        self._owns_store = store is None
        self._store: StateStore | None = store
        self._tail: Tail | None = None
        self._tail_key: TailKey | None = None
        self._pending: Path | None = None
        self._policy: Any = None  # the writer's RetryPolicy (its budget)
        self._last_replay_errors: list[str] = []
        self._fast = False  # SQLite: the owner is read on the driver's cursor
        self._opening = threading.Lock()  # one open of the owned store, not one per call

    @property
    def store(self) -> StateStore:
        """The store; a session given ``home=`` opens it here when no call has yet (this
        blocks: from async code let a call open it in its thread)."""
        return self._ready()[0]

    def __repr__(self) -> str:
        where = self._store if self._store is not None else f"home={self._home!r}"
        return f"HermesSession({self.session_id!r}, store={where!r})"

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
        :meth:`get_items`, replayed exactly once by the next call or open). An item that
        can never be stored refuses the whole call, naming its index: nothing of it is
        written."""
        self._check_open()
        normalised = normalise_items(items)
        if not normalised:
            return
        await settle(lambda: self._add_items(normalised))

    async def pop_item(self) -> Any | None:
        """Remove the newest item and return it (None when there is none): its row is
        archived with the reason :data:`POP_REASON`, never deleted."""
        self._check_open()
        return await settle(self._pop_item)

    async def clear_session(self) -> None:
        """Remove every item: the rows are archived with the reason
        :data:`CLEAR_REASON`, never deleted; the session stays and takes new items."""
        self._check_open()
        await settle(self._clear_session)

    def close(self) -> None:
        """Close the session, and the store when this session opened it. Idempotent."""
        with self._opening, self._lock:
            if self._closed:
                return
            self._closed = True
            if self._tail_key is not None:
                release_tail(self._tail_key)
            if self._owns_store and self._store is not None:
                self._store.close()

    # -- the blocking halves, run in a worker thread -------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(
                f"HermesSession {self.session_id!r} is closed; create a new HermesSession"
            )

    def _ready(self) -> tuple[StateStore, Tail]:
        """The open store and the session's shared tail, opening the store first when
        this session owns it; a closed session or store raises StoreClosedError."""
        with self._opening:
            self._check_open()
            store = self._store
            if store is None:
                store = self._store = StateStore.open(self._home)
            store.engine  # noqa: B018 - raises StoreClosedError once the store is closed
            tail = self._tail
            if tail is None:
                shared_key = tail_key(store, self.key)
                writer = store.transcript_writer(self.key, write_budget_s=self._write_budget_s)
                with self._lock:
                    self._fast = store.backend.cursor_fast_path
                    self._pending = writer.pending_path
                    self._policy = writer.policy
                    self._tail_key = shared_key
                    tail = self._tail = hold_tail(shared_key)
            return store, tail

    def _refuse_foreign(self, source: str) -> None:
        # The key is a one-to-one function of the SDK's id (a hash for any id that is
        # not a valid session id, a literal hash hashed again): a session of the SDK's
        # source under it is this id's. Another source's is not ours to touch.
        if source != SOURCE:
            raise SessionTakenError(
                f"session {self.key!r} was written by {source!r}, not through the "
                "OpenAI Agents SDK; nothing was read or written: use another session_id "
                "(hermes-repo sessions list shows the ones taken)"
            )

    def _check_owner(self, store: StateStore, policy: Any = None) -> None:
        """A read of the session's source: before a spool replay, which must never
        carry this session's items into another door's session."""
        state = store.read(lambda conn: SessionRepository(conn).source_and_extra(self.key), policy)
        if state is not None:
            self._refuse_foreign(state[0])

    def _owned(self, uow: UnitOfWork) -> bool:
        """In ``uow``: True when the session exists and is ours (its row locked until
        the unit ends, so pops, clears and appends are ordered), False when missing;
        another source's raises SessionTakenError."""
        if self._fast:
            # SQLite: one writer at a time, the unit's transaction is the lock.
            return self._owned_on(uow.connection)
        state = uow.sessions.source_and_extra(self.key, lock=True)
        if state is None:
            return False
        self._refuse_foreign(state[0])
        return True

    def _owned_on(self, conn: Connection) -> bool:
        """:meth:`_owned` on SQLite, in ``conn``'s transaction (begun by this statement
        when it is the unit's first: BEGIN IMMEDIATE, the write lock), one plain
        statement: SQLAlchemy's compiled-statement cost was most of a small call."""
        found = conn.exec_driver_sql(_SOURCE_SQL, (self.key,)).first()
        if found is None:
            return False
        if found[0] != SOURCE:  # ours is stored as it is: plain text, no mark (the codec)
            state = SessionRepository(conn).source_and_extra(self.key)  # decoded, to name it
            self._refuse_foreign(state[0] if state is not None else str(found[0]))
        return True

    def _backlog(self, tail: Tail) -> bool:
        assert self._pending is not None
        return bool(tail.spooled) or self._pending.exists()

    def _replay_spooled(self, store: StateStore, tail: Tail, budget: float) -> bool:
        """Replay the session's spool (left by this process or an earlier one), after
        checking the session is ours; True when nothing is pending any more."""
        assert self._pending is not None
        self._check_owner(store)
        report = store.replay_pending(self.key, write_budget_s=budget)
        if self._pending.exists():
            self._last_replay_errors = list(report.errors)
            return False
        tail.spooled.clear()  # in place: the list is shared
        return True

    def _require_replayed(self, store: StateStore, tail: Tail) -> None:
        # Pop and clear act on the newest rows: the spooled ones must be in first.
        assert self._policy is not None
        if not self._backlog(tail) or self._replay_spooled(store, tail, self._policy.budget_s):
            return
        raise DatabaseBusyError(
            f"items of session {self.session_id!r} are still in the spool "
            f"({'; '.join(self._last_replay_errors) or 'not replayed'}); retry when the "
            "database takes writes again, or run: hermes-repo pending replay"
        )

    def _get_items(self, last: int | None) -> list[Any]:
        store, tail = self._ready()
        key = self.key
        fast = self._fast

        def read(conn: Connection) -> list[dict[str, Any]]:
            # The owner and the rows in one read transaction: no extra round trip.
            if not fast:
                state = SessionRepository(conn).source_and_extra(key)
                if state is None:
                    return []
                self._refuse_foreign(state[0])
                return MessageRepository(conn).list(key, last=last)
            if not self._owned_on(conn):
                return []
            # SQLite: the rows on the driver's cursor, in the same transaction (what
            # load_conversation does; SQLAlchemy's per-row cost exceeds SQLite's own).
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None
            cursor = dbapi.cursor()
            try:
                return MessageRepository(cursor).list(key, last=last)
            finally:
                cursor.close()

        with tail.lock:  # held for the read: a replay in between would count twice
            if self._backlog(tail):
                # A read tries once: it must not wait on a writer's lock (the spooled
                # items are returned from memory meanwhile).
                self._replay_spooled(store, tail, 0.0)
            # Copies: a caller editing what it got must not edit what is pending.
            spooled = copy.deepcopy(tail.spooled)
            messages = store.read(read)
        items = [message_to_item(m) for m in messages] + spooled
        return items if last is None else items[max(0, len(items) - last) :]

    def _add_items(self, items: list[dict[str, Any]]) -> None:
        store, tail = self._ready()
        assert self._policy is not None
        # Every item checked before the first is written: one that can never be stored
        # refuses the call whole (a writer's flush would store the others).
        messages = to_messages(items, self.key, server=not store.backend.is_file)
        key, title = self.key, self.session_id

        def append(uow: UnitOfWork) -> None:
            if not self._owned(uow):
                if not uow.sessions.ensure(key, source=SOURCE, title=title):
                    # Created meanwhile by another host (a server): whose is it?
                    self._owned(uow)
            elif not tail.titled:
                # Created by a spool replay (source recorded, no title): name it now.
                uow.sessions.title_if_untitled(key, title)
            uow.messages.append_many(key, messages)

        with tail.lock:
            # The spooled backlog goes in first (rows keep the conversation's order);
            # while it cannot, these items queue behind it in the spool.
            if not self._backlog(tail) or self._replay_spooled(store, tail, self._policy.budget_s):
                try:
                    store.write(append, self._policy)
                except WriteFailedError as exc:
                    if exc.kind.value not in _SPOOLED_KINDS:
                        raise  # the unit rolled back: nothing of the call is stored
                    log.info("session %s: write failed (%s); spooling", self.session_id, exc)
                else:
                    tail.titled = True
                    return
            self._spool(store, tail, items, messages)

    def _spool(
        self,
        store: StateStore,
        tail: Tail,
        items: list[dict[str, Any]],
        messages: list[dict[str, Any]],
    ) -> None:
        """The database did not take ``messages`` within the budget: the writer (one
        more attempt, then the spool or, on a damaged file, the hold file)."""
        try:
            # The writer tries the database once more, outside this call's checked unit:
            # a session another door took meanwhile must not get the items.
            self._check_owner(store, dataclasses.replace(self._policy, budget_s=0.0))
        except SessionTakenError:
            raise
        except HermesRepoError:
            pass  # the database is away: the spool is where the items go
        writer = store.transcript_writer(self.key, write_budget_s=0.0, source=SOURCE)
        result = writer.flush(messages)
        if self._pending is not None and tail.spooled and not self._pending.exists():
            tail.spooled.clear()
        if result.rejections:  # checked before: only a codec the check did not know
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
        if result.spooled and store.quarantined:
            # Kept in the hold file, which nothing replays by itself (doctor says how):
            # not returned as if they were pending, and the caller must know.
            raise StateDbCorruptError(
                f"the store's file is damaged and quarantined: {result.spooled} item(s) "
                f"of session {self.session_id!r} were kept in the hold file under "
                f"sessions/ beside it ({result.error}); run hermes-repo doctor, then "
                "hermes-repo sessions salvage"
            )
        if result.spooled:
            spooled = set(result.spooled_uids)
            tail.spooled += [
                item for item, m in zip(items, messages, strict=True) if m["uid"] in spooled
            ]
            log.warning(
                "session %s: %d item(s) spooled (%s); they are replayed by the next call",
                self.session_id,
                result.spooled,
                result.error,
            )

    def _pop_item(self) -> Any | None:
        store, tail = self._ready()
        key = self.key

        def work(uow: UnitOfWork) -> dict[str, Any] | None:
            # The session row locked first (FOR UPDATE on a server, where units run
            # side by side under READ COMMITTED): two pops never take one item.
            if not self._owned(uow):
                return None
            newest = uow.messages.list(key, last=1)
            if not newest:
                return None
            uow.messages.archive_active(key, reason=POP_REASON, uid=newest[0]["uid"])
            uow.messages.recount(key)
            return newest[0]

        with tail.lock:
            self._require_replayed(store, tail)
            popped = store.write(work)
        return None if popped is None else message_to_item(popped)

    def _clear_session(self) -> None:
        store, tail = self._ready()
        key = self.key

        def work(uow: UnitOfWork) -> None:
            if self._owned(uow) and uow.messages.archive_active(key, reason=CLEAR_REASON):
                uow.messages.recount(key)

        with tail.lock:
            self._require_replayed(store, tail)
            store.write(work)
