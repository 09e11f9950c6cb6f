"""Import sessions and messages from a JSON Lines file: :func:`import_jsonl`.

The format (also documented in the README and shipped in samples/): UTF-8 JSON
Lines, one object per line, blank lines ignored.

* ``{"session": {"id": "s1", "source": "cli", "title": "...", ...}}`` starts a session.
  ``id`` is required; optional keys: ``source``, ``user_id``, ``model``, ``title``,
  ``parent_session_id`` (a session already stored or declared earlier in the file),
  ``started_at``, ``ended_at`` (epoch seconds), ``end_reason``.
* ``{"session_id": "s1", "message": {...}}`` is a message of that session. It must follow
  its session's line (``session_id`` repeats the id as a check). The message is a dict
  as :meth:`StateStore.append_message` takes it (``role``, ``content`` as text or a list
  of parts, ``tool_calls``, ``tool_call_id``, ``timestamp``, ``uid``...).

Each session (its line and the message lines after it) is written in one unit of work,
so a bad line stops the import with the sessions before it kept and the session it
belongs to not imported at all. Re-importing is idempotent: an existing session is
reused as it is, and messages whose ``uid`` is already stored for the session are
skipped. A message without ``uid`` gets one derived from the session id, the message
and its occurrence number in the whole file (a session declared twice in one file keeps
counting), so files without uids re-import as no-ops too.

Text is taken as JSON gives it: ``\\udXXX`` escapes of lone surrogates are stored
exactly (see :mod:`hermes_repo.codec`). A value that can never be stored (a timestamp in
milliseconds, a ``token_count`` beyond 64 bits, NaN, a dict where text belongs...) stops
the import at its line with a :class:`JsonlImportError` naming ``FILE:LINE``, the cause
and the fix.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..codec import MAX_DEPTH, check_timestamp, escape_surrogates, message_to_row, short_repr
from ..errors import HermesRepoError, ImportSourceError, JsonlImportError
from ..ids import validate_session_id

if TYPE_CHECKING:
    from ..core import WriteCore
    from ..uow import UnitOfWork

__all__ = ["ImportProgress", "ImportReport", "JsonlImportError", "import_jsonl"]

_SESSION_KEYS = (
    "id",
    "source",
    "user_id",
    "model",
    "title",
    "parent_session_id",
    "started_at",
    "ended_at",
    "end_reason",
)
_SESSION_TEXT_KEYS = ("source", "user_id", "model", "title", "parent_session_id", "end_reason")
_SESSION_TIME_KEYS = ("started_at", "ended_at")


class _LineError(Exception):
    """A problem with one line of the file (:func:`import_jsonl` adds the file and the fix)."""

    def __init__(self, line: int, cause: str) -> None:
        super().__init__(cause)
        self.line = line
        self.cause = cause


@dataclass
class _Block:
    """One session line and the message lines after it: one unit of work."""

    line: int
    fields: dict[str, Any]
    messages: list[dict[str, Any]] = field(default_factory=list)
    # Occurrences of each message body so far in this session over the whole file, for
    # uids derived from repeated messages: every block of one session shares it.
    _seen: dict[str, int] = field(default_factory=dict)

    @property
    def session_id(self) -> str:
        return str(self.fields["id"])

    def add(self, message: dict[str, Any]) -> None:
        if not message.get("uid"):
            # A stable uid makes re-importing a file without uids a no-op: the same
            # message at the same occurrence derives the same key every time.
            # escape_surrogates: a lone surrogate cannot be hashed as UTF-8, and text
            # without one keeps the digest earlier versions derived.
            body = escape_surrogates(json.dumps(message, sort_keys=True, ensure_ascii=False))
            nth = self._seen.get(body, 0)
            self._seen[body] = nth + 1
            digest = hashlib.sha256(f"{self.session_id}\0{body}\0{nth}".encode()).hexdigest()
            message = {**message, "uid": f"import-{digest[:32]}"}
        self.messages.append(message)


@dataclass
class ImportReport:
    """What an import did."""

    file: str
    sessions_created: int = 0
    sessions_reused: int = 0
    messages_inserted: int = 0
    messages_skipped: int = 0

    @property
    def sessions(self) -> int:
        return self.sessions_created + self.sessions_reused

    def as_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "sessions_created": self.sessions_created,
            "sessions_reused": self.sessions_reused,
            "messages_inserted": self.messages_inserted,
            "messages_skipped": self.messages_skipped,
        }


def _decode(raw: bytes, line: int) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _LineError(line, f"invalid JSON ({exc.msg} at column {exc.colno})") from exc
    except UnicodeDecodeError as exc:
        raise _LineError(line, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except RecursionError as exc:
        # Python's parser gives up near its recursion limit (about 1000 levels); the
        # store refuses anything deeper than MAX_DEPTH anyway.
        raise _LineError(
            line,
            f"nested too deeply to read (a message field may nest at most {MAX_DEPTH} levels)",
        ) from exc
    if not isinstance(obj, dict):
        raise _LineError(line, f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _session_block(obj: dict[str, Any], line: int, seen: dict[str, dict[str, int]]) -> _Block:
    if set(obj) != {"session"} or not isinstance(obj["session"], dict):
        raise _LineError(line, 'a session line is {"session": {"id": ..., ...}} and nothing else')
    fields: dict[str, Any] = obj["session"]
    unknown = sorted(set(fields) - set(_SESSION_KEYS))
    if unknown:
        raise _LineError(
            line,
            f"unknown session key(s) {', '.join(unknown)}; allowed: {', '.join(_SESSION_KEYS)}",
        )
    if "id" not in fields:
        raise _LineError(line, "the session has no id (an id makes re-imports idempotent)")
    try:
        validate_session_id(fields["id"])
    except HermesRepoError as exc:
        raise _LineError(line, str(exc)) from exc
    for key in _SESSION_TEXT_KEYS:
        if fields.get(key) is not None and not isinstance(fields[key], str):
            raise _LineError(line, f"session {key} must be a string or null")
    for key in _SESSION_TIME_KEYS:
        value = fields.get(key)
        if value is not None:
            try:
                check_timestamp(value, f"session {key}")
            except HermesRepoError as exc:
                raise _LineError(line, str(exc)) from exc
    return _Block(line, dict(fields), _seen=seen.setdefault(str(fields["id"]), {}))


def _add_message(block: _Block | None, obj: dict[str, Any], line: int) -> None:
    if set(obj) != {"session_id", "message"}:
        raise _LineError(
            line,
            'expected {"session": {...}} or {"session_id": ..., "message": {...}}, '
            f"got keys {', '.join(sorted(obj)) or 'none'}",
        )
    sid, message = obj["session_id"], obj["message"]
    if block is None:
        raise _LineError(
            line,
            f"unknown session {short_repr(sid)}: declare it first with a "
            '{"session": {"id": ...}} line',
        )
    if sid != block.session_id:
        raise _LineError(
            line,
            f"unknown session {short_repr(sid)}: a message line must follow its own "
            "session's line "
            f"(the current session is {block.session_id!r})",
        )
    if not isinstance(message, dict):
        raise _LineError(line, f"message must be a JSON object, got {type(message).__name__}")
    try:
        message_to_row(block.session_id, message)  # validates role, timestamp, api_content
    except HermesRepoError as exc:
        raise _LineError(line, str(exc)) from exc
    block.add(message)


def _write_block(uow: UnitOfWork, block: _Block) -> tuple[bool, int, int]:
    """Write one session block; returns (created, inserted, skipped)."""
    sid = block.session_id
    fields = block.fields
    created = not uow.sessions.exists(sid)
    if created:
        parent = fields.get("parent_session_id")
        if parent is not None and not uow.sessions.exists(parent):
            raise _LineError(
                block.line,
                f"parent session {parent!r} does not exist; declare it earlier in the file",
            )
        started = fields.get("started_at")
        if started is None and block.messages:
            # The first message's time is a better start than the time of the import.
            started = block.messages[0].get("timestamp")
        uow.sessions.create(
            fields.get("source") or "cli",
            id=sid,
            user_id=fields.get("user_id"),
            model=fields.get("model"),
            title=fields.get("title"),
            parent_session_id=parent,
            started_at=started,
        )
        if fields.get("ended_at") is not None:
            uow.sessions.end(sid, fields.get("end_reason"), at=fields["ended_at"])
        stored: set[str] = set()
    else:
        stored = uow.messages.uids(sid)
    fresh = []
    for message in block.messages:
        uid = str(message["uid"])
        if uid not in stored:
            stored.add(uid)  # a uid repeated inside the file is the same message again
            fresh.append(message)
    uow.messages.append_many(sid, fresh)
    return created, len(fresh), len(block.messages) - len(fresh)


#: Called before each line is read: bytes read so far (this line included), the file's
#: size, and the report so far (sessions committed, messages added).
ImportProgress = Callable[[int, int, ImportReport], None]


def _unreadable(exc: OSError) -> ImportSourceError:
    where = f" {exc.filename}" if exc.filename else ""
    return ImportSourceError(
        f"{exc.strerror or exc}:{where}; check the path, its permissions and free space"
    )


def _lines(fh: BinaryIO) -> Iterator[bytes]:
    """The file's lines; a failing read becomes an :class:`ImportSourceError`."""
    while True:
        try:
            raw = fh.readline()
        except OSError as exc:
            raise _unreadable(exc) from exc
        if not raw:
            return
        yield raw


