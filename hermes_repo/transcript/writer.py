"""Flush with fallback: every message handed to a flush ends up committed or fsynced.

:class:`TranscriptWriter` persists an agent's growing message list. Each call to
:meth:`TranscriptWriter.flush` writes the messages that are not durable yet in one
transaction (a group commit; one transaction per message only when the group fails in a
way one message can cause, see :mod:`.group`); the store's retry policy replays a locked
or read-only write within the budget. When a write fails in a way retry cannot fix,
the messages not yet committed go at once to ``<home>/sessions/<sid>.pending.jsonl``
(fsynced, 0600), which :meth:`StateStore.replay_pending` replays exactly once. Without a store (its
initialisation failed) every message goes there.

Durability is tracked by **uid**, never by list position: the writer remembers which
uids are committed for the session (loaded from the database at the first flush), so
repairing, compacting or reordering the caller's list cannot make it skip or repeat a
message. Each message gets ``uid`` and ``timestamp`` once, on the caller's dict and in
the row, so a replay can tell a real duplicate from a new message.

A message that can never be stored (see :mod:`hermes_repo.codec`: a dict as
``finish_reason``, a ``token_count`` beyond 64 bits, NaN, bytes, a millisecond
timestamp...) never blocks the others: it is left out, reported in
:attr:`FlushResult.rejections`, and kept with its reason in
``sessions/<sid>.rejected.jsonl`` (``{"_rejected": reason, "message": m}``; values JSON
cannot say are written as ``{"__repr__": repr(value)}``). The rest of the list is
written (or spooled) in order.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..arguments import message_list
from ..codec import check_server_text, message_to_row, new_uid
from ..database import Database, WriteCore
from ..driver_errors import classify, describe
from ..engine import default_home
from ..errors import ConfigurationError, ErrorKind, HermesRepoError, IntegrityViolation
from ..ids import validate_session_id
from ..provenance import StoreIdentity, database_target, sqlite_target
from ..repositories import MessageRepository
from ..retry import TRANSCRIPT_POLICY, RetryPolicy
from . import spool
from .content import digest as content_digest
from .content import not_durable, reused_reason, stored_digests
from .group import SessionWrites
from .placement import target_of
from .rejected import keep_rejected, rejected_line
from .replay import replay_file
from .results import FlushResult, Rejection

__all__ = ["FlushResult", "Rejection", "TranscriptWriter"]

log = logging.getLogger("hermes_repo.transcript")


class TranscriptWriter:
    """Persists one session's messages: to the store, else to the spool file.

    ``TranscriptWriter(home, session_id, store)`` or ``store.transcript_writer(sid)``;
    ``store=None`` spools everything (for an agent whose store failed to open).
    ``write_budget_s`` is how long a locked or read-only database is waited for before
    spooling (default: the store's transcript budget, 60 s). One writer per session and
    process is the intended use; calls on one writer are serialized by a lock.

    A message is stored as it was at the flush that first accepted it: once its uid is
    committed (or spooled), later changes to the dict are not written again. Rewrites
    of stored messages go through the repair path (``load_conversation(repair=True)``).
    Another dict under a uid that is already durable is the same message when its
    content (as the codec stores it) is the same, a no-op; with other content it is
    rejected (``FlushResult.rejections``, kept in ``<sid>.rejected.jsonl``), never
    dropped with ``ok``.

    Spool records name the store they belong to (its ``store_id`` and target; without
    a store, ``target``: the URL or SQLite file the failed open tried, by default
    ``$HERMES_REPO_URL`` else ``<home>/state.db``), so only that store replays them.
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None,
        session_id: str,
        store: WriteCore | None = None,
        *,
        write_budget_s: float | None = None,
        source: str = "cli",
        target: str | os.PathLike[str] | None = None,
    ) -> None:
        self.session_id = validate_session_id(session_id)
        if home is None:
            home = store.home if store is not None else default_home()
        self.home = Path(home)
        if store is not None and os.path.realpath(self.home) != os.path.realpath(store.home):
            raise ConfigurationError(
                f"the writer's home {self.home} is not the store's ({store.home}); spool "
                "files must live next to the database that replays them"
            )
        self.store = store
        if write_budget_s is None:
            budget = store.transcript_budget_s if store is not None else TRANSCRIPT_POLICY.budget_s
        else:
            budget = write_budget_s
        self.policy = RetryPolicy(budget_s=budget)
        self.source = source
        self._committed: set[str] | None = None  # loaded at the first flush with a store
        self._spooled: set[str] = set()  # uids this writer put in a spool file
        self._kept: set[bytes] = set()  # rejected-file lines this writer wrote
        # uid -> (the dict this writer made durable, its content as the store keeps it):
        # a later message under the same uid is the same message only if its content
        # is the same (a dict changed in place after its flush is, as documented, not
        # written again).
        self._seen: dict[str, tuple[dict[str, Any], bytes]] = {}
        # Spool files of this session that hold only another store's (or door's)
        # records, by (name -> size, mtime): not replayed again until they change.
        self._foreign: dict[str, tuple[int, int]] = {}
        self._target = target_of(self.home, target) if store is None else None
        self._lock = threading.Lock()

    @property
    def owner(self) -> spool.SpoolOwner:
        """The store this writer's spool records name: its store's id and target, or,
        without a store, the target it was given (``target``: the URL or SQLite file
        the failed open tried; default ``$HERMES_REPO_URL``, else ``<home>/state.db``)."""
        store = self.store
        if store is None:
            return spool.SpoolOwner(None, self._target)
        identity = getattr(store, "store_identity", None)
        if isinstance(identity, StoreIdentity):
            return spool.SpoolOwner(identity.store_id, identity.target)
        database = getattr(store, "database", store)
        if isinstance(database, Database):
            return spool.SpoolOwner(None, database_target(database))
        return spool.SpoolOwner(None, sqlite_target(store.path))

    @property
    def pending_path(self) -> Path:
        """This session's spool file (it exists only while something is pending)."""
        return spool.sessions_dir(self.home) / spool.pending_name(self.session_id)

    # -- the flush -------------------------------------------------------------------

    def flush(self, messages: list[dict[str, Any]]) -> FlushResult:
        """Make every message of ``messages`` durable; see :class:`FlushResult`.

        Messages whose uid is already committed are skipped; the others are written in
        list order, all in one transaction (one each if that fails in a way a single
        message can cause), after any spooled backlog of this session (so ids keep the
        conversation's order). Sets ``uid`` and ``timestamp`` on
        dicts that lack them. Never raises for database or disk trouble, nor for a
        message that can never be stored (not a dict, unknown role, a dict where text
        belongs...): that one is left out, reported in ``rejections`` and kept in
        ``<sid>.rejected.jsonl``, and the others are written. ``messages`` that is not a
        list (a str, a dict) raises :class:`InvalidArgumentError` before anything.
        """
        # Not a list at all is the caller's mistake, not a message to keep aside: a str
        # or a dict iterated would hand on its characters or keys as messages.
        batch = message_list("messages", messages)
        with self._lock:
            return self._flush(batch)

    def _flush(self, messages: list[dict[str, Any]]) -> FlushResult:
        now = time.time()
        rejections: list[Rejection] = []
        refused: list[tuple[Rejection, Any]] = []
        usable: list[dict[str, Any]] = []

        def refuse(index: int, uid: str | None, reason: str, message: Any) -> None:
            rejection = Rejection(index, uid, reason)
            rejections.append(rejection)
            refused.append((rejection, message))

        for i, message in enumerate(messages):
            if not isinstance(message, dict):
                refuse(i, None, f"a message must be a dict, got {type(message).__name__}", message)
                continue
            uid = message.get("uid")
            if not uid:
                message["uid"] = new_uid()
            elif not isinstance(uid, str):
                # Durability is tracked by uid: a key that changes type on the way
                # through the database would never match again.
                refuse(i, None, f"uid of type {type(uid).__name__}; uids are strings", message)
                continue
            if message.get("timestamp") is None:
                message["timestamp"] = now
            usable.append(message)

        store = self.store
        failure: Exception | None = None
        committed: set[str] = set()
        if store is not None:
            try:
                committed = self._committed_uids(store)
            except Exception as exc:  # nothing may escape: the messages must reach a disk
                failure = exc
        todo = []
        positions: dict[int, int] = {}

        def at(message: Any) -> int:
            # Where a refused message stood in the caller's list: only a refusal needs
            # it, so the map is built then (a flush re-passing a long list refuses none).
            if not positions:
                positions.update((id(m), i) for i, m in enumerate(messages))
            return positions[id(message)]

        usable, taken = self._same_as_before(store, usable, committed)
        for message, reason in taken:
            refuse(at(message), message["uid"], reason, message)
        todo_in, reused = not_durable(usable, committed)
        for message in reused:
            refuse(
                at(message),
                message["uid"],
                f"uid {message['uid']!r} is already used by a different message earlier in "
                "this flush; give each message its own uid (or leave uid out)",
                message,
            )
        # A server's text cannot hold U+0000: such a message could never be replayed.
        server_text = store is not None and not store.backend.is_file
        digests: dict[str, bytes] = {}
        # The rows checked here are the rows written: the group commit hands them to
        # the write core as they are, instead of converting every message again.
        rows: dict[str, dict[str, Any]] = {}
        for message in todo_in:
            try:
                row = message_to_row(self.session_id, message)
                if server_text:
                    check_server_text(row)
            except IntegrityViolation as exc:
                refuse(at(message), message["uid"], str(exc), message)
                continue
            except RecursionError:  # the codec's net for a value too deep to walk
                reason = "a value nested too deeply to be stored; flatten it"
                refuse(at(message), message["uid"], reason, message)
                continue
            digests[message["uid"]] = content_digest(row)
            rows[message["uid"]] = row
            todo.append(message)
        rejections.sort(key=lambda r: r.index)
        refused.sort(key=lambda pair: pair[0].index)  # the file keeps the list's order
        kept_error = self._keep(refused)

        if store is None:
            result = self._spool(
                todo,
                [],
                RuntimeError("no store (store=None): every message goes to the spool"),
                None,
            )
        else:
            result = self._write(store, todo, rows, committed, failure)
        durable = {*result.written_uids, *result.spooled_uids}
        for message in todo:
            if message["uid"] in durable:
                self._seen[message["uid"]] = (message, digests[message["uid"]])
        if not rejections:
            return result
        log.warning(
            "transcript of session %s: %d message(s) can never be stored, kept in %s (first: %s)",
            self.session_id,
            len(rejections),
            spool.pending_name(self.session_id, spool.REJECTED_SUFFIX),
            rejections[0].reason,
        )
        error = result.error
        if kept_error is not None:
            error = f"{error}; {kept_error}" if error else kept_error
        return dataclasses.replace(
            result, error=error, rejected=len(rejections), rejections=tuple(rejections)
        )

    def _write(
        self,
        store: WriteCore,
        todo: list[dict[str, Any]],
        rows: dict[str, dict[str, Any]],
        committed: set[str],
        failure: Exception | None,
    ) -> FlushResult:
        backlog = [name for name in spool.existing_names(self.home, self.session_id)]
        backlog = [name for name in backlog if self._backlog_stat(name) is not None]
        if failure is None and backlog:
            # A backlog of this session (spooled by us, or left by a crashed process,
            # maybe under the previous version's file name) goes in first, oldest file
            # first, so rows keep the conversation's order. Records of another store
            # or door stay in their file (see replay_file); such a file is not read
            # again by this writer until it changes.
            try:
                for name in backlog:
                    report = replay_file(
                        store, self.session_id, self.policy, raise_errors=True, name=name
                    )
                    after = self._backlog_stat(name)
                    if report.foreign and after is not None:
                        self._foreign[name] = after
                self._spooled.clear()  # everything of ours spooled so far is committed now
                committed = self._committed_uids(store, reload=True)
            except Exception as exc:
                failure = exc

        new = [m for m in todo if m["uid"] not in committed]  # the others came with the backlog
        if failure is None and new:
            writes = SessionWrites(store, self.session_id, self.policy, self.source)
            failure = writes.write(new, committed, rows)  # adds what it commits to committed
        written = [m["uid"] for m in todo if m["uid"] in committed]
        if failure is None:
            return FlushResult(len(written), 0, written_uids=tuple(written))
        rest = [m for m in todo if m["uid"] not in committed]
        return self._spool(rest, written, failure, store)

    def _same_as_before(
        self, store: WriteCore | None, messages: list[dict[str, Any]], committed: set[str]
    ) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], str]]]:
        """The messages still to store (committed ones left out, as
        :meth:`_not_durable` would), and those under a uid already durable (committed or
        spooled) with *other* content, with the reason: storing nothing for them and
        answering ``ok`` would lose them silently. Content compares as the codec stores
        it. The dict this writer made durable is the message itself (fast path: one
        lookup per message on every flush)."""
        keep: list[dict[str, Any]] = []
        taken: list[tuple[dict[str, Any], str]] = []
        ask: dict[str, tuple[dict[str, Any], bytes]] = {}
        seen = self._seen
        spooled = self._spooled
        for message in messages:
            uid = message["uid"]
            before = seen.get(uid)
            if before is not None and before[0] is message:
                if uid not in committed:
                    keep.append(message)  # spooled, not committed yet: tried again
                continue
            if uid not in committed and uid not in spooled:
                keep.append(message)
                continue
            try:
                digest = content_digest(message_to_row(self.session_id, message))
            except (IntegrityViolation, RecursionError) as exc:
                taken.append((message, reused_reason(uid, self.session_id, f" ({exc})")))
                continue
            if before is None and uid in committed:
                ask[uid] = (message, digest)  # stored by another writer: ask the store
            elif before is None or before[1] == digest:
                seen[uid] = (message, digest)
                if uid not in committed:
                    keep.append(message)
            else:
                taken.append((message, reused_reason(uid, self.session_id)))
        if ask and store is not None:
            try:
                stored = stored_digests(store, self.session_id, list(ask), self.policy)
            except Exception:  # cannot tell now: durable as before, asked again next time
                stored = {}
            for uid, digest in stored.items():
                message, mine = ask[uid]
                if digest == mine:
                    seen[uid] = (message, digest)
                else:
                    taken.append((message, reused_reason(uid, self.session_id)))
        return keep, taken

    def _backlog_stat(self, name: str) -> tuple[int, int] | None:
        """(size, mtime) of a spool file of this session to replay; None when it does
        not exist or holds only records this writer found foreign and is unchanged."""
        try:
            st = os.lstat(spool.sessions_dir(self.home) / name)
        except OSError:
            return None
        stat = (st.st_size, st.st_mtime_ns)
        return None if self._foreign.get(name) == stat else stat

    def _keep(self, refused: list[tuple[Rejection, Any]]) -> str | None:
        """Keep refused messages in ``<sid>.rejected.jsonl``; an error text if that failed."""
        if not refused:
            return None
        where = self.owner.fields()
        lines = [rejected_line(r.reason, m, where) for r, m in refused]
        fresh = [line for line in lines if line not in self._kept]
        if not fresh:
            return None  # refused again by a later flush: kept already
        try:
            keep_rejected(self.home, self.session_id, fresh)
        except (OSError, HermesRepoError) as exc:
            name = spool.pending_name(self.session_id, spool.REJECTED_SUFFIX)
            log.error(
                "transcript of session %s: could not keep refused messages: %s",
                self.session_id,
                exc,
            )
            return f"{len(fresh)} refused message(s) could not be kept in {name}: {exc}"
        self._kept.update(fresh)
        return None

    # -- database side ---------------------------------------------------------------

    def _committed_uids(self, store: WriteCore, *, reload: bool = False) -> set[str]:
        if self._committed is None or reload:
            sid = self.session_id
            self._committed = store.read(
                lambda conn: MessageRepository(conn).uids(sid), self.policy
            )
        return self._committed

    # -- spool side ------------------------------------------------------------------

    def _spool(
        self,
        rest: list[dict[str, Any]],
        written: list[str],
        failure: BaseException,
        store: WriteCore | None,
    ) -> FlushResult:
        kind = classify(failure)
        cause = f"{kind.value}: {describe(failure)}" if store is not None else describe(failure)
        # While the database file is damaged, new messages go to the hold file: a
        # retry queue would be replayed into the damaged file and spread the damage.
        hold = store is not None and kind is ErrorKind.CORRUPT
        suffix = spool.HOLD_SUFFIX if hold else spool.PENDING_SUFFIX
        target = spool.sessions_dir(self.home) / spool.pending_name(self.session_id, suffix)
        fresh = [m for m in rest if m["uid"] not in self._spooled]
        try:
            if fresh:
                spool.append_messages(
                    self.home,
                    self.session_id,
                    fresh,
                    suffix=suffix,
                    source=self.source,
                    owner=self.owner,
                )
        except (OSError, ValueError, TypeError, RecursionError, HermesRepoError) as exc:
            error = f"{cause}; and the spool file {target} could not be written: {exc}"
            log.error(
                "transcript of session %s: %d message(s) are only in memory: %s",
                self.session_id,
                len(fresh),
                error,
            )
            lost = {m["uid"] for m in fresh}
            spooled = [m["uid"] for m in rest if m["uid"] not in lost]
            return FlushResult(
                len(written),
                len(spooled),
                error,
                unsaved=len(fresh),
                written_uids=tuple(written),
                spooled_uids=tuple(spooled),
            )
        self._spooled.update(m["uid"] for m in fresh)
        if rest:
            log.warning(
                "transcript of session %s: database write failed (%s); %d message(s) "
                "written, %d spooled to %s",
                self.session_id,
                cause,
                len(written),
                len(rest),
                target,
            )
        return FlushResult(
            len(written),
            len(rest),
            cause,
            written_uids=tuple(written),
            spooled_uids=tuple(m["uid"] for m in rest),
        )

    def __repr__(self) -> str:
        mode = "store" if self.store is not None else "spool only"
        return f"TranscriptWriter(session_id={self.session_id!r}, {mode})"
