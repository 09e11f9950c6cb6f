"""Replaying spool files into the store, exactly once.

For each ``sessions/<sid>.pending.jsonl``, under the file's lock:

1. Parse it. Usable records are wrapped (``{"_fallback_timestamp", "message"}``) or
   plain message dicts. Lines that cannot be used (a torn last line from a crash
   mid-append, bad JSON, an invalid message) are *kept*, never fatal (step 4).
2. Give every record an effective uid: its own ``uid``, or for a record without one a
   uid derived from the session id and the record's dedup key (role, content,
   tool_name, tool_calls, tool_call_id, timestamp), so a crash after the commit and
   before the delete cannot make the next recovery insert it again. Identical records
   count once, as do repeated uids. The identity depends only on the file: a record
   with no timestamp at all (neither its own nor ``_fallback_timestamp``) is told apart
   by its position among equal records, never by the clock of the recovery.
3. In ONE write transaction (``BEGIN IMMEDIATE`` through ``store.write``, retried on
   transient errors): create the session if missing, read the session's stored uids
   *inside* the transaction (so two recovering processes serialize on the write lock
   and the second sees the first's rows), drop records whose uid is stored and, when
   the spool holds records without uid, its longest prefix that repeats the tail of
   the stored messages (the seed's rule: compared on the dedup key, or on the uid for
   records that have one), and insert the rest in file order with their original
   timestamps and uids.
4. After the commit, kept lines are appended to ``sessions/<sid>.rejected.jsonl``
   (0600, fsynced; a line already there is not written twice), each as
   ``{"_rejected": reason, "from": file, "line": n, "raw": text}`` where ``raw`` is the
   line exactly (bytes that are not UTF-8 as ``\\udcXX`` escapes: read it back with
   ``.encode("utf-8", "surrogateescape")``). Then the spool file is deleted and the
   folder fsynced. So the pending file always disappears once its usable records are
   committed, and nothing it held is lost: unusable lines live on, with the reason, in
   the ``.rejected.jsonl`` file for an operator (``hermes-repo pending list`` counts
   them while they are still pending). A record is unusable when it could never be
   stored (see :mod:`hermes_repo.codec`: a ``token_count`` beyond 64 bits, a timestamp
   in milliseconds...); a lone surrogate in text is simply stored.

**Which store.** A record is replayed only into the store it belongs to (see
:mod:`hermes_repo.provenance`):

* a record naming a ``store_id`` only into the store with that id (or into a store
  whose ``copied_from`` lists it, when the operator adopts it: ``pending recover
  --adopt ID``);
* a record naming only a ``target`` (its writer never reached a store: the open
  failed) only into a store at that target (same file, or same server host, port and
  database);
* a record naming neither (written by an older version) only into a SQLite store of
  the home, and not into one created (``store_created_at``) after the spool file was
  last written: that file came from another store, most likely the server the home's
  agent used. A server never replays such records unless the operator adopts them
  (``--adopt legacy``).

And a record of a door (its ``source`` other than the plain writer's ``cli``) is never
replayed into an existing session of another source. Records that may not be replayed
here stay in their file: byte for byte when nothing else of the file is replayed, else
the file keeps exactly their lines (rewritten atomically). They are reported in
``ReplayReport.foreign_notes`` with the command that replays them where they belong,
and ``hermes-repo pending list`` shows them per file.

**A uid reused.** A record whose uid is stored with different content (role, text,
parts, tool fields, compared as the codec stores them) is not a duplicate: it is kept
aside in ``<sid>.rejected.jsonl`` with that reason and counted in
``ReplayReport.conflicts``.

If the transaction fails (locked past the budget, disk full, damaged database), the
spool file is left exactly as it was and the report counts its records as kept; the
other files are then not tried (they would fail the same way). Any other failure of one
file (unreadable, unsafe) is reported and the other files are still recovered.
Spool files whose name is not a valid session id are never opened for replay.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from ..codec import dumps, message_to_row
from ..database import Database, WriteCore
from ..driver_errors import classify, describe
from ..errors import ConfigurationError, ErrorKind, HermesRepoError, IntegrityViolation
from ..ids import validate_session_id
from ..models import messages_table
from ..provenance import (
    StoreIdentity,
    read_identity,
    sqlite_target,
    target_display_command,
    target_key,
)
from ..retry import RetryPolicy
from ..uow import UnitOfWork
from . import spool

__all__ = [
    "ADOPT_LEGACY",
    "ReplayReport",
    "belongs_here",
    "dedup_key",
    "identity_of",
    "keep_rejected",
    "longest_overlap",
    "replay_command",
    "replay_file",
    "replay_pending",
    "storable_row",
    "why_not_here",
]

log = logging.getLogger("hermes_repo.transcript")

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


@dataclass(frozen=True)
class ReplayReport:
    """What a replay of spool files did.

    ``files``: spool files looked at; ``inserted``: messages committed; ``duplicates``:
    records already stored (or repeated in the spool); ``kept``: records or lines left
    on disk, either unusable lines moved to ``<sid>.rejected.jsonl`` or every record of
    a file whose transaction failed (listed in ``errors``; the file stays for the next
    recovery).
    """

    files: int = 0
    inserted: int = 0
    duplicates: int = 0
    kept: int = 0
    errors: tuple[str, ...] = field(default=())
    #: True when the database refused a file's transaction (locked past the budget,
    #: full, damaged): files after it were not tried.
    blocked: bool = False
    #: Records left in their spool file because they belong to another store or to a
    #: session of another source (door); ``foreign_notes`` says which, why, and the
    #: command that replays them where they belong. Not errors: nothing failed.
    foreign: int = 0
    foreign_notes: tuple[str, ...] = field(default=())
    #: Records whose uid is stored with different content: moved to
    #: ``<sid>.rejected.jsonl`` with the reason (counted in ``kept`` too).
    conflicts: int = 0

    def __add__(self, other: ReplayReport) -> ReplayReport:
        return ReplayReport(
            self.files + other.files,
            self.inserted + other.inserted,
            self.duplicates + other.duplicates,
            self.kept + other.kept,
            self.errors + other.errors,
            self.blocked or other.blocked,
            self.foreign + other.foreign,
            self.foreign_notes + other.foreign_notes,
            self.conflicts + other.conflicts,
        )


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
class _Candidate:
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
    recovery, so such a record is refused here (and kept) instead.
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


def _plan(
    session_id: str, records: Sequence[spool.SpoolRecord], rejected: Sequence[spool.RejectedLine]
) -> tuple[list[_Candidate], list[spool.RejectedLine], int]:
    """Validate records and collapse repeats; returns candidates, kept lines, repeats."""
    candidates: list[_Candidate] = []
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
                # identity (a second recovery of the same file would see another
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
        candidates.append(_Candidate(uid, derived, message, key, record))
    kept.sort(key=lambda line: line.line_no)
    return candidates, kept, repeats


@dataclass(frozen=True)
class _Outcome:
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


def _insert_new(session_id: str, candidates: list[_Candidate]) -> Callable[[UnitOfWork], _Outcome]:
    """The replayable unit: inserts what is new, and says what it left out."""

    def work(uow: UnitOfWork) -> _Outcome:
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
            return _Outcome(0, {}, other_door)
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
        return _Outcome(len(usable) - len(new), conflicts, other_door)

    return work


def _overlap_skip(uow: UnitOfWork, session_id: str, candidates: list[_Candidate]) -> set[str]:
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


#: ``adopt`` value for records of an older version that name no store.
ADOPT_LEGACY = "legacy"


def identity_of(store: WriteCore) -> StoreIdentity:
    """The identity of the store a replay writes into, as its ``state_meta`` says now
    (read again: an id made or a ``copied_from`` recorded since the open counts). If it
    cannot be read, the one the store read at its open; with neither, the error is
    raised: which records belong here cannot be told, so none is replayed."""
    database = getattr(store, "database", store)
    cached = getattr(store, "store_identity", None)
    if not isinstance(database, Database):
        if isinstance(cached, StoreIdentity):
            return cached
        return StoreIdentity(None, sqlite_target(store.path), store.backend.is_file)
    try:
        return read_identity(database)
    except HermesRepoError:
        if isinstance(cached, StoreIdentity):
            return cached
        raise


def _same_target(a: str | None, b: str | None) -> bool:
    key = target_key(a)
    return key is not None and key == target_key(b)


def belongs_here(
    owner: spool.SpoolOwner,
    here: StoreIdentity,
    *,
    spooled_at: float,
    adopt: frozenset[str] = frozenset(),
) -> str | None:
    """None when a record of ``owner`` may be replayed into the store ``here``; else why
    not. The rule (see the module docstring): a record naming a store id goes only into
    that store (or one that adopts it); one naming only a target, into a store at that
    target; one naming neither (an older version's), only into a SQLite store, and never
    into one created after its file was last written."""
    if owner.store_id:
        if owner.store_id == here.store_id or owner.store_id in adopt:
            return None
        if here.store_id:
            mine = f"store {here.store_id}"
        elif here.created_at == math.inf:
            mine = "the new store an open here would create"
        else:
            mine = "this store (no id yet)"
        if _same_target(owner.target, here.target):
            return (
                f"belongs to store {owner.store_id}, which was at {owner.target}; the file "
                f"there now is {mine} (moved or replaced): put that store's file back and "
                "recover, or adopt them into a store copied from it"
            )
        at = f" at {owner.target}" if owner.target else ""
        return f"belongs to store {owner.store_id}{at}, not {mine}"
    if owner.target:
        if _same_target(owner.target, here.target):
            return None
        return f"was spooled for the store at {owner.target}, not this one ({here.target})"
    if ADOPT_LEGACY in adopt:
        return None
    if not here.is_file:
        return (
            "was spooled by an older version, which did not record its store; a server "
            "never replays such records unless told to (--adopt legacy)"
        )
    if here.created_at is not None and spooled_at < here.created_at:
        return (
            "was spooled by an older version (no store recorded) before this store was "
            "created, so it belongs to another store (the server this home's agent used?)"
        )
    return None


def why_not_here(owner: spool.SpoolOwner, here: StoreIdentity, *, spooled_at: float) -> str | None:
    """:func:`belongs_here` for a report that did not read the store's id (a server's,
    when the report does not connect): a record naming a store id is then placed by
    its target."""
    if owner.store_id and here.store_id is None and not here.is_file:
        key = target_key(owner.target)
        if key is not None and key == target_key(here.target):
            return None
        return f"belongs to store {owner.store_id} at {owner.target}"
    return belongs_here(owner, here, spooled_at=spooled_at)


def replay_command(owner: spool.SpoolOwner, here: StoreIdentity, path: Path) -> str | None:
    """The command that replays records of ``owner`` (in the spool file ``path``)
    where they belong (None: unknown).

    A record of a store this one was copied from is adopted here; one whose store is
    elsewhere is replayed by that store; an older version's record by the operator who
    knows its store (``--adopt legacy`` on that store)."""
    home = path.parent.parent
    if owner.store_id and owner.store_id in here.copied_from:
        command = target_display_command(
            here.target, f"pending recover --adopt {owner.store_id}", home=home
        )
    elif owner.target and not (owner.store_id and _same_target(owner.target, here.target)):
        command = target_display_command(owner.target, "pending recover", home=home)
    elif owner.known:
        command = None
    elif here.is_file and here.created_at == math.inf:
        # No store file in this home: the records are most likely those of the server
        # the home's agent used; only the operator knows its URL.
        command = (
            f"hermes-repo --home {shlex.quote(str(home))} --url URL pending recover "
            f"--adopt {ADOPT_LEGACY}"
        )
    else:
        command = target_display_command(
            here.target, f"pending recover --adopt {ADOPT_LEGACY}", home=home
        )
    return None if command is None else command.replace("{file}", shlex.quote(str(path)))


def _foreign_note(name: str, count_: int, reason: str, command: str | None) -> str:
    fix = f"; to replay it: `{command}`" if command else ""
    return f"{name}: {count_} record(s) kept: {reason}{fix}"


def replay_file(
    store: WriteCore,
    session_id: str,
    policy: RetryPolicy | None = None,
    *,
    raise_errors: bool = False,
    name: str | None = None,
    here: StoreIdentity | None = None,
    adopt: frozenset[str] = frozenset(),
) -> ReplayReport:
    """Replay one session's spool file (see the module docstring); ``name``: a file
    of the session other than its current name (one the previous version spooled);
    ``here``: this store's identity (read from the store when None); ``adopt``: store
    ids (or :data:`ADOPT_LEGACY`) whose records this replay takes as its own.

    Records of another store or of another door's session stay in the file (byte for
    byte when nothing else in it is replayed) and are named in ``foreign_notes``.
    Database trouble does not raise: the file is kept and named in ``errors``; with
    ``raise_errors`` the library error itself is raised instead (the file is kept all
    the same). Unsafe or unreadable spool files raise ``UnsafePathError`` / ``OSError``.
    """
    home = store.home
    name = name or spool.pending_name(session_id)
    if here is None:
        here = identity_of(store)
    with spool.spool_lock(home, name):
        contents = spool.read_spool(home, name, session_id=session_id)
        if contents is None:
            return ReplayReport()  # another process recovered it while we waited
        mine: list[spool.SpoolRecord] = []
        # (record, why, whether another store replays it: not so for a door's record
        # kept out of this store's session of another source)
        elsewhere: list[tuple[spool.SpoolRecord, str, bool]] = []
        for record in contents.records:
            why = belongs_here(record.owner, here, spooled_at=contents.mtime, adopt=adopt)
            if why is None:
                mine.append(record)
            else:
                elsewhere.append((record, why, True))
        if elsewhere and not mine:
            # Nothing here to replay: the file stays exactly as it is, bad lines and
            # all, for the store it belongs to.
            return _foreign_report(home, name, elsewhere, here, len(contents.rejected))
        candidates, kept, repeats = _plan(session_id, mine, contents.rejected)
        unit = _insert_new(session_id, candidates)
        try:
            outcome = store.write(unit, policy) if candidates else _Outcome(0, {}, {})
        except HermesRepoError as exc:
            if raise_errors:
                raise
            reason = f"{name}: {describe(exc)}"
            # A server refusing the store (unknown database, bad login) refuses every file.
            blocked = classify(exc) in (
                ErrorKind.TRANSIENT,
                ErrorKind.DISK,
                ErrorKind.CORRUPT,
                ErrorKind.CONFIG,
            )
            log.warning(
                "pending transcript of session %s not recovered (%s: %s); the file is kept "
                "for the next recovery",
                session_id,
                classify(exc).value,
                describe(exc),
            )
            return ReplayReport(
                files=1,
                kept=len(contents.records) + len(contents.rejected),
                errors=(reason,),
                blocked=blocked,
            )
        by_uid = {c.uid: c for c in candidates}
        for uid, why in outcome.other_door.items():
            elsewhere.append((by_uid[uid].record, why, False))
        for uid, why in outcome.conflicts.items():
            record = by_uid[uid].record
            kept.append(spool.RejectedLine(record.line_no, record.raw, why))
        kept.sort(key=lambda line: line.line_no)
        if kept:
            _keep_lines(home, session_id, name, kept, here)
        stay = sorted(elsewhere, key=lambda pair: pair[0].line_no)
        spool.keep_only(home, name, [record.raw for record, _, _ in stay])
    inserted = len(candidates) - outcome.already - len(outcome.conflicts) - len(outcome.other_door)
    report = ReplayReport(
        files=1,
        inserted=inserted,
        duplicates=outcome.already + repeats,
        kept=len(kept),
        conflicts=len(outcome.conflicts),
    )
    if stay:
        report += _foreign_report(home, name, stay, here, 0, files=0)
    return report


def _foreign_report(
    home: os.PathLike[str] | str,
    name: str,
    elsewhere: list[tuple[spool.SpoolRecord, str, bool]],
    here: StoreIdentity,
    bad_lines: int,
    *,
    files: int = 1,
) -> ReplayReport:
    groups: dict[tuple[str, str | None], int] = {}
    path = spool.sessions_dir(home) / name
    for record, why, movable in elsewhere:
        key = (why, replay_command(record.owner, here, path) if movable else None)
        groups[key] = groups.get(key, 0) + 1
    notes = tuple(_foreign_note(name, n, why, cmd) for (why, cmd), n in groups.items())
    for note in notes:
        log.warning("pending transcript %s", note)
    return ReplayReport(files=files, foreign=len(elsewhere), foreign_notes=notes, kept=bad_lines)


def _keep_lines(
    home: os.PathLike[str] | str,
    session_id: str,
    name: str,
    kept: list[spool.RejectedLine],
    here: StoreIdentity,
) -> None:
    where = spool.SpoolOwner(here.store_id, here.target).fields()
    keep_rejected(
        home,
        session_id,
        [
            dumps(
                {
                    "_rejected": k.reason,
                    "from": name,
                    "line": k.line_no,
                    "raw": k.raw.decode("utf-8", "surrogateescape"),
                    **where,
                }
            ).encode("utf-8")
            for k in kept
        ],
    )
    log.warning(
        "%d unusable line(s) of %s moved to %s%s (first: line %d, %s)",
        len(kept),
        name,
        session_id,
        spool.REJECTED_SUFFIX,
        kept[0].line_no,
        kept[0].reason,
    )


def keep_rejected(home: os.PathLike[str] | str, session_id: str, lines: list[bytes]) -> None:
    """Append encoded lines to ``sessions/<sid>.rejected.jsonl`` (under its lock, 0600,
    fsynced), each at most once: a line already in the file is not written again."""
    name = spool.pending_name(session_id, spool.REJECTED_SUFFIX)
    with spool.spool_lock(home, name):
        existing = spool.read_spool(home, name)
        # A crash between this append and the delete of the spool file makes the next
        # recovery keep the same lines again: write each one once.
        have: set[bytes] = set()
        if existing is not None:
            have = {r.raw for r in existing.records} | {r.raw for r in existing.rejected}
        fresh = [line for line in dict.fromkeys(lines) if line not in have]
        if fresh:
            spool.append_lines(home, name, fresh)


def replay_pending(
    store: WriteCore,
    *,
    session_id: str | None = None,
    policy: RetryPolicy | None = None,
    adopt: Sequence[str] = (),
) -> ReplayReport:
    """Replay every spool file of the store (or only ``session_id``'s).

    ``adopt``: ids of stores this one was copied from (its ``copied_from``) whose
    records it takes as its own, or :data:`ADOPT_LEGACY` for records of an older version
    that name no store; an id this store was not copied from is refused.
    """
    report = ReplayReport()
    if session_id is not None:
        names = spool.existing_names(store.home, session_id)
        sids: list[str | None] = [validate_session_id(session_id)] * len(names)
    else:
        folder = spool.sessions_dir(store.home)
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(spool.PENDING_SUFFIX))
        except FileNotFoundError:
            return report
        sids = [spool.session_id_from_name(n) for n in names]
        # A session may have a file under the previous version's name too (its records
        # are older): it goes first, so the session's rows keep the conversation's order.
        order = sorted(
            range(len(names)),
            key=lambda i: (
                sids[i] is None,
                sids[i] or names[i],
                sids[i] is not None and names[i] == spool.pending_name(sids[i] or ""),
            ),
        )
        names, sids = [names[i] for i in order], [sids[i] for i in order]
    folder = spool.sessions_dir(store.home)
    if not adopt and not any(os.path.lexists(folder / name) for name in names):
        return report  # nothing to replay: the store's identity need not be read
    here = identity_of(store)
    adopted = _check_adopt(here, adopt)
    for n, (name, sid) in enumerate(zip(names, sids, strict=True)):
        if sid is None:
            report += ReplayReport(
                files=1,
                errors=(f"{name}: not a valid session id; left in place, never replayed",),
            )
            continue
        try:
            one = replay_file(store, sid, policy, name=name, here=here, adopt=adopted)
        except Exception as exc:
            # An unsafe or unreadable file, or anything else about this one file:
            # report it, go on with the others (bad data never stops the loop).
            log.warning("pending transcript %s not recovered: %s", name, exc)
            report += ReplayReport(files=1, errors=(f"{name}: {exc}",))
            continue
        report += one
        if one.blocked and n + 1 < len(names):
            # The database refused the write (locked past the budget, full, damaged):
            # the next file would wait and fail the same way, so leave them all.
            rest = len(names) - n - 1
            report += ReplayReport(
                files=rest,
                errors=(f"{rest} more file(s) not tried after the database failed",),
            )
            break
    return report


def _check_adopt(here: StoreIdentity, adopt: Sequence[str]) -> frozenset[str]:
    for store_id in adopt:
        if store_id != ADOPT_LEGACY and store_id not in here.copied_from:
            listed = ", ".join(here.copied_from) or "no store"
            raise ConfigurationError(
                f"this store ({here.target}) was not copied from store {store_id} (it was "
                f"copied from {listed}); its spool records are replayed by that store: run "
                "`hermes-repo pending list` to see the command for each file"
            )
    return frozenset(adopt)
