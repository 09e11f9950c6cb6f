"""The statements behind :class:`~hermes_repo.integrations.langgraph.HermesSaver`.

Every function runs on a connection (a read) or in a unit of work (a write) the saver
hands it; none commits, except the pipelined writes of a server (``*_pipelined``), which
send their own ``BEGIN`` and ``COMMIT`` on the store's kept connection in autocommit
mode. Values are the framework serializer's ``(type, bytes)`` pairs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointTuple, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol
from sqlalchemy import bindparam, delete, func, literal, select, tuple_, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.sqlite.pysqlite import SQLiteDialect_pysqlite
from sqlalchemy.engine import Connection
from sqlalchemy.sql import Select
from sqlalchemy.sql.expression import Executable

from hermes_repo import Backend, InvalidArgumentError, UnitOfWork
from hermes_repo.codec import ROW_COLUMNS, check_server_text, decode_text, loads
from hermes_repo.models import (
    langgraph_blobs_table as BL,
)
from hermes_repo.models import (
    langgraph_checkpoints_table as CK,
)
from hermes_repo.models import (
    langgraph_writes_table as WR,
)
from hermes_repo.models import messages_table as MESSAGES
from hermes_repo.models import (
    sessions_table as SE,
)

from ._langgraph_rows import (
    MESSAGES_CHANNEL,
    THREAD_KEY,
    dialect_insert,
    message_rows,
    new_message_rows,
)

__all__ = [
    "BLOB_COLUMNS",
    "CHECKPOINT_COLUMNS",
    "CHECKPOINT_WRITE_COLUMNS",
    "WRITE_COLUMNS",
    "append_messages",
    "collect_blobs",
    "copy_rows",
    "delete_rows",
    "read_tuple",
    "sqlite_text",
    "tuples_of",
]

# SQLite's drivers take named parameters (":name") with a mapping.
_SQLITE = SQLiteDialect_pysqlite(paramstyle="named")


def sqlite_text(clause: Executable, column_keys: Sequence[str] | None = None) -> str:
    """``clause`` compiled once to SQLite SQL text, for the driver's cursor (a write
    the saver runs there, see ``HermesSaver._write_fast``); ``column_keys``: the
    columns an ``INSERT`` names, in the parameters' keys."""
    keys = list(column_keys) if column_keys is not None else None
    return str(clause.compile(dialect=_SQLITE, column_keys=keys))  # type: ignore[attr-defined]


#: What a read of checkpoints selects (``tuples_of`` turns the rows into tuples).
CHECKPOINT_COLUMNS = (
    CK.c.session_id,
    CK.c.checkpoint_ns,
    CK.c.checkpoint_id,
    CK.c.parent_checkpoint_id,
    CK.c.checkpoint_type,
    CK.c.checkpoint,
    CK.c.metadata_type,
    CK.c.metadata,
)
# Rows per IN list of row values: far below either backend's limit on parameters.
_CHUNK = 200
_Key = tuple[str, str, str, str]

# Built once: a get_tuple is LangGraph's hottest read, and building the statement cost
# more than running it. Expanding parameters keep one compiled form per shape.
_BLOBS = select(BL.c.channel, BL.c.version, BL.c.type, BL.c.blob).where(
    BL.c.session_id == bindparam("sid"),
    BL.c.checkpoint_ns == bindparam("ns"),
    tuple_(BL.c.channel, BL.c.version).in_(bindparam("keys", expanding=True)),
)
_WRITES = select(
    WR.c.checkpoint_id,
    WR.c.task_id,
    WR.c.channel,
    WR.c.type,
    WR.c.blob,
    WR.c.task_path,
    WR.c.idx,
).where(
    WR.c.session_id == bindparam("sid"),
    WR.c.checkpoint_ns == bindparam("ns"),
    WR.c.checkpoint_id.in_(bindparam("ids", expanding=True)),
)


