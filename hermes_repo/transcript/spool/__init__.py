"""Spool files: where a transcript goes when the database cannot take it.

``<home>/sessions/<sid>.pending.jsonl`` is a retry queue, one JSON object a line::

    {"_fallback_timestamp": 1718000000.5, "session_id": "chat-1", "message": {...}}

Records carry their session id, and replay checks it against the file's: a record of
another session is kept (rejected with the reason), never replayed into this one.
Records without it (older versions) and plain message dicts (``{"role": ...}``, written
by older tools) are read too.

File names: ``<sid>`` stands for the *encoded* session id (:func:`encode_session_id`).
Names of ids made of lower-case letters, digits, ``_``, ``-`` and ``:`` are the id
itself; ``.`` becomes ``+`` and upper-case letters become lower case with a mask of
their positions after ``=`` (``Chat.V2`` -> ``chat+v2=21``). So the sid part never holds
a ``.`` (the first ``.`` starts the suffix: ``chat.pending`` salvaging to
``chat+pending.jsonl`` never meets ``chat.pending.jsonl``, the retry queue of ``chat``)
and is all lower case (``Chat-1`` and ``chat-1`` stay two files on a case-insensitive
filesystem). Files of the previous version, named ``<id><suffix>`` with the id as is,
are still found, listed and replayed; in the one case where such a name is ambiguous
(``x.pending.jsonl``: the queue of ``x`` or the salvage file of ``x.pending``) it is
read as the queue of ``x``, the common case.

A spool file is only ever appended to, then fsynced with its folder, and deleted by
recovery after the records are committed (see :mod:`hermes_repo.transcript.replay`).

Two siblings share the format and the safety rules but are never replayed:

* ``<sid>.rejected.jsonl``: lines recovery could not use (a torn last line from a crash
  mid-append, invalid JSON, an invalid message), byte for byte, for inspection;
* ``<sid>.jsonl``: the salvage file a writer uses while the database file is damaged
  (replaying into a damaged file would spread the damage).

Safety: the session id is validated before it becomes a file name; ``sessions/`` is
created 0700 and opened with ``O_NOFOLLOW | O_DIRECTORY``; files are opened relative to
that folder's descriptor with ``O_NOFOLLOW`` (``O_APPEND`` for writing) and created
0600, so no symlink, in place of the folder or of a file, can redirect a write
(:class:`~hermes_repo.errors.UnsafePathError`). Every reader and writer of one spool
file holds its lock file (``<file>.lock``, an ``flock`` that dies with its
process), so recovery never reads a line a live writer is still appending, and never
deletes a file under one. A symlink, folder or unreadable file at any of these names
is an :class:`~hermes_repo.errors.UnsafePathError` naming it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...codec import dumps
from ...errors import IntegrityViolation, UnsafePathError
from ...ids import validate_session_id

__all__ = [
    "PENDING_SUFFIX",
    "REJECTED_SUFFIX",
    "SALVAGE_SUFFIX",
    "SESSIONS_DIR",
    "PendingFile",
    "RejectedLine",
    "SpoolContents",
    "SpoolRecord",
    "append_lines",
    "append_messages",
    "encode_session_id",
    "existing_names",
    "list_pending",
    "parse_name",
    "pending_name",
    "read_spool",
    "remove_file",
    "session_id_from_name",
    "sessions_dir",
    "spool_lock",
    "wrap",
]

SESSIONS_DIR = "sessions"
PENDING_SUFFIX = ".pending.jsonl"
REJECTED_SUFFIX = ".rejected.jsonl"
SALVAGE_SUFFIX = ".jsonl"
LOCK_SUFFIX = ".lock"
FALLBACK_KEY = "_fallback_timestamp"
SESSION_KEY = "session_id"

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


# -- records -------------------------------------------------------------------------


@dataclass(frozen=True)
class SpoolRecord:
    """One usable line of a spool file."""

    line_no: int  # 1-based
    message: dict[str, Any]
    fallback_timestamp: float | None  # None for a plain (unwrapped) record
    raw: bytes
    session_id: str | None = None  # the session the record says it belongs to (None: older)


@dataclass(frozen=True)
class RejectedLine:
    """A line that cannot be replayed, kept byte for byte with the reason."""

    line_no: int
    raw: bytes
    reason: str


@dataclass(frozen=True)
class SpoolContents:
    """A spool file parsed: usable records and rejected lines, both in file order."""

    records: list[SpoolRecord]
    rejected: list[RejectedLine]
    size: int
    mtime: float

    @property
    def oldest_at(self) -> float | None:
        """When the oldest record was spooled: its fallback time, or for a plain record
        (which has none) the message's own timestamp."""
        times = []
        for r in self.records:
            t = r.fallback_timestamp
            if t is None:
                t = _number(r.message.get("timestamp"))
            if t is not None:
                times.append(t)
        return min(times) if times else None


