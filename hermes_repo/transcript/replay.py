"""Replaying spool files into the store, exactly once.

For each ``sessions/<sid>.pending.jsonl``, under the file's lock:

1. Parse it. Usable records are wrapped (``{"_fallback_timestamp", "message"}``) or
   plain message dicts. Lines that cannot be used (a torn last line from a crash
   mid-append, bad JSON, an invalid message) are *kept*, never fatal (step 4).
2. Give every record an effective uid: its own ``uid``, or for a record without one a
   uid derived from the session id and the record's dedup key (role, content,
   tool_name, tool_calls, tool_call_id, timestamp), so a crash after the commit and
   before the delete cannot make the next replay insert it again. Identical records
   count once, as do repeated uids. The identity depends only on the file: a record
   with no timestamp at all (neither its own nor ``_fallback_timestamp``) is told apart
   by its position among equal records, never by the clock of the replay.
3. In ONE write transaction (``BEGIN IMMEDIATE`` through ``store.write``, retried on
   transient errors): create the session if missing, read the session's stored uids
   *inside* the transaction (so two replaying processes serialize on the write lock
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
  whose ``copied_from`` lists it, when the operator adopts it: ``pending replay
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
file (unreadable, unsafe) is reported and the other files are still replayed.
Spool files whose name is not a valid session id are never opened for replay.

This module runs the replay; what of a file is new (steps 1 to 3) is decided in
:mod:`.replay_plan`, which store a record belongs to in :mod:`.placement`, and the
kept lines are written by :mod:`.rejected`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..codec import dumps
from ..database import WriteCore
from ..driver_errors import classify, describe
from ..errors import ErrorKind, HermesRepoError
from ..ids import validate_session_id
from ..provenance import StoreIdentity
from ..retry import RetryPolicy
from . import spool
from .placement import (
    ADOPT_LEGACY,
    belongs_here,
    check_adopt,
    identity_of,
    replay_command,
    why_not_here,
)
from .rejected import keep_rejected
from .replay_plan import Outcome, dedup_key, insert_new, longest_overlap, plan, storable_row

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


@dataclass(frozen=True)
class ReplayReport:
    """What a replay of spool files did.

    ``files``: spool files looked at; ``inserted``: messages committed; ``duplicates``:
    records already stored (or repeated in the spool); ``kept``: records or lines left
    on disk, either unusable lines moved to ``<sid>.rejected.jsonl`` or every record of
    a file whose transaction failed (listed in ``errors``; the file stays for the next
    replay).
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
            return ReplayReport()  # another process replayed it while we waited
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
        candidates, kept, repeats = plan(session_id, mine, contents.rejected)
        unit = insert_new(session_id, candidates)
        try:
            outcome = store.write(unit, policy) if candidates else Outcome(0, {}, {})
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
                "pending transcript of session %s not replayed (%s: %s); the file is kept "
                "for the next replay",
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
    adopted = check_adopt(here, adopt)
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
            log.warning("pending transcript %s not replayed: %s", name, exc)
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
