"""What of a spool file is new to the store: the plan and the unit of a replay.

A spool file's records are checked and given their effective uid here (:func:`plan`:
their own, or one derived from the session id and the dedup key), and
:func:`insert_new` makes the unit that, inside the replay's one write transaction,
inserts what the store does not hold yet and says what it left out (records already
stored, a uid reused with other content, a door's record meeting another source's
session). The rules are told in :mod:`hermes_repo.transcript.replay`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from ..codec import dumps, message_to_row
from ..errors import IntegrityViolation
from ..models import messages_table
from ..uow import UnitOfWork
from . import spool

__all__ = [
    "Candidate",
    "Key",
    "Outcome",
    "dedup_key",
    "insert_new",
    "longest_overlap",
    "plan",
    "storable_row",
]

_m = messages_table
_KEY_COLUMNS = (
    _m.c.role,
    _m.c.content,
    _m.c.content_parts,
    _m.c.tool_name,
    _m.c.tool_calls,
    _m.c.tool_call_id,
    _m.c.timestamp,
)
Key = tuple[Any, ...]


def dedup_key(row: dict[str, Any]) -> Key:
    """The seed's dedup key of a message row (from :func:`~hermes_repo.codec.message_to_row`).

    Content compares as stored: text, or the JSON of multimodal parts.
    """
    return (
        row["role"],
        row["content"],
        row["content_parts"],
        row["tool_name"],
        row["tool_calls"],
        row["tool_call_id"],
        row["timestamp"],
    )


def longest_overlap(stored: Sequence[Key], pending: Sequence[Key]) -> int:
    """The largest k such that the last k of ``stored`` equal the first k of ``pending``.

    Linear time (the KMP failure function of ``pending`` run over ``stored``), so a
    100k-record spool against a 100k-message session costs no more than reading them.
    """
    if not stored or not pending:
        return 0
    fail = [0] * len(pending)
    k = 0
    for i in range(1, len(pending)):
        while k and pending[i] != pending[k]:
            k = fail[k - 1]
        if pending[i] == pending[k]:
            k += 1
        fail[i] = k
    k = 0
    for item in stored:
        while k and (k == len(pending) or item != pending[k]):
            k = fail[k - 1]
        if k < len(pending) and item == pending[k]:
            k += 1
    return k


@dataclass
class Candidate:
    """A spooled record that may be replayed: its effective uid and its row's key."""

    uid: str
    derived: bool  # the uid was derived here (the record had none)
    message: dict[str, Any]
    key: Key
    record: spool.SpoolRecord


def _derived_uid(session_id: str, key: Key, occurrence: int) -> str:
    digest = hashlib.sha256(dumps([session_id, list(key), occurrence]).encode("utf-8")).hexdigest()
    return f"spool-{digest[:32]}"


_SCALARS = (str, int, float)


def storable_row(session_id: str, message: dict[str, Any]) -> dict[str, Any]:
    """``message_to_row`` plus the checks a spooled record needs before it may join a
    transaction: every column value a scalar SQLite can bind, a finite timestamp.

    One record the driver cannot bind would fail the whole file's transaction on every
    replay, so such a record is refused here (and kept) instead.
    """
    try:
        row = message_to_row(session_id, message)
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:
        # message_to_row names the field for every bad value it knows; this is the net.
        raise IntegrityViolation(f"not a storable message: {exc}") from exc
    for column, value in row.items():
        if value is not None and not isinstance(value, _SCALARS):
            raise IntegrityViolation(
                f"message field {column!r} must be text or a number, got {type(value).__name__}"
            )
    if not math.isfinite(row["timestamp"]):
        raise IntegrityViolation(f"message timestamp must be finite, got {row['timestamp']}")
    return row


def plan(
    session_id: str, records: Sequence[spool.SpoolRecord], rejected: Sequence[spool.RejectedLine]
) -> tuple[list[Candidate], list[spool.RejectedLine], int]:
    """Validate records and collapse repeats; returns candidates, kept lines, repeats."""
    candidates: list[Candidate] = []
    kept = list(rejected)
    seen: set[str] = set()
    occurrences: dict[Key, int] = {}
    repeats = 0
    for record in records:
        message = dict(record.message)
        if message.get("timestamp") is None and record.fallback_timestamp is not None:
            message["timestamp"] = record.fallback_timestamp
        try:
            row = storable_row(session_id, message)
        except IntegrityViolation as exc:
            kept.append(spool.RejectedLine(record.line_no, record.raw, str(exc)))
            continue
        key = dedup_key(row)
        uid = message.get("uid")
        derived = not uid
        if derived:
            if message.get("timestamp") is None:
                # It gets a timestamp at insert time, which must not be part of its
                # identity (a second replay of the same file would see another
                # time): the key without it and the position among equal records are.
                ident = (*key[:-1], None)
                n = occurrences.get(ident, 0)
                occurrences[ident] = n + 1
                uid = _derived_uid(session_id, ident, n)
            else:
                message["timestamp"] = row["timestamp"]
                uid = _derived_uid(session_id, key, 0)
        uid = str(uid)
        if uid in seen:
            repeats += 1
            continue
        seen.add(uid)
        message["uid"] = uid
        candidates.append(Candidate(uid, derived, message, key, record))
    kept.sort(key=lambda line: line.line_no)
    return candidates, kept, repeats