def wrap(
    message: Mapping[str, Any], at: float | None = None, session_id: str | None = None
) -> dict[str, Any]:
    """The spool record of ``message``:
    ``{"_fallback_timestamp": t, "session_id": sid, "message": m}`` (no ``session_id``
    key when it is None)."""
    record: dict[str, Any] = {FALLBACK_KEY: time.time() if at is None else at}
    if session_id is not None:
        record[SESSION_KEY] = session_id
    record["message"] = dict(message)
    return record


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def parse_line(line_no: int, raw: bytes) -> SpoolRecord | RejectedLine:
    """One line of a spool file (without its newline) as a record, or why not."""
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        return RejectedLine(line_no, raw, f"not valid JSON ({exc})")
    if not isinstance(obj, dict):
        return RejectedLine(line_no, raw, f"a JSON {type(obj).__name__}, not an object")
    if FALLBACK_KEY in obj or "message" in obj:
        message = obj.get("message")
        if not isinstance(message, dict):
            return RejectedLine(line_no, raw, "wrapped record without a message object")
        sid = obj.get(SESSION_KEY)
        if sid is not None and not isinstance(sid, str):
            return RejectedLine(line_no, raw, f"record session id is a {type(sid).__name__}")
        return SpoolRecord(line_no, message, _number(obj.get(FALLBACK_KEY)), raw, sid)
    if "role" in obj:
        return SpoolRecord(line_no, obj, None, raw)
    return RejectedLine(line_no, raw, "neither a wrapped record nor a message (no role)")


def parse_spool(
    data: bytes,
    *,
    size: int | None = None,
    mtime: float = 0.0,
    session_id: str | None = None,
) -> SpoolContents:
    """Parse a whole spool file's bytes.

    Lines are split on ``\\n`` bytes only: ``str.splitlines`` would also split inside
    text holding U+2028 or other Unicode line breaks, which JSON leaves unescaped.
    Blank lines are skipped. A last line without its newline is a torn append unless it
    parses; either way it is never fatal.

    With ``session_id`` (the session the file belongs to), a record that names another
    session becomes a rejected line: replaying it would put one session's message
    into another's transcript.
    """
    records: list[SpoolRecord] = []
    rejected: list[RejectedLine] = []
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        parsed = parse_line(i, raw)
        if (
            session_id is not None
            and isinstance(parsed, SpoolRecord)
            and parsed.session_id is not None
            and parsed.session_id != session_id
        ):
            parsed = RejectedLine(
                i,
                raw,
                f"record of session {parsed.session_id!r} in the spool file of session "
                f"{session_id!r}; not replayed into either",
            )
        if isinstance(parsed, SpoolRecord):
            records.append(parsed)
        else:
            rejected.append(parsed)
    return SpoolContents(records, rejected, len(data) if size is None else size, mtime)


# -- names ---------------------------------------------------------------------------


def sessions_dir(home: str | os.PathLike[str]) -> Path:
    """``<home>/sessions``: where spool, rejected and salvage files live."""
    return Path(home) / SESSIONS_DIR


# Characters a session id cannot hold (see hermes_repo.ids), so no encoded name can
# be read as another id's: "+" stands for ".", "=" starts the upper-case mask.
_DOT = "+"
_MASK = "="
_MASK_HEX = re.compile(r"[1-9a-f][0-9a-f]*")
_SUFFIXES = (PENDING_SUFFIX, REJECTED_SUFFIX, SALVAGE_SUFFIX)  # longest first


def encode_session_id(session_id: str) -> str:
    """The file-name form of a (validated) session id: no ``.``, no upper case, injective.

    ``.`` becomes ``+``; upper-case letters are lowered and their positions kept as a
    hexadecimal bit mask after ``=`` (bit *i* set: character *i* was upper case). Ids
    of lower-case letters, digits, ``_``, ``-`` and ``:`` are their own encoding, so
    the names of today's common ids do not change. At most 128 + 33 characters.
    """
    sid = validate_session_id(session_id)
    mask = 0
    for i, ch in enumerate(sid):
        if "A" <= ch <= "Z":
            mask |= 1 << i
    out = sid.lower().replace(".", _DOT)
    return out + (f"{_MASK}{mask:x}" if mask else "")


def _decode(stem: str) -> str | None:
    base, sep, mask_hex = stem.partition(_MASK)
    if sep and not _MASK_HEX.fullmatch(mask_hex):
        return None
    mask = int(mask_hex, 16) if sep else 0
    chars = list(base.replace(_DOT, "."))
    if mask >> len(chars):
        return None
    for i, ch in enumerate(chars):
        if mask >> i & 1:
            chars[i] = ch.upper()
    try:
        sid = validate_session_id("".join(chars))
    except IntegrityViolation:
        return None
    # Only the one canonical spelling counts (a mask bit on a digit, "+" where the id
    # holds no dot...): one id, one name, both ways.
    return sid if encode_session_id(sid) == stem else None


