"""Copy a whole store into another one: SQLite to PostgreSQL, back, or to a new file.

::

    from hermes_repo import StateStore
    from hermes_repo.transfer.copy import copy_store

    with StateStore.open("~/.hermes/hermes-repo") as source, StateStore.open("/srv/new") as target:
        report = copy_store(source, target)

Every session and message is copied with every column; message ids are kept (they are
the replay order), and so are session parent links. LangGraph's checkpoints, their
channel values and pending writes go with every column, recognised by their natural
keys (see :mod:`.copy_checkpoints`). The canonical ``state_meta`` rows go too; derived
markers (``fts_stale``) stay behind, since they describe the source's own index. The
work runs in batches of ``batch_size`` rows, each read in its own read transaction
and written in its own write transaction (see :mod:`.copy_rows`), so memory stays flat
however large the store, and a run killed at any point leaves the target consistent.

* **Idempotent and resumable**: each batch compares the source's rows with the target's
  and writes only what differs. A second run writes nothing; a killed run finishes on
  the next one, nothing doubled or lost; rows the source changed since (a repair
  archived a message, a session ended) are updated.
* **Another store's data is refused**: before anything is written, every row the target
  holds must be the source's (same message id, session and uid; same session id and
  start; a LangGraph checkpoint row under a key the source has); otherwise
  :class:`CopyConflictError`.
* **Verified**: at the end both stores' tables are compared by counts and checksums
  (:func:`store_checksums`); a difference raises :class:`CopyVerificationError`.
* **Unfinished until verified**: before its first write the copy marks the target
  (``state_meta`` key ``copy_in_progress``: the source, its store id, the start time and
  the command that runs the copy again, see :mod:`hermes_repo.schema.copy_mark`). The
  mark goes only after the verification passed, in the transaction that appends the
  source's ``store_id`` to the target's ``copied_from`` (a JSON list). A killed or failed
  copy leaves it, and ``doctor`` reports the target as ``copy-unfinished`` with that
  command (``health()`` notes it too). The target's own ``store_id`` is never replaced
  by the source's.
* **Counters never claim missing rows**: a session arrives with zero counters, and each
  message batch adds what it brings in its own transaction (see :mod:`.copy_rows`); a
  last pass sets the source's figures. At every batch boundary a session's counters
  count the active rows the target holds.

Both ends are anything with an ``engine``, ``read`` and ``write`` (a
:class:`~hermes_repo.StateStore`); only SQLAlchemy Core on the model tables is used,
with PostgreSQL's id sequence moved past the copied ids.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection, make_url

from ..core import WriteCore
from ..errors import ConfigurationError, CopyVerificationError, IntegrityViolation
from ..models import messages_table, sessions_table, state_meta_table
from ..repositories.meta import MetaRepository
from ..schema.copy_mark import COPIED_FROM_KEY, COPY_MARK_KEY, STORE_ID_KEY, CopyMark
from ..uow import UnitOfWork
from .copy_checkpoints import (
    CHECKPOINT_TABLES,
    checkpoint_checksums,
    checkpoint_row_count,
    copy_checkpoints,
    refuse_foreign_checkpoints,
)
from .copy_rows import (
    DERIVED_META_KEYS,
    CopyConflictError,
    CopyEndpoint,
    CopyError,
    TableTally,
    copy_counters,
    copy_links,
    copy_messages,
    copy_meta,
    copy_sessions,
    refuse_foreign_rows,
)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DERIVED_META_KEYS",
    "MAX_BATCH_SIZE",
    "CopyConflictError",
    "CopyEndpoint",
    "CopyError",
    "CopyProgress",
    "CopyReport",
    "CopyVerificationError",
    "TableTally",
    "copy_store",
    "describe_endpoint",
    "rerun_command",
    "store_checksums",
]

#: Rows per transaction: large enough that a commit's cost is spread thin, small enough
#: that a batch of long messages fits in memory.
DEFAULT_BATCH_SIZE = 1000
MAX_BATCH_SIZE = 100_000

#: ``progress(done, total)``: rows handled so far (messages, then LangGraph checkpoint
#: rows; copied or found present) and the source's count of them when the copy started.
CopyProgress = Callable[[int, int], None]

_RESUME = (
    "stop every process writing to the source, then run the copy again: it resumes and "
    "writes only what is missing or different"
)


@dataclass
class CopyReport:
    """What :func:`copy_store` did. ``source``/``target`` are URLs with any password
    hidden; ``checksums`` are the verified figures (equal on both ends)."""

    source: str
    target: str
    sessions: TableTally = field(default_factory=TableTally)
    messages: TableTally = field(default_factory=TableTally)
    state_meta: TableTally = field(default_factory=TableTally)
    checkpoints: dict[str, TableTally] = field(
        default_factory=lambda: {name: TableTally() for name in CHECKPOINT_TABLES}
    )
    """LangGraph's checkpoint tables (``langgraph_checkpoints``, ``langgraph_blobs``,
    ``langgraph_writes``), by name."""
    parent_links: int = 0
    counters: int = 0
    """Sessions whose counters were set to the source's figures by the last pass
    (the source's counters differed from its own rows)."""
    copied_from: list[str] = field(default_factory=list)
    """The target's ``copied_from`` after the copy: the source store ids."""
    checksums: dict[str, dict[str, int]] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def written(self) -> int:
        """Rows inserted or updated, and parent links set, in the target (0 when it
        was already a copy)."""
        tables = (self.sessions, self.messages, self.state_meta, *self.checkpoints.values())
        return self.parent_links + self.counters + sum(t.inserted + t.updated for t in tables)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready view."""
        return {
            "source": self.source,
            "target": self.target,
            "sessions": self.sessions.as_dict(),
            "messages": self.messages.as_dict(),
            "state_meta": self.state_meta.as_dict(),
            "checkpoints": {name: t.as_dict() for name, t in self.checkpoints.items()},
            "parent_links": self.parent_links,
            "counters": self.counters,
            "copied_from": list(self.copied_from),
            "written": self.written,
            "verified": self.checksums,
            "seconds": round(self.seconds, 3),
        }


def describe_endpoint(end: WriteCore) -> str:
    """The end's database URL with its password hidden (safe to print or log)."""
    url = end.engine.url
    if url.get_backend_name() == "sqlite" and url.database:
        # A file path may hold bytes that are not UTF-8 (lone surrogates from argv),
        # which URL quoting refuses: each is shown as its escape.
        return f"sqlite:///{_shown(url.database)}"
    return url.render_as_string(hide_password=True)


def _shown(path: str) -> str:
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _command_arg(end: WriteCore) -> str:
    """How a ``hermes-repo`` command names ``end``: a folder, or a URL without its
    password (PGPASSWORD or ~/.pgpass give it)."""
    url = end.engine.url
    if url.get_backend_name() == "sqlite" and url.database:
        return shlex.quote(os.path.dirname(os.path.realpath(url.database)))
    return shlex.quote(url.set(password=None).render_as_string(hide_password=False))


def rerun_command(source: WriteCore, target: WriteCore, batch_size: int) -> str:
    """The ``hermes-repo db copy`` command that copies ``source`` into ``target`` again
    (it resumes: only what is missing or different is written). No password appears."""
    src, dst = _command_arg(source), _command_arg(target)
    option = "--home" if source.engine.url.get_backend_name() == "sqlite" else "--url"
    size = "" if batch_size == DEFAULT_BATCH_SIZE else f" --batch-size {batch_size}"
    return f"hermes-repo {option} {src} db copy --to {dst}{size}"


def _identity(end: WriteCore) -> str:
    url = end.engine.url
    if url.get_backend_name() == "sqlite" and url.database:
        # The path itself, not a rendered URL: a folder name from non-UTF-8 argv bytes
        # holds lone surrogates, which URL quoting cannot encode.
        return "sqlite:" + os.path.realpath(url.database)
    # The driver name does not make two databases of one server different.
    return make_url(url.set(drivername=url.get_backend_name())).render_as_string(hide_password=True)


def _int(value: Any) -> int:
    # PostgreSQL returns sum(bigint) as numeric (a Decimal); an empty table gives NULL.
    return 0 if value is None else int(value)


def store_checksums(conn: Connection) -> dict[str, dict[str, int]]:
    """Counts and cheap checksums of the canonical tables and LangGraph's checkpoint
    tables, the same on any dialect.

    Enough to notice a lost or doubled batch, a lost archive flag or parent link; the
    rows themselves were compared one by one as they were copied.
    """
    s, m, meta = sessions_table.c, messages_table.c, state_meta_table.c
    sessions = conn.execute(
        select(
            func.count(),
            func.sum(s.message_count),
            func.sum(s.tool_call_count),
            func.count(s.parent_session_id),
            func.count(s.ended_at),
        )
    ).one()
    messages = conn.execute(
        select(
            func.count(),
            func.max(m.id),
            func.sum(m.id),
            func.sum(m.active),
            func.sum(m.display_only),
            func.sum(func.length(m.uid)),
        )
    ).one()
    metas = conn.execute(
        select(func.count()).where(meta.key.not_in(sorted(DERIVED_META_KEYS)))
    ).scalar_one()
    return {
        "sessions": dict(
            zip(
                ("count", "messages", "tool_calls", "with_parent", "ended"),
                map(_int, sessions),
                strict=True,
            )
        ),
        "messages": dict(
            zip(
                ("count", "max_id", "sum_id", "active", "display_only", "uid_chars"),
                map(_int, messages),
                strict=True,
            )
        ),
        "state_meta": {"count": _int(metas)},
        **checkpoint_checksums(conn),
    }


def _verify(source: WriteCore, target: WriteCore) -> dict[str, dict[str, int]]:
    theirs = source.read(store_checksums)
    ours = target.read(store_checksums)
    for table, figures in theirs.items():
        for name, value in figures.items():
            got = ours[table][name]
            if got != value:
                raise CopyVerificationError(
                    f"after the copy the target's {table} {name} is {got}, the source's "
                    f"{value}; the source was written to during the copy, or rows were "
                    f"lost; {_RESUME}"
                )
    return theirs


def _store_id(conn: Connection) -> str | None:
    return MetaRepository(conn).get(STORE_ID_KEY)


def _mark(mark: CopyMark, uow: UnitOfWork) -> None:
    uow.meta.set(COPY_MARK_KEY, mark.as_json())


def _finish(source_id: str | None, uow: UnitOfWork) -> list[str]:
    """Record the source in ``copied_from`` and clear the mark, in one transaction."""
    raw = uow.meta.get(COPIED_FROM_KEY)
    try:
        found = json.loads(raw) if raw is not None else []
    except ValueError:
        found = []
    # A value this code did not write is kept, as the list's first entry.
    ids = [i for i in found if isinstance(i, str)] if isinstance(found, list) else [str(raw)]
    if source_id is not None and source_id not in ids:
        ids.append(source_id)
    if ids and json.dumps(ids) != raw:
        uow.meta.set(COPIED_FROM_KEY, json.dumps(ids))
    uow.meta.delete(COPY_MARK_KEY)
    return ids


def copy_store(
    source: WriteCore,
    target: WriteCore,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: CopyProgress | None = None,
) -> CopyReport:
    """Copy every session, message, canonical ``state_meta`` row and LangGraph checkpoint
    row of ``source`` into ``target``, then verify; see the module's documentation.

    Raises :class:`CopyConflictError` (before writing anything) when the target holds
    another store's rows, :class:`CopyVerificationError` when the final counts differ,
    :class:`~hermes_repo.errors.ConfigurationError` for a bad ``batch_size`` or a
    target that is the source itself; store errors leave as the stores raise them.
    """
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise ConfigurationError(
            f"batch size {batch_size} is out of range; give 1 to {MAX_BATCH_SIZE} rows "
            f"(default {DEFAULT_BATCH_SIZE})"
        )
    if _identity(source) == _identity(target):
        raise ConfigurationError(
            f"the target {describe_endpoint(target)} is the source store itself; "
            "give another folder or database as the target"
        )
    started = time.monotonic()
    report = CopyReport(describe_endpoint(source), describe_endpoint(target))
    refuse_foreign_rows(source, target, batch_size)
    refuse_foreign_checkpoints(source, target, batch_size)
    source_id = source.read(_store_id)
    mark = CopyMark(
        source=_command_arg(source),
        source_store_id=source_id,
        started_at=time.time(),
        command=rerun_command(source, target, batch_size),
    )
    # Before the first row: from here until _finish the target says it is unfinished.
    target.write(partial(_mark, mark))
    total = source.read(
        lambda conn: (
            int(conn.execute(select(func.count()).select_from(messages_table)).scalar_one())
            + checkpoint_row_count(conn)
        )
    )
    done = 0

    def advance(rows: int) -> None:
        nonlocal done
        done += rows
        if progress is not None:
            progress(done, max(total, done))

    if progress is not None:
        progress(0, total)
    report.sessions = copy_sessions(source, target, batch_size)
    report.parent_links = copy_links(source, target, batch_size)
    try:
        report.messages = copy_messages(source, target, batch_size, advance)
    except IntegrityViolation as exc:
        # The sessions were copied first: a message whose session the target lacks
        # belongs to a session the source gained since.
        raise CopyError(
            f"a batch of messages was refused by the target ({exc}); if the source "
            f"gained sessions during the copy, {_RESUME}"
        ) from exc
    try:
        report.checkpoints = copy_checkpoints(source, target, batch_size, advance)
    except IntegrityViolation as exc:
        raise CopyError(
            f"a batch of LangGraph checkpoint rows was refused by the target ({exc}); if "
            f"the source gained threads during the copy, {_RESUME}"
        ) from exc
    report.state_meta = copy_meta(source, target, batch_size)
    report.counters = copy_counters(source, target, batch_size)
    report.checksums = _verify(source, target)
    report.copied_from = target.write(partial(_finish, source_id))
    report.seconds = time.monotonic() - started
    return report
