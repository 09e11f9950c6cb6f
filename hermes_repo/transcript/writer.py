"""Flush with fallback: every message handed to a flush ends up committed or fsynced.

:class:`TranscriptWriter` persists an agent's growing message list. Each call to
:meth:`TranscriptWriter.flush` writes the messages that are not durable yet in one
transaction (a group commit; one transaction per message only when the group fails in a
way one message can cause, see :mod:`.group`); the store's retry policy replays a locked
or read-only write within the budget. When a write fails in a way retry cannot fix,
the messages not yet committed go at once to ``<home>/sessions/<sid>.pending.jsonl``
(fsynced, 0600), which :meth:`StateStore.recover_pending` replays exactly once. Without a store (its
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
import json
import logging
import math
import os
import reprlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..arguments import message_list
from ..codec import check_server_text, dumps, escape_surrogates, message_to_row, new_uid
from ..database import WriteCore
from ..engine import default_home
from ..errors import (
    ConfigurationError,
    ErrorKind,
    HermesRepoError,
    IntegrityViolation,
    classify,
    describe,
)
from ..ids import validate_session_id
from ..repositories import MessageRepository
from ..retry import TRANSCRIPT_POLICY, RetryPolicy
from . import spool
from .group import SessionWrites
from .replay import keep_rejected, replay_file

__all__ = ["FlushResult", "Rejection", "TranscriptWriter"]

log = logging.getLogger("hermes_repo.transcript")


@dataclass(frozen=True)
class Rejection:
    """A message of a flush that can never be stored: its place in the list, its uid
    (None when it is not a dict or its uid is unusable) and why."""

    index: int
    uid: str | None
    reason: str


@dataclass(frozen=True)
class FlushResult:
    """The outcome of one :meth:`TranscriptWriter.flush`.

    Counts cover the messages of the call's list that were not committed when it
    started: ``written`` are committed now; ``spooled`` are safe in a spool file (the
    pending queue, or the salvage file while the database is damaged); ``unsaved`` are
    only in memory because the spool could not be written either (then ``error`` says
    both causes, and the next flush tries them again). ``error`` is None when every
    storable message reached the database. ``rejected`` messages can never be stored
    (``rejections`` says which and why); they are kept in ``<sid>.rejected.jsonl``
    and did not stop the others.
    """

    written: int
    spooled: int
    error: str | None = None
    unsaved: int = 0
    written_uids: tuple[str, ...] = ()
    spooled_uids: tuple[str, ...] = ()
    rejected: int = 0
    rejections: tuple[Rejection, ...] = ()

    @property
    def rejected_uids(self) -> tuple[str, ...]:
        """The uids of the rejected messages that have one."""
        return tuple(r.uid for r in self.rejections if r.uid is not None)

    @property
    def ok(self) -> bool:
        """True when every message of the call is committed in the database."""
        return self.error is None and not self.rejected


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
    """

    def __init__(
        self,
        home: str | os.PathLike[str] | None,
        session_id: str,
        store: WriteCore | None = None,
        *,
        write_budget_s: float | None = None,
        source: str = "cli",
    ) -> None:
        self.session_id = validate_session_id(session_id)
        if home is None:
            home = store.home if store is not None else default_home()
        self.home = Path(home)
        if store is not None and os.path.realpath(self.home) != os.path.realpath(store.home):
            raise ConfigurationError(
                f"the writer's home {self.home} is not the store's ({store.home}); spool "
                "files must live next to the database that recovers them"
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
        self._lock = threading.Lock()

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
        index = {id(m): i for i, m in enumerate(messages)}
        todo_in, reused = self._not_durable(usable, committed)
        for message in reused:
            refuse(
                index[id(message)],
                message["uid"],
                f"uid {message['uid']!r} is already used by a different message earlier in "
                "this flush; give each message its own uid (or leave uid out)",
                message,
            )
        # A server's text cannot hold U+0000: such a message could never be replayed.
        server_text = store is not None and not store.backend.is_file
        for message in todo_in:
            try:
                row = message_to_row(self.session_id, message)
                if server_text:
                    check_server_text(row)
            except IntegrityViolation as exc:
                refuse(index[id(message)], message["uid"], str(exc), message)
                continue
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
            result = self._write(store, todo, committed, failure)
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
        committed: set[str],
        failure: Exception | None,
    ) -> FlushResult:
        backlog = [
            name
            for name in spool.existing_names(self.home, self.session_id)
            if os.path.lexists(spool.sessions_dir(self.home) / name)
        ]
        if failure is None and backlog:
            # A backlog of this session (spooled by us, or left by a crashed process,
            # maybe under the previous version's file name) goes in first, oldest file
            # first, so rows keep the conversation's order.
            try:
                for name in backlog:
                    replay_file(store, self.session_id, self.policy, raise_errors=True, name=name)
                self._spooled.clear()  # everything spooled so far is committed now
                committed = self._committed_uids(store, reload=True)
            except Exception as exc:
                failure = exc

        new = [m for m in todo if m["uid"] not in committed]  # the others came with the backlog
        if failure is None and new:
            writes = SessionWrites(store, self.session_id, self.policy, self.source)
            failure = writes.write(new, committed)  # adds what it commits to committed
        written = [m["uid"] for m in todo if m["uid"] in committed]
        if failure is None:
            return FlushResult(len(written), 0, written_uids=tuple(written))
        rest = [m for m in todo if m["uid"] not in committed]
        return self._spool(rest, written, failure, store)

    def _not_durable(
        self, messages: list[dict[str, Any]], committed: set[str]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The messages to store, and those reusing an earlier message's uid of this list
        with different content (refused: storing either silently loses the other)."""
        seen: dict[str, dict[str, Any]] = {}
        todo = []
        reused = []
        for message in messages:
            uid = message["uid"]
            if uid in committed:
                continue
            first = seen.get(uid)
            if first is None:
                seen[uid] = message
                todo.append(message)
            elif first is not message and not _same(first, message):
                reused.append(message)
            # else: the same message twice in one list is one message
        return todo, reused

    def _keep(self, refused: list[tuple[Rejection, Any]]) -> str | None:
        """Keep refused messages in ``<sid>.rejected.jsonl``; an error text if that failed."""
        if not refused:
            return None
        lines = [_rejected_line(r.reason, m) for r, m in refused]
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
        # While the database file is damaged, new messages go to the salvage file: a
        # retry queue would be replayed into the damaged file and spread the damage.
        salvage = store is not None and kind is ErrorKind.CORRUPT
        suffix = spool.SALVAGE_SUFFIX if salvage else spool.PENDING_SUFFIX
        target = spool.sessions_dir(self.home) / spool.pending_name(self.session_id, suffix)
        fresh = [m for m in rest if m["uid"] not in self._spooled]
        try:
            if fresh:
                spool.append_messages(
                    self.home, self.session_id, fresh, suffix=suffix, source=self.source
                )
        except (OSError, ValueError, TypeError, HermesRepoError) as exc:
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


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a value whose == raises (e.g. an array) cannot prove sameness
        return False


def _repr_value(value: Any) -> dict[str, str]:
    return {"__repr__": repr(value)}


def _rejected_line(reason: str, message: Any) -> bytes:
    """A refused message with its reason as one line: JSON where JSON can say it
    (lone surrogates escaped, big integers as Python's JSON writes them), NaN, infinities
    and other values JSON cannot say as ``{"__repr__": ...}``; the whole message's repr
    when even that fails."""
    record: dict[str, Any] = {"_rejected": reason}
    try:
        try:
            text = _json_line({**record, "message": message})
        except ValueError:  # NaN or an infinity: not JSON, so written as its repr
            text = _json_line({**record, "message": _finite(message)})
    except (TypeError, ValueError, RecursionError):
        try:
            shown = repr(message)
        except RecursionError:  # nested deeper than repr can follow: its first levels
            shown = _OUTLINE.repr(message)
        text = dumps({**record, "message_repr": shown}, strict=True)
    return text.encode("utf-8")


# The repr of a message too deep for repr(): 50 levels, nothing else cut.
_OUTLINE = reprlib.Repr()
_OUTLINE.maxlevel = 50
_OUTLINE.maxdict = _OUTLINE.maxlist = _OUTLINE.maxtuple = _OUTLINE.maxset = 10**9
_OUTLINE.maxstring = _OUTLINE.maxother = _OUTLINE.maxlong = 10**9


def _json_line(record: dict[str, Any]) -> str:
    text = json.dumps(
        record,
        ensure_ascii=False,
        separators=(",", ":"),
        default=_repr_value,
        allow_nan=False,
    )
    return escape_surrogates(text)


def _finite(value: Any, depth: int = 0) -> Any:
    """``value`` with each NaN or infinite float as ``{"__repr__": ...}`` (error path only)."""
    if depth > 200:
        raise RecursionError("too deeply nested")
    if isinstance(value, float) and not math.isfinite(value):
        return _repr_value(value)
    if isinstance(value, dict):
        return {k: _finite(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v, depth + 1) for v in value]
    return value