def pending_name(session_id: str, suffix: str = PENDING_SUFFIX) -> str:
    """The file name for ``session_id`` (validated, then encoded: see
    :func:`encode_session_id`)."""
    return encode_session_id(session_id) + suffix


def _legacy_name(session_id: str, suffix: str) -> str:
    """The name the previous version gave the file: the id as is."""
    return validate_session_id(session_id) + suffix


def parse_name(name: str) -> tuple[str, str] | None:
    """``(session id, suffix)`` of a spool, rejected or salvage file name, else None.

    The current form first (the first ``.`` starts the suffix); then the previous
    version's (the id as is, before the longest known suffix).
    """
    stem, dot, rest = name.partition(".")
    if dot and "." + rest in _SUFFIXES:
        sid = _decode(stem)
        if sid is not None:
            return sid, "." + rest
    for suffix in _SUFFIXES:
        if name.endswith(suffix):
            try:
                sid = validate_session_id(name[: -len(suffix)])
            except IntegrityViolation:
                return None
            # A lower-case id without dots names its file the same way in both forms;
            # here it would be a current name with an unknown suffix: not a spool file.
            return (sid, suffix) if encode_session_id(sid) != sid else None
    return None


def session_id_from_name(name: str, suffix: str = PENDING_SUFFIX) -> str | None:
    """The session id a ``*<suffix>`` file name stands for, or None if it names none."""
    parsed = parse_name(name)
    if parsed is None or parsed[1] != suffix:
        return None
    return parsed[0]


def existing_names(
    home: str | os.PathLike[str], session_id: str, suffix: str = PENDING_SUFFIX
) -> list[str]:
    """The ``suffix`` files of ``session_id`` that exist: the previous version's name
    (older records, so first) and the current one; the current name if neither does.
    """
    current = pending_name(session_id, suffix)
    legacy = _legacy_name(session_id, suffix)
    names = [current]
    if legacy != current and session_id_from_name(legacy, suffix) == session_id:
        with contextlib.suppress(OSError):
            if os.path.lexists(sessions_dir(home) / legacy):
                names.insert(0, legacy)
    return names


# -- safe file access ----------------------------------------------------------------


def _unsafe(path: Path, what: str) -> UnsafePathError:
    return UnsafePathError(
        f"{path} is {what}; hermes_repo refuses to read or write spool files through it. "
        "Move it away (spool files must be regular files in a real sessions/ folder)"
    )


@contextlib.contextmanager
def _open_dir(home: str | os.PathLike[str], *, create: bool) -> Iterator[int | None]:
    """A descriptor of ``<home>/sessions`` (None if missing and not ``create``)."""
    folder = sessions_dir(home)
    if create:
        Path(home).mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
    try:
        fd = os.open(folder, _DIR_FLAGS)
    except FileNotFoundError:
        if create:
            raise
        yield None
        return
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _unsafe(folder, "a symlink or not a folder") from exc
        raise
    try:
        yield fd
    finally:
        os.close(fd)


def _check_regular(fd: int, path: Path) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise _unsafe(path, "not a regular file")
    return st