def _chunks(items: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _config(thread_id: Any, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def tuples_of(
    conn: Connection,
    serde: SerializerProtocol,
    rows: Sequence[Any],
    thread_of: Callable[[str], Any],
    *,
    metadata: Mapping[int, Any] | None = None,
) -> list[CheckpointTuple]:
    """The checkpoint tuples of ``rows`` (selected with :data:`CHECKPOINT_COLUMNS`): the
    channel values each names and the pending writes of each, read in a few batched
    statements (not one per checkpoint). ``thread_of`` gives a session's thread id;
    ``metadata`` the already decoded metadata by row index."""
    decoded = [serde.loads_typed((row.checkpoint_type, row.checkpoint)) for row in rows]
    wanted: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for row, checkpoint in zip(rows, decoded, strict=True):
        keys = wanted.setdefault((row.session_id, row.checkpoint_ns), set())
        keys.update((channel, str(v)) for channel, v in checkpoint["channel_versions"].items())
    blobs: dict[_Key, tuple[str, bytes | None]] = {}
    for (sid, ns), keys in wanted.items():
        for part in _chunks(sorted(keys)):
            params = {"sid": sid, "ns": ns, "keys": part}
            for channel, version, type_, blob in conn.execute(_BLOBS, params):
                blobs[(sid, ns, channel, version)] = (type_, blob)
    writes: dict[tuple[str, str, str], list[tuple[Any, ...]]] = {}
    owners: dict[tuple[str, str], list[str]] = {}
    for row in rows:
        owners.setdefault((row.session_id, row.checkpoint_ns), []).append(row.checkpoint_id)
    for (sid, ns), ids in owners.items():
        for part in _chunks(ids):
            for write in conn.execute(_WRITES, {"sid": sid, "ns": ns, "ids": part}):
                writes.setdefault((sid, ns, write[0]), []).append(tuple(write[1:]))
    out = []
    for index, (row, checkpoint) in enumerate(zip(rows, decoded, strict=True)):
        sid, ns = row.session_id, row.checkpoint_ns
        values = {}
        for channel, version in checkpoint["channel_versions"].items():
            found = blobs.get((sid, ns, channel, str(version)))
            if found is not None and found[0] != "empty":
                values[channel] = serde.loads_typed(found)  # type: ignore[arg-type]
        pending = sorted(
            writes.get((sid, ns, row.checkpoint_id), ()),
            key=lambda w: writes_sort_key(w[4], w[0], w[5]),
        )
        thread_id = thread_of(sid)
        meta = (
            metadata[index]
            if metadata is not None
            else serde.loads_typed((row.metadata_type, row.metadata))
        )
        parent = row.parent_checkpoint_id
        out.append(
            CheckpointTuple(
                config=_config(thread_id, ns, row.checkpoint_id),
                checkpoint=cast(Checkpoint, {**checkpoint, "channel_values": values}),
                metadata=meta,
                parent_config=_config(thread_id, ns, parent) if parent else None,
                pending_writes=[
                    (task_id, channel, serde.loads_typed((type_, blob)))
                    for task_id, channel, type_, blob, _, _ in pending
                ],
            )
        )
    return out


# The owner and the checkpoint in one statement (the newest by its index's max, not a
# sort of the thread's checkpoints); the values and the pending writes in another.
_HEAD_SQL = (
    "SELECT s.source, s.extra, c.checkpoint_id, c.parent_checkpoint_id, "
    "c.checkpoint_type, c.checkpoint, c.metadata_type, c.metadata FROM sessions s "
    "LEFT JOIN langgraph_checkpoints c ON c.session_id = s.id AND c.checkpoint_ns = ? "
    "AND c.checkpoint_id = {} WHERE s.id = ?"
)
_BY_ID_SQL = _HEAD_SQL.format("?")
_LATEST_SQL = _HEAD_SQL.format(
    "(SELECT max(checkpoint_id) FROM langgraph_checkpoints "
    "WHERE session_id = ? AND checkpoint_ns = ?)"
)
_WRITES_SQL = (
    "SELECT 1, task_id, channel, type, blob, task_path, idx FROM langgraph_writes "
    "WHERE session_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
_BLOBS_AND_WRITES_SQL = (
    "SELECT 0, channel, version, type, blob, NULL, NULL FROM langgraph_blobs "
    "WHERE session_id = ? AND checkpoint_ns = ? AND (channel, version) IN (VALUES {}) "
    "UNION ALL " + _WRITES_SQL
)


# On a server, forms whose plan does not hang on the tables' statistics (a thread just
# filled, never analyzed, had its newest checkpoint found by scanning every id of the
# thread and its values by scanning every value): the newest by a backward scan of the
# key, the values by a lookup of the whole key for each channel and version the
# checkpoint names (a list of keys was joined against every value of the thread).
_LATEST_SERVER_SQL = _HEAD_SQL.format(
    "(SELECT checkpoint_id FROM langgraph_checkpoints "
    "WHERE session_id = ? AND checkpoint_ns = ? ORDER BY checkpoint_id DESC LIMIT 1)"
)
_BLOB_SERVER_SQL = (
    "SELECT 0, channel, version, type, blob, NULL, NULL FROM langgraph_blobs "
    "WHERE session_id = ? AND checkpoint_ns = ? AND channel = ? AND version = ?"
)


def _bytes(value: Any) -> Any:
    # psycopg may hand BYTEA back as a memoryview; the serializer wants bytes.
    return bytes(value) if isinstance(value, memoryview) else value


def one_tuple(
    conn: Connection,
    serde: SerializerProtocol,
    session_id: str,
    ns: str,
    checkpoint_id: str | None,
    thread_id: Any,
    check: Callable[[str, dict[str, Any]], None],
    *,
    server: bool,
) -> CheckpointTuple | None:
    """:meth:`get_tuple`'s read, on the driver's cursor in the caller's read
    transaction, in two statements (two round trips on a server): the session's owner
    with the checkpoint, then its channel values with its pending writes. LangGraph
    reads a thread's newest checkpoint at every run, and building and compiling the
    statements cost more than SQLite running them. ``check`` refuses a session that is
    not the thread's (given its source and ``extra``) before anything of it is decoded."""
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    return one_tuple_on(dbapi, serde, session_id, ns, checkpoint_id, thread_id, check, server)


def one_tuple_on(
    dbapi: Any,
    serde: SerializerProtocol,
    session_id: str,
    ns: str,
    checkpoint_id: str | None,
    thread_id: Any,
    check: Callable[[str, dict[str, Any]], None],
    server: bool,
) -> CheckpointTuple | None:
    """:func:`one_tuple` on a driver connection (on a server, an autocommit one: each
    statement reads its own snapshot, as each does in a ``READ COMMITTED``
    transaction)."""
    cursor = dbapi.cursor()
    try:
        return _tuple_on(cursor, serde, session_id, ns, checkpoint_id, thread_id, check, server)
    finally:
        cursor.close()


def read_tuple(
    cursor: Any,
    serde: SerializerProtocol,
    session_id: str,
    ns: str,
    checkpoint_id: str | None,
    thread_id: Any,
    check: Callable[[str, dict[str, Any]], None],
) -> CheckpointTuple | None:
    """:func:`one_tuple` on a SQLite driver cursor outside SQLAlchemy (the store's
    ``read_on_driver``): the two statements in one read transaction of their own
    (one snapshot: a thread deleted between them is not read half), unless the
    cursor's connection is in one already (a replay after a lock)."""
    dbapi = cursor.connection
    if dbapi.in_transaction:
        return _tuple_on(cursor, serde, session_id, ns, checkpoint_id, thread_id, check, False)
    cursor.execute("BEGIN")
    try:
        found = _tuple_on(cursor, serde, session_id, ns, checkpoint_id, thread_id, check, False)
    except BaseException:
        if dbapi.in_transaction:
            with contextlib.suppress(Exception):  # the read's own error is the one to see
                cursor.execute("ROLLBACK")
        raise
    cursor.execute("COMMIT")
    return found


def _tuple_on(
    cursor: Any,
    serde: SerializerProtocol,
    session_id: str,
    ns: str,
    checkpoint_id: str | None,
    thread_id: Any,
    check: Callable[[str, dict[str, Any]], None],
    server: bool,
) -> CheckpointTuple | None:
    def sql(text: str) -> str:
        return text.replace("?", "%s") if server else text

    if checkpoint_id:
        cursor.execute(sql(_BY_ID_SQL), (ns, checkpoint_id, session_id))
    else:
        latest = _LATEST_SERVER_SQL if server else _LATEST_SQL
        cursor.execute(sql(latest), (ns, session_id, ns, session_id))
    row = cursor.fetchone()
    if row is None:
        return None
    source, extra, cid, parent, checkpoint_type, body, metadata_type, metadata = row
    check(decode_text(source), loads(extra) if extra is not None else {})
    if cid is None:
        return None
    checkpoint = serde.loads_typed((checkpoint_type, _bytes(body)))
    versions = [(c, str(v)) for c, v in checkpoint["channel_versions"].items()]
    if versions and server:
        # The writes first: their columns type the NULLs of the values' rows.
        text = " UNION ALL ".join([_WRITES_SQL] + [_BLOB_SERVER_SQL] * len(versions))
        params = [item for c, v in versions for item in (session_id, ns, c, v)]
        cursor.execute(sql(text), [session_id, ns, cid, *params])
    elif versions:
        text = _BLOBS_AND_WRITES_SQL.format(", ".join(["(?, ?)"] * len(versions)))
        params = [session_id, ns, *(item for pair in versions for item in pair)]
        cursor.execute(sql(text), [*params, session_id, ns, cid])
    else:
        cursor.execute(sql(_WRITES_SQL), (session_id, ns, cid))
    found = cursor.fetchall()
    values: dict[str, Any] = {}
    writes = []
    wanted = set(versions)
    for kind, *rest in found:
        if kind == 1:
            writes.append(rest)
        elif rest[2] != "empty" and (rest[0], rest[1]) in wanted:
            values[rest[0]] = serde.loads_typed((rest[2], _bytes(rest[3])))
    pending = sorted(writes, key=lambda w: writes_sort_key(w[4], w[0], w[5]))
    return CheckpointTuple(
        config=_config(thread_id, ns, cid),
        checkpoint=cast(Checkpoint, {**checkpoint, "channel_values": values}),
        metadata=serde.loads_typed((metadata_type, _bytes(metadata))),
        parent_config=_config(thread_id, ns, parent) if parent else None,
        pending_writes=[
            (task_id, channel, serde.loads_typed((type_, _bytes(blob))))
            for task_id, channel, type_, blob, _, _ in pending
        ],
    )


def latest_of(session_id: str, ns: str) -> Select[Any]:
    """The newest checkpoint of a namespace (ids grow with time, as every saver reads)."""
    return (
        select(*CHECKPOINT_COLUMNS)
        .where(CK.c.session_id == session_id, CK.c.checkpoint_ns == ns)
        .order_by(CK.c.checkpoint_id.desc())
        .limit(1)
    )


def append_messages(
    uow: UnitOfWork,
    session_id: str,
    value: Any,
    prefix: str,
    known: Collection[str] = (),
) -> list[str]:
    """The messages of a ``messages`` channel value the session lacks, as display-only
    rows in their order (a message a later checkpoint repeats is not stored again);
    ``prefix`` is the thread's (:func:`uid_prefix`). ``known``: uids the caller saw
    stored already (rows are never deleted, so they need no query). Returns the uids of
    every message of the value, stored once the unit commits."""
    uids, unknown = message_rows(value, prefix, known)
    if unknown:
        new = new_message_rows(uow.connection, session_id, unknown)
        if new:
            uow.messages.append_many(session_id, new)
    return uids


def append_latest_messages(
    uow: UnitOfWork, serde: SerializerProtocol, session_id: str, prefix: str
) -> None:
    """The root graph's newest ``messages`` value made rows (after a copy)."""
    conn = uow.connection
    row = conn.execute(latest_of(session_id, "")).first()
    if row is None:
        return
    version = serde.loads_typed((row.checkpoint_type, row.checkpoint))["channel_versions"].get(
        MESSAGES_CHANNEL
    )
    if version is None:
        return
    found = conn.execute(
        select(BL.c.type, BL.c.blob).where(
            BL.c.session_id == session_id,
            BL.c.checkpoint_ns == "",
            BL.c.channel == MESSAGES_CHANNEL,
            BL.c.version == str(version),
        )
    ).first()
    if found is not None and found.type != "empty":
        append_messages(uow, session_id, serde.loads_typed((found.type, found.blob)), prefix)


def collect_blobs(conn: Connection, serde: SerializerProtocol, session_id: str, ns: str) -> None:
    """Delete the channel values no checkpoint of the namespace names any more."""
    referenced: set[tuple[str, str]] = set()
    stmt = select(CK.c.checkpoint_type, CK.c.checkpoint).where(
        CK.c.session_id == session_id, CK.c.checkpoint_ns == ns
    )
    for type_, blob in conn.execute(stmt):
        versions = serde.loads_typed((type_, blob))["channel_versions"]
        referenced.update((channel, str(version)) for channel, version in versions.items())
    stored = conn.execute(
        select(BL.c.channel, BL.c.version).where(
            BL.c.session_id == session_id, BL.c.checkpoint_ns == ns
        )
    ).all()
    garbage = [(c, v) for c, v in stored if (c, v) not in referenced]
    for part in _chunks(garbage):
        conn.execute(
            delete(BL).where(
                BL.c.session_id == session_id,
                BL.c.checkpoint_ns == ns,
                tuple_(BL.c.channel, BL.c.version).in_(part),
            )
        )


def delete_rows(conn: Connection, session_id: str) -> None:
    """Every checkpoint, channel value and pending write of the session."""
    for table in (WR, BL, CK):
        conn.execute(delete(table).where(table.c.session_id == session_id))


def delete_runs(conn: Connection, serde: SerializerProtocol, run_ids: Sequence[str]) -> None:
    """The checkpoints of these runs, their writes, and the values only they named.

    Refused, before anything is deleted, when a checkpoint that stays rebuilds a
    ``DeltaChannel`` value from the doomed checkpoints (:func:`broken_delta_chains`)."""
    doomed: dict[tuple[str, str], set[str]] = {}
    runs: dict[tuple[str, str, str], str] = {}
    for part in _chunks(list(run_ids)):
        found = conn.execute(
            select(CK.c.session_id, CK.c.checkpoint_ns, CK.c.checkpoint_id, CK.c.run_id).where(
                CK.c.run_id.in_(part)
            )
        ).all()
        for sid, ns, cid, run_id in found:
            doomed.setdefault((sid, ns), set()).add(cid)
            runs[(sid, ns, cid)] = run_id
    for (sid, ns), cids in sorted(doomed.items()):
        broken = broken_delta_chains(conn, serde, sid, ns, cids)
        if broken:
            _refuse_runs(conn, sid, ns, broken, runs)
    write_keys = tuple_(WR.c.session_id, WR.c.checkpoint_ns, WR.c.checkpoint_id)
    for (sid, ns), cids in sorted(doomed.items()):
        keys = [(sid, ns, cid) for cid in sorted(cids)]
        for keys_part in _chunks(keys):
            conn.execute(delete(WR).where(write_keys.in_(keys_part)))
            conn.execute(
                delete(CK).where(
                    tuple_(CK.c.session_id, CK.c.checkpoint_ns, CK.c.checkpoint_id).in_(keys_part)
                )
            )
        collect_blobs(conn, serde, sid, ns)


class BrokenChain(NamedTuple):
    """A checkpoint that stays and the ``DeltaChannel`` values a deletion would cut
    off the history LangGraph rebuilds them from."""

    checkpoint_id: str
    run_id: str | None
    channels: tuple[str, ...]
    #: The doomed checkpoints its rebuild reads (their writes, or the snapshot).
    needs: frozenset[str]


def broken_delta_chains(
    conn: Connection,
    serde: SerializerProtocol,
    session_id: str,
    ns: str,
    doomed: Collection[str],
) -> list[BrokenChain]:
    """The checkpoints of a namespace that stay when ``doomed`` are deleted but whose
    ``DeltaChannel`` values LangGraph would then rebuild differently (empty or short).

    A ``DeltaChannel`` stores a full value (a snapshot) only every
    ``snapshot_frequency`` updates; a checkpoint in between names a version with no
    stored value, and LangGraph (``get_delta_channel_history``) rebuilds it by walking
    the checkpoint's parents, collecting each one's pending writes to the channel,
    until a parent that stores a value for it (the seed). A parent that is gone ends
    the walk silently, as if the history began there. Deleting a checkpoint on that
    walk therefore changes the value unless it and every parent after it on the walk
    hold no write to the channel and no seed. The channels are the ones LangGraph
    counts in ``counters_since_delta_snapshot`` (only delta channels are)."""
    doomed = set(doomed)
    rows = conn.execute(
        select(
            CK.c.checkpoint_id,
            CK.c.parent_checkpoint_id,
            CK.c.run_id,
            CK.c.checkpoint_type,
            CK.c.checkpoint,
            CK.c.metadata_type,
            CK.c.metadata,
        ).where(CK.c.session_id == session_id, CK.c.checkpoint_ns == ns)
    ).all()
    parents: dict[str, str | None] = {}
    runs: dict[str, str | None] = {}
    counted: dict[str, set[str]] = {}
    delta: set[str] = set()
    for cid, parent, run_id, _, _, metadata_type, metadata in rows:
        parents[cid] = parent
        runs[cid] = run_id
        counters = serde.loads_typed((metadata_type, _bytes(metadata))).get(DELTA_COUNTERS)
        if isinstance(counters, Mapping) and counters:
            counted[cid] = {str(channel) for channel in counters}
            delta.update(counted[cid])
    if not any(cid not in doomed for cid in counted):
        return []  # no checkpoint that stays rebuilds a delta channel
    versions: dict[str, dict[str, str]] = {}
    for cid, _, _, checkpoint_type, checkpoint, _, _ in rows:
        found = serde.loads_typed((checkpoint_type, _bytes(checkpoint)))["channel_versions"]
        versions[cid] = {c: str(v) for c, v in found.items() if c in delta}
    stored = {
        (channel, version)
        for channel, version, type_ in conn.execute(
            select(BL.c.channel, BL.c.version, BL.c.type).where(
                BL.c.session_id == session_id,
                BL.c.checkpoint_ns == ns,
                BL.c.channel.in_(sorted(delta)),
            )
        )
        if type_ != "empty"
    }
    written = {
        (cid, channel)
        for cid, channel in conn.execute(
            select(WR.c.checkpoint_id, WR.c.channel)
            .where(
                WR.c.session_id == session_id,
                WR.c.checkpoint_ns == ns,
                WR.c.channel.in_(sorted(delta)),
            )
            .distinct()
        )
    }

    def seeded(cid: str, channel: str) -> bool:
        version = versions[cid].get(channel)
        return version is not None and (channel, version) in stored

    # Per channel, for the walk that starts at a checkpoint (inclusive): the doomed
    # checkpoints whose loss changes what it collects (empty when none does), and
    # whether anything from there on contributes (a write or the seed).
    cut: dict[tuple[str, str], frozenset[str]] = {}
    feeds: dict[tuple[str, str], bool] = {}

    def walk(start: str, channel: str) -> frozenset[str]:
        path: list[str] = []
        on_path: set[str] = set()
        cid: str | None = start
        while cid is not None and cid in parents and (cid, channel) not in cut:
            if cid in on_path:
                break  # a damaged chain that loops: LangGraph's walk would not end
            path.append(cid)
            on_path.add(cid)
            if seeded(cid, channel):
                break
            cid = parents[cid]
        tail_cut: frozenset[str] = frozenset()
        tail_feeds = False
        if cid is not None and (cid, channel) in cut:
            tail_cut, tail_feeds = cut[(cid, channel)], feeds[(cid, channel)]
        for cid in reversed(path):
            if seeded(cid, channel):
                tail_cut, tail_feeds = frozenset(), True
            else:
                tail_feeds = tail_feeds or (cid, channel) in written
            if cid in doomed and tail_feeds:
                tail_cut = tail_cut | {cid}
            cut[(cid, channel)], feeds[(cid, channel)] = tail_cut, tail_feeds
        return cut[(start, channel)]

    broken = []
    for cid in sorted(counted):
        if cid in doomed:
            continue
        parent = parents[cid]
        lost: set[str] = set()
        channels = []
        for channel in sorted(counted[cid]):
            if channel not in versions[cid] or seeded(cid, channel):
                continue  # never written on this branch, or its value is stored here
            if parent is None or parent not in parents:
                continue
            needs = walk(parent, channel)
            if needs:
                channels.append(channel)
                lost |= needs
        if channels:
            broken.append(BrokenChain(cid, runs[cid], tuple(channels), frozenset(lost)))
    return broken


def _thread_name(conn: Connection, session_id: str) -> str:
    found = conn.execute(select(SE.c.title, SE.c.extra).where(SE.c.id == session_id)).first()
    if found is None:
        return session_id
    extra = loads(found.extra) if found.extra is not None else {}
    return str(extra.get(THREAD_KEY) or found.title or session_id)


def _refuse_runs(
    conn: Connection,
    session_id: str,
    ns: str,
    broken: Sequence[BrokenChain],
    runs: Mapping[tuple[str, str, str], str],
) -> None:
    thread = _thread_name(conn, session_id)
    cut = sorted({runs[(session_id, ns, cid)] for b in broken for cid in b.needs})
    channels = sorted({c for b in broken for c in b.channels})
    later = sorted({str(b.run_id) for b in broken if b.run_id is not None})
    where = f" in namespace {ns!r}" if ns else ""
    also = f" (run{'s' if len(later) > 1 else ''} {', '.join(map(repr, later))})" if later else ""
    raise InvalidArgumentError(
        f"delete_for_runs refused for LangGraph thread {thread!r}: deleting the "
        f"checkpoints of run{'s' if len(cut) > 1 else ''} {', '.join(map(repr, cut))}"
        f"{where} would break the DeltaChannel values ({', '.join(channels)}) of "
        f"{len(broken)} checkpoint{'s' if len(broken) > 1 else ''} that stay{also}: "
        "LangGraph rebuilds those values from the writes of earlier checkpoints, back "
        "to the channel's last snapshot, and would rebuild them empty or short. "
        "Nothing was deleted. Delete the runs that depend on it in the same call "
        f"(delete_for_runs({[*cut, *(r for r in later if r not in cut)]!r})), or the whole "
        "thread (delete_thread, or prune(strategy='delete')); or keep the run"
    )


#: The checkpoint metadata key in which LangGraph counts, per ``DeltaChannel``, the
#: steps that wrote it since its last full snapshot (see :func:`delta_dependents`).
DELTA_COUNTERS = "counters_since_delta_snapshot"


def delta_dependents(metadata: Mapping[str, Any]) -> list[str]:
    """The channels of a checkpoint whose value is not in it but rebuilt from its
    ancestors' writes: LangGraph's ``DeltaChannel`` stores a full snapshot only every
    few updates and counts, in the checkpoint's metadata, the updates since
    (``counters_since_delta_snapshot``: channel to ``(updates, supersteps)``). A channel
    with no update since its snapshot still names the snapshot's version, which the
    checkpoint keeps; one updated since needs the writes of every checkpoint back to
    that snapshot."""
    counters = metadata.get(DELTA_COUNTERS) or {}
    if not isinstance(counters, Mapping):
        return []
    return sorted(
        str(channel)
        for channel, counts in counters.items()
        if not isinstance(counts, Sequence) or not counts or counts[0] != 0
    )


def keep_latest(
    conn: Connection, serde: SerializerProtocol, session_id: str, thread_id: str
) -> None:
    """Only the newest checkpoint of each namespace (and its writes and values) stays;
    it becomes a root (its parent is gone).

    Refused, before anything is deleted, when a kept checkpoint holds channels whose
    values are deltas on its ancestors' writes (:func:`delta_dependents`): dropping the
    ancestors would leave LangGraph rebuilding those channels as empty, silently."""
    heads = conn.execute(
        select(CK.c.checkpoint_ns, func.max(CK.c.checkpoint_id))
        .where(CK.c.session_id == session_id)
        .group_by(CK.c.checkpoint_ns)
    ).all()
    for ns, head in heads:
        found = conn.execute(
            select(CK.c.metadata_type, CK.c.metadata).where(
                CK.c.session_id == session_id,
                CK.c.checkpoint_ns == ns,
                CK.c.checkpoint_id == head,
            )
        ).one()
        dependents = delta_dependents(serde.loads_typed((found[0], _bytes(found[1]))))
        if dependents:
            where = f" in namespace {ns!r}" if ns else ""
            raise InvalidArgumentError(
                f"prune(strategy='keep_latest') refused for LangGraph thread {thread_id!r}: "
                f"its newest checkpoint{where} holds DeltaChannel values "
                f"({', '.join(dependents)}) that LangGraph rebuilds from the writes of "
                "earlier checkpoints, back to the channel's last snapshot; pruning those "
                "would leave the channels empty. Nothing was deleted. Prune after a step "
                "that snapshots every delta channel (snapshot_frequency), use "
                "strategy='delete', or leave the thread unpruned"
            )
    for ns, head in heads:
        kept = (CK.c.session_id == session_id, CK.c.checkpoint_ns == ns)
        conn.execute(
            delete(WR).where(
                WR.c.session_id == session_id,
                WR.c.checkpoint_ns == ns,
                WR.c.checkpoint_id != head,
            )
        )
        conn.execute(delete(CK).where(*kept, CK.c.checkpoint_id != head))
        conn.execute(
            update(CK).where(*kept, CK.c.checkpoint_id == head).values(parent_checkpoint_id=None)
        )
        collect_blobs(conn, serde, session_id, ns)


def copy_rows(conn: Connection, backend: Backend, source: str, target: str) -> None:
    """Every checkpoint, channel value and pending write of ``source`` into ``target``
    (rows it already has are kept)."""
    for table in (CK, BL, WR):
        others = [c for c in table.c if c.name != "session_id"]
        chosen = select(literal(target), *others).where(table.c.session_id == source)
        stmt = (
            dialect_insert(backend, table)
            .from_select(["session_id", *(c.name for c in others)], chosen)
            .on_conflict_do_nothing()
        )
        conn.execute(stmt)


#: New message uids a server put looks up in its one statement (more go in chunks).
SERVER_UIDS = 500
#: The columns a put writes (values, checkpoint) and a put_writes writes, in the order
#: their SQL names them (the server statements here and the saver's SQLite text alike).
BLOB_COLUMNS = ("session_id", "checkpoint_ns", "channel", "version", "type", "blob")
CHECKPOINT_WRITE_COLUMNS = (
    "session_id",
    "checkpoint_ns",
    "checkpoint_id",
    "parent_checkpoint_id",
    "run_id",
    "checkpoint_type",
    "checkpoint",
    "metadata_type",
    "metadata",
)
_CHECKPOINT_REPLACED = ("run_id", "checkpoint_type", "checkpoint", "metadata_type", "metadata")


def put_on_server(
    conn: Connection,
    session_id: str,
    blobs: Sequence[Mapping[str, Any]],
    checkpoint: Mapping[str, Any],
    uids: Sequence[str],
) -> set[str]:
    """A put's rows on a server in one statement (one round trip, not three): the new
    channel values (a value already stored is kept), the checkpoint (replaced when its
    id repeats) and, in the same snapshot, which of ``uids`` the session's message rows
    hold already. PostgreSQL runs every data-modifying ``WITH`` part to completion
    whatever the final ``SELECT`` reads."""
    sql, params = _put_sql(session_id, blobs, checkpoint, uids, None)
    return {row[0] for row in conn.exec_driver_sql(sql, tuple(params))}


# Typed in a VALUES list: a NULL there (an "empty" value) would otherwise be text.
_BYTEA = frozenset({"blob", "checkpoint", "metadata"})


def _placeholders(columns: Sequence[str]) -> list[str]:
    return ["%s::bytea" if name in _BYTEA else "%s" for name in columns]


def _put_sql(
    session_id: str,
    blobs: Sequence[Mapping[str, Any]],
    checkpoint: Mapping[str, Any],
    uids: Sequence[str],
    owner: tuple[str, str | None] | None,
) -> tuple[str, list[Any]]:
    """:func:`put_on_server`'s statement; with ``owner`` (a source and the ``extra``
    text) its rows are inserted only while the session row still holds exactly that."""
    parts: list[str] = []
    params: list[Any] = []
    guard, guarded = "", []
    if owner is not None:
        guard = (
            " WHERE EXISTS (SELECT 1 FROM sessions WHERE id = %s AND source = %s "
            "AND extra IS NOT DISTINCT FROM %s)"
        )
        guarded = [session_id, *owner]
    if blobs:
        one = "(" + ", ".join(_placeholders(BLOB_COLUMNS)) + ")"
        columns = ", ".join(BLOB_COLUMNS)
        parts.append(
            f"b AS (INSERT INTO langgraph_blobs ({columns}) SELECT v.* FROM (VALUES "
            + ", ".join([one] * len(blobs))
            + f") AS v ({columns}){guard} ON CONFLICT DO NOTHING)"
        )
        params += [blob[name] for blob in blobs for name in BLOB_COLUMNS]
        params += guarded
    replaced = ", ".join(f"{name} = excluded.{name}" for name in _CHECKPOINT_REPLACED)
    columns = ", ".join(CHECKPOINT_WRITE_COLUMNS)
    parts.append(
        f"c AS (INSERT INTO langgraph_checkpoints ({columns}) SELECT v.* FROM (VALUES ("
        + ", ".join(_placeholders(CHECKPOINT_WRITE_COLUMNS))
        + f")) AS v ({columns}){guard} "
        "ON CONFLICT (session_id, checkpoint_ns, checkpoint_id) DO UPDATE SET " + replaced + ")"
    )
    params += [checkpoint[name] for name in CHECKPOINT_WRITE_COLUMNS]
    params += guarded
    if uids:
        final = (
            "SELECT uid FROM messages WHERE session_id = %s AND uid IN ("
            + ", ".join(["%s"] * len(uids))
            + ")"
        )
        params += [session_id, *uids]
    else:
        final = "SELECT NULL WHERE false"
    return "WITH " + ", ".join(parts) + " " + final, params


WRITE_COLUMNS = (
    "session_id",
    "checkpoint_ns",
    "checkpoint_id",
    "task_id",
    "task_path",
    "idx",
    "channel",
    "type",
    "blob",
)
_WRITE_KEY = ("session_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx")


def put_writes_on_server(
    conn: Connection,
    session_id: str,
    source: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    replace: bool,
) -> tuple[str, dict[str, Any]] | None:
    """A task's writes on a server in one statement with the owner's lock (one round
    trip, not two): the session row is locked (``FOR UPDATE``) and the rows inserted
    only when it is a session of ``source``; ``replace`` replaces a stored write of the
    same key, else it is kept. Returns the session's source and ``extra`` for the
    caller to check (raising rolls the unit back), or None when there is no such
    session (nothing written). The lock is taken before any row is inserted: the
    insert reads the locked row, and after waiting for it PostgreSQL reads its newest
    version."""
    sql, params = _put_writes_sql(session_id, rows, replace=replace, owner=None, source=source)
    found = conn.exec_driver_sql(sql, tuple(params)).first()
    if found is None:
        return None
    return decode_text(found[0]), (loads(found[1]) if found[1] is not None else {})


#: What a pipelined write finds of its session: its source and ``extra`` as stored.
Owner = tuple[str, "str | None"]
_OWNER_LOCK_SQL = "SELECT source, extra FROM sessions WHERE id = %s FOR UPDATE"
# The server's type of each message column, for the typed placeholders of a VALUES list.
_PG = postgresql.dialect()  # type: ignore[no-untyped-call]
_MESSAGE_TYPES = {name: MESSAGES.c[name].type.compile(dialect=_PG) for name in ROW_COLUMNS}


def _put_writes_sql(
    session_id: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    replace: bool,
    owner: Owner | None,
    source: str | None = None,
) -> tuple[str, list[Any]]:
    """:func:`put_writes_on_server`'s statement; with ``owner`` the rows are inserted
    only while the session row holds that source and exactly that ``extra`` text."""
    if owner is not None:
        source = owner[0]
    guard = "" if owner is None else " AND o.extra IS NOT DISTINCT FROM %s"
    if replace:
        # One statement may not update a row twice: the last write of a key wins, as
        # it did when each row was a statement of its own.
        rows = list({tuple(row[k] for k in _WRITE_KEY): row for row in rows}.values())
    one = "(" + ", ".join(["%s"] * len(WRITE_COLUMNS)) + ")"
    columns = ", ".join(WRITE_COLUMNS)
    if replace:
        conflict = (
            f"ON CONFLICT ({', '.join(_WRITE_KEY)}) DO UPDATE SET "
            "channel = excluded.channel, type = excluded.type, blob = excluded.blob"
        )
    else:
        conflict = "ON CONFLICT DO NOTHING"
    sql = (
        "WITH o AS (SELECT source, extra FROM sessions WHERE id = %s FOR UPDATE), "
        f"w AS (INSERT INTO langgraph_writes ({columns}) SELECT v.* FROM (VALUES "
        + ", ".join([one] * len(rows))
        + f") AS v ({columns}) WHERE EXISTS (SELECT 1 FROM o WHERE o.source = %s{guard}) "
        f"{conflict}) SELECT source, extra FROM o"
    )
    params = [session_id, *(row[k] for row in rows for k in WRITE_COLUMNS), source]
    if owner is not None:
        params.append(owner[1])
    return sql, params


def _messages_sql(
    session_id: str, rows: Sequence[Mapping[str, Any]], owner: Owner
) -> tuple[str, list[Any]]:
    """The new message rows and the session's counters in one statement: each row
    inserted in order unless its uid is stored already (active or archived), the
    ``message_count`` moved by the rows inserted, and only while the session row holds
    ``owner`` exactly. Typed placeholders: a NULL in a VALUES list would be text."""
    one = "(%s::integer, " + ", ".join(f"%s::{_MESSAGE_TYPES[c]}" for c in ROW_COLUMNS) + ")"
    columns = ", ".join(ROW_COLUMNS)
    sql = (
        f"WITH m AS (INSERT INTO messages ({columns}) SELECT {columns} FROM (VALUES "
        + ", ".join([one] * len(rows))
        + f") AS v (n, {columns}) WHERE EXISTS (SELECT 1 FROM sessions WHERE id = %s "
        "AND source = %s AND extra IS NOT DISTINCT FROM %s) ORDER BY n "
        "ON CONFLICT (session_id, uid) DO NOTHING RETURNING 1) "
        "UPDATE sessions SET message_count = message_count + (SELECT count(*) FROM m) "
        "WHERE id = %s AND EXISTS (SELECT 1 FROM m)"
    )
    params: list[Any] = []
    for n, row in enumerate(rows):
        params += [n, *(row.get(c) for c in ROW_COLUMNS)]
    return sql, [*params, session_id, *owner, session_id]


def put_pipelined(
    dbapi: Any,
    lock_ms: int,
    session_id: str,
    blobs: Sequence[Mapping[str, Any]],
    checkpoint: Mapping[str, Any],
    messages: Sequence[Mapping[str, Any]],
    owner: Owner,
) -> Owner | None:
    """A put in one round trip on psycopg's connection in pipeline mode (an autocommit
    connection: the transaction is this function's): ``BEGIN``, the lock budget, the
    owner's ``FOR UPDATE``, :func:`put_on_server`'s values and checkpoint, the new
    message rows (``messages``, made by :func:`~hermes_repo.codec.message_to_row`, none
    with tool calls) with the session's counters, and ``COMMIT``. The writes run after
    the lock is held and only while the session row holds ``owner`` exactly: the owner
    is checked before anything is written. Idempotent: run again after it committed,
    it stores nothing twice. Returns the owner found (None: no such session); when it
    is not ``owner`` nothing was written."""
    sql, params = _put_sql(session_id, blobs, checkpoint, (), owner)
    rows = [dict(row) for row in messages]
    for row in rows:
        check_server_text(row)
    with dbapi.cursor() as lock:
        with dbapi.pipeline():
            dbapi.execute("BEGIN")
            dbapi.execute(f"SET LOCAL lock_timeout = {int(lock_ms)}")
            lock.execute(_OWNER_LOCK_SQL, (session_id,))
            dbapi.execute(sql, params)
            if rows:
                dbapi.execute(*_messages_sql(session_id, rows, owner))
            dbapi.execute("COMMIT")
        found = lock.fetchone()
    if found is None:
        return None
    return decode_text(found[0]), found[1]


def put_writes_pipelined(
    dbapi: Any,
    lock_ms: int,
    session_id: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    replace: bool,
    owner: Owner,
) -> Owner | None:
    """A task's writes in one round trip on psycopg's connection in pipeline mode (an
    autocommit connection): ``BEGIN``, the lock budget, :func:`put_writes_on_server`'s
    statement (the rows inserted only while the locked session row holds ``owner``
    exactly) and ``COMMIT``. Returns the owner found (None: no such session); when it
    is not ``owner`` nothing was written."""
    sql, params = _put_writes_sql(session_id, rows, replace=replace, owner=owner)
    with dbapi.cursor() as cursor:
        with dbapi.pipeline():
            dbapi.execute("BEGIN")
            dbapi.execute(f"SET LOCAL lock_timeout = {int(lock_ms)}")
            cursor.execute(sql, params)
            dbapi.execute("COMMIT")
        found = cursor.fetchone()
    if found is None:
        return None
    return decode_text(found[0]), found[1]
