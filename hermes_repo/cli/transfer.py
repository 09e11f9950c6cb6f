"""``hermes-repo import`` and ``hermes-repo sessions export``: transcripts in and out.

The import format (also documented in the README and shipped in samples/): UTF-8 JSON
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
the import at its line with ``error: FILE:LINE: <cause>; <fix>``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import stat
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from ..codec import check_timestamp, dumps, escape_surrogates, message_to_row, scrub
from ..engine import DB_NAME
from ..errors import ConfigurationError, HermesRepoError, StorageFullError, UnsafePathError
from ..hermes_import import HermesImportReport, is_sqlite_file
from ..ids import validate_session_id
from ..ops.snapshots import SNAPSHOT_DIR
from ..repositories import SessionRepository
from ..transcript.spool import SESSIONS_DIR
from ..uow import UnitOfWork
from ._output import CliError, echo_json, finite, format_time, stderr_console
from .sessions import content_text, read_session, session_dict

if TYPE_CHECKING:
    from . import CliState

__all__ = ["ImportReport", "export_command", "import_command"]

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
    """A problem with one line of the import file (the CLI adds file and line)."""

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
            f'unknown session {sid!r}: declare it first with a {{"session": {{"id": ...}}}} line',
        )
    if sid != block.session_id:
        raise _LineError(
            line,
            f"unknown session {sid!r}: a message line must follow its own session's line "
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


def _progress() -> Progress:
    console = stderr_console()
    return Progress(
        TextColumn("[bold]importing"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[sessions]} sessions, {task.fields[messages]} messages"),
        TimeElapsedColumn(),
        console=console,
        # Only for a person at a terminal: in a pipe or a log the bar would be noise
        # around the one error line a script looks for.
        disable=not console.is_terminal,
        transient=True,
    )


def run_import(state: CliState, path: Path) -> ImportReport:
    """Import ``path`` session by session; raises :class:`CliError` on the first bad line."""
    report = ImportReport(file=str(path))
    store = state.store

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

    block: _Block | None = None
    seen: dict[str, dict[str, int]] = {}  # per session id: occurrences of message bodies
    try:
        with path.open("rb") as fh, _progress() as progress:
            task = progress.add_task("import", total=path.stat().st_size, sessions=0, messages=0)
            for line, raw in enumerate(fh, 1):
                progress.update(
                    task,
                    advance=len(raw),
                    sessions=report.sessions,
                    messages=report.messages_inserted,
                )
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
        kept = report.sessions
        lost = f"; session {block.session_id!r} was not imported" if block is not None else ""
        raise CliError(
            f"{path}:{exc.line}: {exc.cause}; fix that line and run the same import again "
            f"({kept} session(s) before it were imported{lost}; a re-import skips what is "
            "already stored)"
        ) from exc
    return report


def _hermes_progress() -> Progress:
    console = stderr_console()
    return Progress(
        TextColumn("[bold]importing Hermes state.db"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.completed}/{task.total} messages"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,  # see _progress
        transient=True,
    )


def run_hermes_import(state: CliState, path: Path, *, dry_run: bool) -> HermesImportReport:
    """Import a Hermes Agent state.db with a progress bar on a terminal's stderr."""
    store = state.store
    with _hermes_progress() as progress:
        task = progress.add_task("import", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        return store.import_hermes_db(path, dry_run=dry_run, progress=advance)


def _hermes_summary(report: HermesImportReport) -> str:
    s, m = report.sessions, report.messages
    verb = "would import" if report.dry_run else "imported"
    lines = [
        f"{verb} {report.source} (Hermes schema {report.schema_version}): "
        f"sessions {s.imported} new, {s.already_present} already present; "
        f"messages {m.imported} new, {m.already_present} already present"
        f"{f' ({m.updated} with a new active state)' if m.updated else ''} "
        f"({s.kept_in_extra + m.kept_in_extra} value(s) kept in extra)"
    ]
    for name, counts in report.tables.items():
        if name not in ("sessions", "messages"):
            lines.append(f"  {name}: {counts.read} row(s) kept in extra")
    lines.extend(f"warning: {w}" for w in report.warnings)
    return "\n".join(lines)


@click.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "hermes-db"]),
    default=None,
    help="Force the format (default: an SQLite file is a Hermes state.db, else JSON Lines).",
)
@click.option("--dry-run", is_flag=True, help="Hermes state.db: read and check all, write nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.pass_obj
def import_command(
    state: CliState, file: Path, fmt: str | None, dry_run: bool, as_json: bool
) -> None:
    """Import sessions and messages from a Hermes Agent state.db or a JSON Lines FILE.

    A file that starts with SQLite's header is read as a Hermes Agent state.db (any
    schema version): opened read-only and immutable (never written, no -wal or -shm
    left beside it), every value kept (what has no column goes to the row's extra),
    one session per unit of work. Re-running adds only what is new, so a later copy of
    the same Hermes home, or an interrupted import, is finished by the same command.

    \b
    JSON Lines format (one JSON object a line; blank lines are ignored):
      {"session": {"id": "s1", "source": "cli", "title": "..."}}
      {"session_id": "s1", "message": {"role": "user", "content": "hi", "uid": "m1"}}
    A message line follows its session's line. Session keys: id (required), source,
    user_id, model, title, parent_session_id, started_at, ended_at, end_reason.

    Each session is imported in its own unit of work. On a bad line (invalid JSON, a bad
    role, an unknown session, a value that can never be stored such as a timestamp in
    milliseconds...) the import stops with `error: FILE:LINE: <cause>`:
    the sessions before that line stay imported and the session the line belongs to is
    not imported at all. Re-running the same file adds nothing twice: existing sessions
    are reused and messages whose uid is already stored are skipped.

    \b
    Example:
      hermes-repo import ~/.hermes/state.db --dry-run
      hermes-repo import samples/sample_sessions.jsonl
    """
    if fmt is None:
        fmt = "hermes-db" if is_sqlite_file(file) else "jsonl"
    if fmt == "hermes-db":
        hermes = run_hermes_import(state, file, dry_run=dry_run)
        if as_json:
            echo_json(hermes.as_dict())
        else:
            click.echo(_hermes_summary(hermes))
        return
    if dry_run:
        raise CliError(
            f"--dry-run is for a Hermes state.db and {file} is read as JSON Lines; "
            "leave out --dry-run (a JSON Lines re-import adds nothing twice)"
        )
    report = run_import(state, file)
    if as_json:
        echo_json(report.as_dict())
        return
    click.echo(
        f"imported {file}: {report.sessions} session(s) "
        f"({report.sessions_created} new, {report.sessions_reused} existing), "
        f"{report.messages_inserted} message(s) added, "
        f"{report.messages_skipped} already stored"
    )


# -- export ---------------------------------------------------------------------------


def _fence(text: str, lang: str = "") -> str:
    """A fenced code block that survives backticks inside ``text``."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def _markdown_content(content: Any) -> str:
    if isinstance(content, list):
        pieces = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "image_url":
                image = part.get("image_url")
                url = str(image.get("url") if isinstance(image, dict) else image)
                if url.startswith("data:"):
                    # An inline image would bury the transcript under base64.
                    pieces.append(f"*[inline image, {len(url)} characters of data]*")
                else:
                    pieces.append(f"![image]({url})")
            else:
                pieces.append(content_text([part]))
        return "\n\n".join(pieces)
    return content_text(content)


def render_markdown(info: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    """A readable transcript: a title, the session's details, one heading per message."""
    out = [f"# {info['title'] or info['id']}", ""]
    details = [f"- Session: `{info['id']}`", f"- Source: {info['source']}"]
    if info["model"]:
        details.append(f"- Model: {info['model']}")
    details.append(f"- Started: {format_time(info['started_at'])}")
    if info["ended_at"] is not None:
        reason = f" ({info['end_reason']})" if info["end_reason"] else ""
        details.append(f"- Ended: {format_time(info['ended_at'])}{reason}")
    out += [*details, ""]
    for message in messages:
        role = str(message["role"])
        heading = f"## {role.capitalize()}"
        if role == "tool":
            name = message.get("tool_name") or message.get("name")
            if name:
                heading += f" · {name}"
        heading += f" · {format_time(message.get('timestamp'))}"
        if message.get("display_only"):
            heading += " · display only"
        out += [heading, ""]
        if message.get("reasoning"):
            out += ["> " + line for line in str(message["reasoning"]).splitlines()] + [""]
        text = _markdown_content(message.get("content"))
        if role == "tool" and text:
            out += [_fence(text), ""]
        elif text:
            out += [text, ""]
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            args = fn.get("arguments", "")
            try:
                args = json.dumps(json.loads(args), ensure_ascii=False, indent=2)
            except (TypeError, ValueError):
                args = str(args)
            out += [f"**Tool call** `{fn.get('name', '?')}`", "", _fence(args, "json"), ""]
    return "\n".join(out).rstrip() + "\n"


SQLITE_HEADER = b"SQLite format 3\x00"
# errnos that mean the storage refused the bytes, not the path.
_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


# Files SQLite keeps beside a database, and the spool files a store keeps in sessions/.
_JOURNAL_SUFFIXES = ("-wal", "-shm", "-journal")
_SPOOL_SUFFIXES = (".pending.jsonl", ".rejected.jsonl")
# A -wal starts with one of two magic numbers (big-endian); a -shm with the WAL
# version, 3007000, in the machine's byte order.
_WAL_HEADS = tuple(struct.pack(">I", magic) for magic in (0x377F0682, 0x377F0683))
_SHM_HEADS = (struct.pack("<I", 3007000), struct.pack(">I", 3007000))


def _store_file_problem(path: Path) -> str | None:
    """Why ``path`` (absolute) is a file of some store, judged by its name and folder."""
    folder = path.parent
    if os.path.lexists(folder / DB_NAME):
        return f"its folder holds a store ({folder / DB_NAME}), whose files only the store writes"
    if folder.name == SESSIONS_DIR and os.path.lexists(folder.parent / DB_NAME):
        return f"it is in the spool folder of the store {folder.parent / DB_NAME}"
    for suffix in _JOURNAL_SUFFIXES:
        base = path.name.removesuffix(suffix)
        if base != path.name and os.path.lexists(folder / base):
            return f"it is the {suffix} file SQLite keeps beside the database {folder / base}"
    for suffix in _SPOOL_SUFFIXES:
        if path.name.endswith(suffix):
            return f"its name ({suffix}) is that of a store's spool file"
    return None


def _refuse_store_targets(output: Path, home: Path) -> None:
    """Refuse an export target that is a database or a file of any store.

    ``-o ~/.hermes/state.db`` used to replace the live database with JSON Lines and
    exit 0; ``-o OTHER/state.db-wal`` replaced another store's log (its committed
    messages lost, and the doctor then saw a healthy, emptier store), and ``-o
    OTHER/sessions/<sid>.pending.jsonl`` a spooled message. A target is refused by its
    name and folder (the files of a store, of this one or any other, and the journal
    files of any database) and, when it exists, by its first bytes (an SQLite
    database, a ``-wal``, a ``-shm``). Paths are checked as given and after resolving
    symlinks, so no spelling slips past.
    """
    target = Path(os.path.realpath(output))
    real_home = Path(os.path.realpath(home))
    fix = "choose another file for -o"
    if target.parent == real_home and target.name.startswith(DB_NAME):
        raise UnsafePathError(
            f"{output} is one of the store's own files ({target.name}); the export "
            f"never writes over the store; {fix}"
        )
    for folder in (SESSIONS_DIR, SNAPSHOT_DIR):
        if target.is_relative_to(os.path.realpath(real_home / folder)):
            raise UnsafePathError(
                f"{output} is inside the store's {folder}/ folder, which only the store "
                f"writes; {fix}"
            )
    for candidate in dict.fromkeys((Path(os.path.abspath(output)), target)):
        problem = _store_file_problem(candidate)
        if problem is not None:
            raise UnsafePathError(
                f"{output} may be a file of a store ({problem}); the export refuses to "
                f"write there; {fix}"
            )
    try:
        mode = os.stat(output).st_mode
        if not stat.S_ISREG(mode):
            # A FIFO or a device (`-o /dev/stdout`): reading its header could block, and
            # the rename that completes an export would replace the device's name.
            raise UnsafePathError(
                f"{output} is not a regular file; the export writes a new file and renames "
                f"it into place; leave out -o to write to stdout, or {fix}"
            )
        with open(output, "rb") as existing:
            header = existing.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigurationError(
            f"cannot check the existing {output}: {exc.strerror}; {fix}"
        ) from exc
    if header == SQLITE_HEADER:
        raise UnsafePathError(
            f"{output} is an SQLite database; the export refuses to write JSON over it; {fix}"
        )
    if header[:4] in _WAL_HEADS:
        raise UnsafePathError(
            f"{output} is an SQLite write-ahead log (-wal); it may hold a database's "
            f"committed rows, and the export refuses to write over it; {fix}"
        )
    if header[:4] in _SHM_HEADS:
        raise UnsafePathError(
            f"{output} is an SQLite shared-memory index (-shm); the export refuses to "
            f"write over it; {fix}"
        )


def _write_failed(output: Path, exc: OSError) -> HermesRepoError:
    cause = exc.strerror or str(exc)
    if exc.errno in _FULL_ERRNOS:
        return StorageFullError(
            f"cannot write the export {output}: {cause} (left as it was); free space on "
            "its disk or choose another file for -o, then export again"
        )
    return ConfigurationError(
        f"cannot write {output}: {cause}; check that its folder exists and is writable"
    )


@contextmanager
def _output_stream(output: Path | None) -> Iterator[IO[str]]:
    """stdout, or ``output`` written atomically with mode 0600 (transcripts are private).

    The text goes to a new temporary file beside ``output`` (0600, ``O_EXCL``, never
    through a symlink), is fsynced, and only then renamed over ``output``: a failure
    or an interruption part-way leaves ``output`` as it was and no temporary file.
    """
    if output is None:
        yield sys.stdout
        return
    tmp = output.with_name(f".{output.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(tmp, flags, 0o600)
    except OSError as exc:
        # Name the file the user asked for, not the temporary one beside it.
        raise _write_failed(output, exc) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, output)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise _write_failed(output, exc) from exc
        raise


@click.command("export")
@click.argument("session_id", metavar="SID")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "markdown"]),
    default="jsonl",
    show_default=True,
    help="jsonl: one message dict a line; markdown: a readable transcript.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    help=(
        "Write to this file (mode 0600, replaced only once complete) instead of stdout; "
        "never an existing SQLite database or one of the store's files."
    ),
)
@click.pass_obj
def export_command(state: CliState, session_id: str, fmt: str, output: Path | None) -> None:
    """Export one session's transcript as JSONL or Markdown.

    The export is the replay: active messages in order (archived audit rows are left
    out; see them with `sessions show --include-inactive`). JSONL has one message a
    line, exactly as `StateStore.load_conversation` returns it (uid and timestamp
    included). Markdown has a heading per message with its role and time, tool output
    and tool-call arguments in code blocks, images as links.

    \b
    Example:
      hermes-repo sessions export SID --format markdown -o transcript.md
    """
    if output is not None:
        _refuse_store_targets(output, state.db_path.parent)
    store = state.store
    with read_session(store) as session:
        info = session_dict(SessionRepository(session).require(session_id))
    messages = store.load_conversation(session_id).messages
    with _output_stream(output) as fh:
        if fmt == "jsonl":
            # dumps writes a lone surrogate as its \\udXXX escape: the line is the message.
            for message in messages:
                try:
                    line = dumps(message, strict=True)
                except ValueError:  # a stored NaN or infinity: written as its repr string
                    line = dumps(finite(message), strict=True)
                fh.write(line + "\n")
        else:
            # For people: a lone surrogate shows as U+FFFD instead of failing the write.
            fh.write(scrub(render_markdown(info, messages)))
    if output is not None:
        click.echo(f"exported {len(messages)} message(s) of {session_id} to {output}", err=True)