def _open_in(dir_fd: int, name: str, flags: int, path: Path) -> int:
    try:
        return os.open(name, flags, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unsafe(path, "a symlink") from exc
        if exc.errno in (errno.EISDIR, errno.ENXIO):
            raise _unsafe(path, "not a regular file") from exc
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise _unsafe(path, "not readable and writable by this process") from exc
        raise


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


@contextlib.contextmanager
def spool_lock(home: str | os.PathLike[str], name: str, *, timeout: float = -1) -> Iterator[None]:
    """Hold the lock of spool file ``name`` (waits; ``timeout`` < 0 waits forever).

    The lock is a ``flock`` on ``<name>.lock``, opened 0600 through the folder's
    descriptor with ``O_NOFOLLOW`` and locked on that very descriptor, so a symlink
    planted at the lock's name is refused, never followed (between a check and a
    second open by name, it could be). The file is left in place on release: waiters
    must lock the same inode. Raises :class:`TimeoutError` when ``timeout`` runs out.
    """
    lock_name = name + LOCK_SUFFIX
    path = sessions_dir(home) / lock_name
    with _open_dir(home, create=True) as dir_fd:
        assert dir_fd is not None
        fd = _open_in(dir_fd, lock_name, _LOCK_FLAGS, path)
    try:
        _check_regular(fd, path)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if timeout >= 0 else 0))
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"{path} is held by another process; retry when it is done"
                    ) from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def append_lines(home: str | os.PathLike[str], name: str, lines: Sequence[bytes]) -> Path:
    """Append complete lines to ``sessions/<name>`` durably; the caller holds its lock.

    If the file ends without a newline (a torn append by a crashed process), a newline
    is written first so the new records never fuse with the torn one. The data goes out
    in one buffer, then the file and the folder are fsynced (the folder so the directory
    entry of a new file survives a power loss too).
    """
    path = sessions_dir(home) / name
    data = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines)
    with _open_dir(home, create=True) as dir_fd:
        assert dir_fd is not None
        fd = _open_in(dir_fd, name, _APPEND_FLAGS, path)
        try:
            st = _check_regular(fd, path)
            if st.st_mode & 0o077:
                os.fchmod(fd, 0o600)  # transcripts are private, whoever made the file
            if st.st_size > 0 and os.pread(fd, 1, st.st_size - 1) != b"\n":
                data = b"\n" + data
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(dir_fd)
    return path


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One spool line (without newline): compact JSON, non-ASCII kept as UTF-8."""
    return dumps(record).encode("utf-8")


def append_messages(
    home: str | os.PathLike[str],
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    suffix: str = PENDING_SUFFIX,
    at: float | None = None,
) -> Path:
    """Wrap ``messages`` and append them to the session's spool file, under its lock."""
    name = pending_name(session_id, suffix)
    when = time.time() if at is None else at
    # Encode before taking the lock or touching the file: a message that cannot be
    # encoded must fail the call without leaving half a batch on disk.
    lines = [encode_record(wrap(m, when, session_id)) for m in messages]
    with spool_lock(home, name):
        return append_lines(home, name, lines)


def read_spool(
    home: str | os.PathLike[str], name: str, *, session_id: str | None = None
) -> SpoolContents | None:
    """Read and parse ``sessions/<name>`` (None if it does not exist); hold its lock.

    With ``session_id``, records naming another session come back as rejected lines
    (see :func:`parse_spool`).
    """
    path = sessions_dir(home) / name
    with _open_dir(home, create=False) as dir_fd:
        if dir_fd is None:
            return None
        try:
            fd = _open_in(dir_fd, name, _READ_FLAGS, path)
        except FileNotFoundError:
            return None
        try:
            st = _check_regular(fd, path)
            chunks = []
            while chunk := os.read(fd, 1 << 20):
                chunks.append(chunk)
        finally:
            os.close(fd)
    return parse_spool(b"".join(chunks), size=st.st_size, mtime=st.st_mtime, session_id=session_id)


def remove_file(home: str | os.PathLike[str], name: str) -> bool:
    """Delete ``sessions/<name>`` and fsync the folder; False if it was already gone."""
    with _open_dir(home, create=False) as dir_fd:
        if dir_fd is None:
            return False
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            return False
        os.fsync(dir_fd)
    return True


# -- listing -------------------------------------------------------------------------


@dataclass(frozen=True)
class PendingFile:
    """One spool file as an operator sees it."""

    name: str
    path: Path
    session_id: str | None  # None: the name is not a valid session id (never replayed)
    size: int = 0
    records: int = 0
    bad_lines: int = 0
    oldest_at: float | None = None  # oldest record's spool time (file mtime if unknown)
    error: str | None = None  # why the file could not be read

    def age_s(self, now: float | None = None) -> float | None:
        """Seconds since the oldest record was spooled."""
        if self.oldest_at is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.oldest_at)


def list_pending(
    home: str | os.PathLike[str], *, suffix: str = PENDING_SUFFIX
) -> list[PendingFile]:
    """Every ``*<suffix>`` file in ``<home>/sessions``, parsed (sorted by name).

    Reads without the lock: a line a writer is appending at this instant may show up
    as a bad line, which is fine for a report (recovery itself holds the lock).
    """
    folder = sessions_dir(home)
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(suffix))
    except FileNotFoundError:
        return []
    if suffix == SALVAGE_SUFFIX:
        # `.pending.jsonl` and `.rejected.jsonl` also end with `.jsonl`.
        names = [n for n in names if not n.endswith((PENDING_SUFFIX, REJECTED_SUFFIX))]
    out = []
    for name in names:
        path = folder / name
        sid = session_id_from_name(name, suffix)
        try:
            contents = read_spool(home, name, session_id=sid)
        except (OSError, UnsafePathError) as exc:
            out.append(PendingFile(name, path, sid, error=str(exc)))
            continue
        if contents is None:
            continue  # recovered (deleted) since the listing
        oldest = contents.oldest_at
        out.append(
            PendingFile(
                name,
                path,
                sid,
                size=contents.size,
                records=len(contents.records),
                bad_lines=len(contents.rejected),
                oldest_at=oldest if oldest is not None else contents.mtime,
            )
        )
    return out