def import_jsonl(
    store: WriteCore,
    path: str | os.PathLike[str],
    *,
    progress: ImportProgress | None = None,
) -> ImportReport:
    """Import the JSON Lines file ``path`` into ``store``, one session per unit of work.

    Idempotent: sessions already stored are reused and messages whose uid is stored are
    skipped (see the module docstring for the format). Raises :class:`JsonlImportError`
    at the first bad line, and :class:`~hermes_repo.errors.ImportSourceError` when the
    file cannot be read.
    """
    path = Path(path)
    report = ImportReport(file=str(path))

    def commit(block: _Block) -> None:
        try:
            created, inserted, skipped = store.write(lambda uow: _write_block(uow, block))
        except HermesRepoError as exc:
            raise _LineError(block.line, f"session {block.session_id!r}: {exc}") from exc
        if created:
            report.sessions_created += 1
        else:
            report.sessions_reused += 1
        report.messages_inserted += inserted
        report.messages_skipped += skipped

    try:
        fh = path.open("rb")
    except OSError as exc:
        raise _unreadable(exc) from exc
    block: _Block | None = None
    seen: dict[str, dict[str, int]] = {}  # per session id: occurrences of message bodies
    done = 0
    try:
        with fh:
            total = os.fstat(fh.fileno()).st_size
            for line, raw in enumerate(_lines(fh), 1):
                done += len(raw)
                if progress is not None:
                    progress(done, total, report)
                obj = _decode(raw, line)
                if obj is None:
                    continue
                if "session" in obj:
                    if block is not None:
                        commit(block)
                        # Committed: a bad line from here on must not report it as lost.
                        block = None
                    block = _session_block(obj, line, seen)
                else:
                    _add_message(block, obj, line)
            if block is not None:
                commit(block)
    except _LineError as exc:
        lost = f"; session {block.session_id!r} was not imported" if block is not None else ""
        raise JsonlImportError(
            str(path),
            exc.line,
            exc.cause,
            "fix that line and run the same import again "
            f"({report.sessions} session(s) before it were imported{lost}; a re-import "
            "skips what is already stored)",
            report,
        ) from exc
    return report