@dataclass(frozen=True)
class Outcome:
    """What the replay unit decided inside its transaction."""

    already: int  # candidates stored already (same uid, same content; or the overlap)
    conflicts: dict[str, str]  # uid -> why: stored with different content
    other_door: dict[str, str]  # uid -> why: the session here is of another source


#: The source a plain writer gives its records (``TranscriptWriter``'s default): such
#: a record goes into a session of any source, as the writer's direct writes do.
_PLAIN_SOURCE = "cli"


def _content(key: Key) -> Key:
    """The part of a dedup key that is the message's content (not its time)."""
    return key[:-1]


def _stored_content(uow: UnitOfWork, session_id: str, uids: list[str]) -> dict[str, Key]:
    out: dict[str, Key] = {}
    for at in range(0, len(uids), 500):
        chunk = uids[at : at + 500]
        rows = uow.connection.execute(
            select(_m.c.uid, *_KEY_COLUMNS[:-1]).where(
                _m.c.session_id == session_id, _m.c.uid.in_(chunk)
            )
        ).all()
        out.update({row[0]: tuple(row[1:]) for row in rows})
    return out


def insert_new(session_id: str, candidates: list[Candidate]) -> Callable[[UnitOfWork], Outcome]:
    """The replayable unit: inserts what is new, and says what it left out."""

    def work(uow: UnitOfWork) -> Outcome:
        state = uow.sessions.source_and_extra(session_id, lock=True)
        # A door's record goes only into a session of its own source; a session the
        # replay creates gets the source its writer recorded (a door finds it again).
        door_sources = [
            c.record.source
            for c in candidates
            if c.record.source and c.record.source != _PLAIN_SOURCE
        ]
        source = state[0] if state is not None else next(iter(door_sources), _PLAIN_SOURCE)
        other_door = {
            c.uid: (
                f"written for a session of source {c.record.source!r}; session "
                f"{session_id!r} of this store is of source {source!r}"
            )
            for c in candidates
            if c.record.source and c.record.source not in (_PLAIN_SOURCE, source)
        }
        usable = [c for c in candidates if c.uid not in other_door]
        if not usable:
            return Outcome(0, {}, other_door)
        if state is None:
            started = min(
                (c.message["timestamp"] for c in usable if c.message.get("timestamp")),
                default=None,
            )
            uow.sessions.ensure(session_id, source=source, started_at=started)
        stored = uow.messages.uids(session_id)
        # A record whose uid is stored is a duplicate only if the stored row says the
        # same (compared as the codec stores it): else it is another message under a
        # reused uid, kept aside, never silently dropped.
        again = [c for c in usable if c.uid in stored]
        conflicts: dict[str, str] = {}
        if again:
            have = _stored_content(uow, session_id, [c.uid for c in again])
            for c in again:
                if c.uid in have and have[c.uid] != _content(c.key):
                    conflicts[c.uid] = (
                        f"uid {c.uid!r} is stored in session {session_id!r} with different "
                        "content; a uid names one message: give this one its own uid"
                    )
        usable = [c for c in usable if c.uid not in conflicts]
        skip: set[str] = set()
        if any(c.derived for c in usable):
            skip = _overlap_skip(uow, session_id, usable)
        new = [c.message for c in usable if c.uid not in stored and c.uid not in skip]
        uow.messages.append_many(session_id, new)
        return Outcome(len(usable) - len(new), conflicts, other_door)

    return work


def _overlap_skip(uow: UnitOfWork, session_id: str, candidates: list[Candidate]) -> set[str]:
    """Uids of the spool's leading records that repeat the stored tail (the seed's rule).

    Records compare by uid when they carry one, else by the dedup key. A stored row
    stands for its uid when the spool holds that uid, else for its key, so the tokens
    on both sides compare with one equality and the linear overlap search is exact.
    The whole spool sequence takes part (records already stored by uid included): a
    tail written partly with uids and partly without still lines up.
    """
    real = {c.uid for c in candidates if not c.derived}
    tail = uow.connection.execute(
        select(_m.c.uid, *_KEY_COLUMNS)
        .where(_m.c.session_id == session_id)
        .order_by(_m.c.id.desc())
        .limit(len(candidates))
    ).all()
    stored_tokens: list[Key] = [
        ("uid", row[0]) if row[0] in real else ("key", tuple(row[1:])) for row in reversed(tail)
    ]
    tokens: list[Key] = [("key", c.key) if c.derived else ("uid", c.uid) for c in candidates]
    k = longest_overlap(stored_tokens, tokens)
    return {c.uid for c in candidates[:k]}
