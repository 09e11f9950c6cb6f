"""A LangGraph checkpointer (``BaseCheckpointSaver``) on a hermes_repo store.

::

    from hermes_repo import StateStore
    from hermes_repo.integrations.langgraph import HermesSaver

    graph = builder.compile(checkpointer=HermesSaver(StateStore.open()))
    graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": "t-1"}})

Needs ``pip install 'langgraph>=1.2' 'langgraph-checkpoint>=4.3'`` (the ``langgraph``
extra).
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

try:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from . import _langgraph_state as state
    from ._langgraph_rows import (
        LOCK_OWNER,
        MESSAGES_CHANNEL,
        SOURCE,
        THREAD_KEY,
        check_owner,
        dialect_insert,
        message_rows,
        new_message_rows,
        next_generation,
        next_version,
        own_for_write,
        session_id_for,
        uid_prefix,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "hermes_repo.integrations.langgraph needs LangGraph: pip install "
        "'langgraph>=1.2' 'langgraph-checkpoint>=4.3' (the langgraph extra: pip install "
        "'.[langgraph]' in a hermes_repo checkout)"
    ) from exc

from sqlalchemy import select
from sqlalchemy.engine import Connection

from hermes_repo import (
    MessageRepository,
    SessionRepository,
    SessionTakenError,
    StateStore,
    UnitOfWork,
)
from hermes_repo.codec import decode_text, dumps, loads, message_to_row, tool_call_count
from hermes_repo.models import (
    langgraph_blobs_table,
    langgraph_checkpoints_table,
    langgraph_writes_table,
    sessions_table,
)

__all__ = [
    "DELETE_REASON",
    "PRUNE_REASON",
    "SOURCE",
    "HermesSaver",
    "SessionTakenError",
    "session_id_for",
]

#: The archive reason of the message rows of a thread deleted through LangGraph.
DELETE_REASON = "langgraph: delete_thread"
#: The archive reason of the message rows of a thread pruned with ``strategy="delete"``.
PRUNE_REASON = "langgraph: prune(strategy='delete')"

_CK = langgraph_checkpoints_table
# Sessions whose stored message uids a saver remembers (see HermesSaver._remember).
_REMEMBERED_SESSIONS = 1024


def _thread(config: RunnableConfig) -> tuple[Any, str, str]:
    """The config's thread id as given, as text, and its session id."""
    given = config["configurable"]["thread_id"]
    text = str(given)
    return given, text, session_id_for(text)


class HermesSaver(BaseCheckpointSaver[str]):
    """LangGraph's ``BaseCheckpointSaver`` on a :class:`~hermes_repo.StateStore` (SQLite
    or PostgreSQL); the store stays the caller's to close.

    A thread is an ordinary session of source ``langgraph`` titled with the thread id
    (its session id is the thread id when it is a valid session id, else ``lg-`` and a
    hash of it, see :func:`session_id_for`), so ``hermes-repo sessions list``,
    ``search``, ``doctor`` and snapshots see it. Checkpoints, the channel values they
    name (one row per channel version, so an unchanged value is stored once) and the
    tasks' pending writes are rows of the store's ``langgraph_*`` tables. The messages
    of the root graph's ``messages`` channel (LangChain messages or message dicts) are
    also ``display_only`` message rows of the session, one per message id (uid
    ``langgraph:<id>``): however often checkpoints repeat a message, it is stored
    once, and a write retried after a lost commit reply finds it by that uid. The id
    is LangGraph's: ``add_messages`` (``MessagesState``) gives every message one before
    the checkpoint is written. A ``messages`` channel without that reducer may hold
    messages without ids; those stay in the checkpoints only, since no identity can be
    made for them before the write that would stay the same across checkpoints (the
    list is trimmed and reordered, its positions move) and keep two equal messages
    apart (a content hash would merge two "ok"). A subgraph's messages become rows once
    the root graph's ``messages`` holds them (by the same ids, so once); the
    subgraph's own checkpoints (another ``checkpoint_ns``) are its working state and
    are not copied.

    Every call checks, in the transaction that does its work, that the session is this
    thread's: a session of another source (or of another thread hashing to the same id)
    is refused with :class:`SessionTakenError` and nothing of it is read or written.

    Every write is one unit of work on the store, retried whole within the store's
    write budget on a locked or busy database: the checkpoint, its new channel values
    and its messages commit together or not at all, and :meth:`put` returns only once
    they are durable. The session row is locked by each write (``FOR UPDATE`` on a
    server), so concurrent writers of one thread take turns and never interleave a
    checkpoint's rows. Past the budget the store's error (a
    :class:`~hermes_repo.HermesRepoError`) reaches the graph. On SQLite a put of a
    thread this saver wrote before, every put_writes and every get_tuple run their
    statements on the driver's cursor, as the store's own appends and loads do (the
    message rows through the store's message repository all the same); anything
    unusual there (a session to create, a lock, a message another writer stored) goes
    to the unit of work. The async methods run the same work in a worker thread: the
    event loop never waits on the database.

    **What delete does:** :meth:`delete_thread` deletes the thread's checkpoints,
    values and writes (LangGraph sees no thread any more) and archives its message rows
    with the reason ``langgraph: delete_thread``: they leave search and stay for the
    operator (``hermes-repo sessions show SID --include-inactive``). The session stays;
    a thread saved again under the id starts afresh in it (its messages' uids then
    carry the generation, ``langgraph:1:<id>``, so a repeated message id is stored
    again).
    """

    def __init__(self, store: StateStore, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self.store = store
        # Message uids this saver saw committed, by session: a message row is never
        # deleted, so a put checks only the messages it has not seen (a step adds one
        # or two) instead of the whole conversation every checkpoint repeats.
        self._stored: dict[str, set[str]] = {}
        self._stored_lock = threading.Lock()
        # The source and ``extra`` text of each thread's session as a server write last
        # found them (see _owner), by session and thread: two thread ids may map to one
        # session, and only the thread the session holds may write it.
        self._owners: dict[tuple[str, str], state.Owner] = {}
        # The write statements, built once for the store's dialect: building an upsert
        # (its ``excluded`` columns) cost more than SQLite running it, every put.
        blobs = dialect_insert(store.backend, langgraph_blobs_table)
        self._insert_blobs = blobs.on_conflict_do_nothing()
        checkpoints = dialect_insert(store.backend, _CK)
        self._upsert_checkpoint = checkpoints.on_conflict_do_update(
            index_elements=["session_id", "checkpoint_ns", "checkpoint_id"],
            set_={
                name: checkpoints.excluded[name]
                for name in ("run_id", "checkpoint_type", "checkpoint", "metadata_type", "metadata")
            },
        )
        writes = dialect_insert(store.backend, langgraph_writes_table)
        self._insert_writes = writes.on_conflict_do_nothing()
        self._replace_writes = writes.on_conflict_do_update(
            index_elements=["session_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"],
            set_={name: writes.excluded[name] for name in ("channel", "type", "blob")},
        )
        # On SQLite, the same statements' SQL text, compiled once, for a put's and a
        # put_writes' first attempt on the driver's cursor (see _write_fast).
        self._fast = store.backend.cursor_fast_path
        if self._fast:
            self._owner_sql = state.sqlite_text(LOCK_OWNER)
            self._blobs_sql = state.sqlite_text(self._insert_blobs, state.BLOB_COLUMNS)
            self._checkpoint_sql = state.sqlite_text(
                self._upsert_checkpoint, state.CHECKPOINT_WRITE_COLUMNS
            )
            self._insert_writes_sql = state.sqlite_text(self._insert_writes, state.WRITE_COLUMNS)
            self._replace_writes_sql = state.sqlite_text(self._replace_writes, state.WRITE_COLUMNS)
        # The uid prefix of each remembered session's messages when this saver last
        # committed a put of them (see _remembered).
        self._prefixes: dict[str, str] = {}

    def _known(self, session_id: str) -> frozenset[str]:
        with self._stored_lock:
            return frozenset(self._stored.get(session_id, ()))

    def _remembered(self, session_id: str) -> tuple[str, frozenset[str]] | None:
        """The uid prefix of the session's messages and the uids this saver saw
        committed under it, when it committed a put of the session's messages (else
        None: it knows nothing of what the session holds)."""
        with self._stored_lock:
            prefix = self._prefixes.get(session_id)
            if prefix is None:
                return None
            return prefix, frozenset(self._stored.get(session_id, ()))

    def _remember(self, session_id: str, uids: Sequence[str], prefix: str | None = None) -> None:
        with self._stored_lock:
            if len(self._stored) >= _REMEMBERED_SESSIONS and session_id not in self._stored:
                # A bound on memory; forgetting only costs a query.
                self._stored.clear()
                self._prefixes.clear()
            known = self._stored.setdefault(session_id, set())
            if prefix is not None and self._prefixes.get(session_id) != prefix:
                known.clear()  # the uids of another generation of the thread
                self._prefixes[session_id] = prefix
            known.update(uids)

    def _owner_on(self, cursor: Any, thread_id: str, session_id: str) -> dict[str, Any] | None:
        """The session's ``extra`` read on a SQLite cursor, refused (SessionTakenError)
        when the session is not this thread's; None when there is no session."""
        cursor.execute(self._owner_sql, {"sid": session_id})
        found = cursor.fetchone()
        if found is None:
            return None
        source, extra = found
        extra = loads(extra) if extra is not None else {}
        check_owner(thread_id, session_id, decode_text(source), extra)
        return extra

    def _write_fast(
        self,
        work: Callable[[UnitOfWork], Any],
        fast: Callable[[Any], Any] | None,
        adds: int = 0,
    ) -> Any:
        """``work`` as one unit of work on the store, retried whole within its budget;
        on SQLite ``fast(cursor)`` is tried once first, on the driver's cursor (see
        :meth:`~hermes_repo.database.Database.write_first_on_driver`: through
        SQLAlchemy the statements cost more than SQLite running them)."""
        if fast is None or not self._fast:
            return self.store.write(work)
        return self.store.database.write_first_on_driver(work, fast, adds=adds)

    def _owner(self, session_id: str, thread_id: str) -> state.Owner:
        """The session's source and ``extra`` text as this saver last found them (at
        first, what :func:`own_for_write` creates): a pipelined write is made with this
        guess and writes only while the session row still holds it exactly."""
        with self._stored_lock:
            found = self._owners.get((session_id, thread_id))
        return found if found is not None else (SOURCE, dumps({THREAD_KEY: thread_id}))

    def _owners_put(self, session_id: str, thread_id: str, owner: state.Owner) -> None:
        """Remember ``owner``, found by a write of ``thread_id`` that checked it."""
        with self._stored_lock:
            if len(self._owners) >= _REMEMBERED_SESSIONS:
                self._owners.clear()  # a bound on memory; forgetting costs a hand-over
            self._owners[(session_id, thread_id)] = owner

    def _write_on_server(
        self, work: Callable[[UnitOfWork], None], fast: Callable[[Any, int], bool | None]
    ) -> None:
        """A put's or put_writes' unit on a server: ``fast`` first, pipelined on the
        store's kept connection, else ``work``. Both are idempotent (values and writes
        inserted once by their keys, the checkpoint upserted by its id, message rows by
        their uids with the counters moved only for rows inserted), so a commit whose
        reply was lost is simply written again."""
        self.store.database.write_idempotent_on_kept(work, fast)

    # -- reads -----------------------------------------------------------------------

    def _owned(self, conn: Connection, thread_id: str, session_id: str) -> bool:
        found = SessionRepository(conn).source_and_extra(session_id)
        if found is None:
            return False
        check_owner(thread_id, session_id, *found)
        return True

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``), else the thread's
        newest in the config's namespace; None when there is none."""
        given, thread_id, sid = _thread(config)
        ns = config["configurable"].get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)

        server = not self.store.backend.is_file

        def check(source: str, extra: dict[str, Any]) -> None:
            check_owner(thread_id, sid, source, extra)

        def work(conn: Connection) -> CheckpointTuple | None:
            return state.one_tuple(
                conn,
                self.serde,
                sid,
                ns,
                checkpoint_id,
                given,
                check,
                server=server,
            )

        if server:
            # Two round trips on the store's kept connection (no ping, BEGIN, COMMIT).
            return self.store.database.read_on_kept(
                work,
                lambda dbapi: state.one_tuple_on(
                    dbapi, self.serde, sid, ns, checkpoint_id, given, check, True
                ),
            )
        if not self._fast:
            return self.store.read(work)

        def on_cursor(cursor: Any) -> CheckpointTuple | None:
            return state.read_tuple(cursor, self.serde, sid, ns, checkpoint_id, given, check)

        # On the pool's driver connection, without the SQLAlchemy connection and its
        # transaction objects around it (they cost more than the two statements);
        # retried and its errors judged as the store's reads are.
        return self.store.database.read_on_driver(on_cursor)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of the config's thread (and namespace and
        checkpoint id when given), else of every LangGraph thread of the store; only
        those whose metadata holds every ``filter`` item, older than ``before``, at most
        ``limit``. Read in one read transaction."""
        yield from self.store.read(lambda conn: self._list(conn, config, filter, before, limit))

    def _list(
        self,
        conn: Connection,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> builtins.list[CheckpointTuple]:
        if limit is not None and limit <= 0:
            return []
        stmt = select(*state.CHECKPOINT_COLUMNS).order_by(_CK.c.checkpoint_id.desc())
        threads: dict[str, Any] = {}
        if config is not None:
            given, thread_id, sid = _thread(config)
            if not self._owned(conn, thread_id, sid):
                return []
            threads[sid] = given
            stmt = stmt.where(_CK.c.session_id == sid)
            ns = config["configurable"].get("checkpoint_ns")
            if ns is not None:
                stmt = stmt.where(_CK.c.checkpoint_ns == ns)
            if checkpoint_id := get_checkpoint_id(config):
                stmt = stmt.where(_CK.c.checkpoint_id == checkpoint_id)
        else:
            owners = select(sessions_table.c.id, sessions_table.c.title, sessions_table.c.extra)
            for sid, title, extra in conn.execute(owners.where(sessions_table.c.source == SOURCE)):
                threads[sid] = (loads(extra) if extra else {}).get(THREAD_KEY, title)
            stmt = stmt.join(sessions_table, sessions_table.c.id == _CK.c.session_id).where(
                sessions_table.c.source == SOURCE
            )
        if before is not None and (before_id := get_checkpoint_id(before)):
            stmt = stmt.where(_CK.c.checkpoint_id < before_id)
        if not filter:
            if limit is not None:
                stmt = stmt.limit(limit)
            rows = conn.execute(stmt).all()
            return state.tuples_of(conn, self.serde, rows, threads.__getitem__)
        kept: builtins.list[Any] = []
        metadata: dict[int, Any] = {}
        for row in conn.execute(stmt):
            meta = self.serde.loads_typed((row.metadata_type, row.metadata))
            if all(meta.get(key) == value for key, value in filter.items()):
                metadata[len(kept)] = meta
                kept.append(row)
                if limit is not None and len(kept) >= limit:
                    break
        return state.tuples_of(conn, self.serde, kept, threads.__getitem__, metadata=metadata)

    # -- writes ----------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint and its new channel values (and the root graph's new
        messages) in one unit of work; returns the config naming it once durable."""
        given, thread_id, sid = _thread(config)
        ns = config["configurable"].get("checkpoint_ns", "")
        parent = config["configurable"].get("checkpoint_id")
        body: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = body.pop("channel_values")
        blobs = []
        for channel, version in new_versions.items():
            type_, blob = (
                self.serde.dumps_typed(values[channel]) if channel in values else ("empty", None)
            )
            blobs.append(
                {
                    "session_id": sid,
                    "checkpoint_ns": ns,
                    "channel": channel,
                    "version": str(version),
                    "type": type_,
                    "blob": blob,
                }
            )
        meta = get_checkpoint_metadata(config, metadata)
        checkpoint_type, checkpoint_blob = self.serde.dumps_typed(body)
        metadata_type, metadata_blob = self.serde.dumps_typed(meta)
        run_id = meta.get("run_id")
        row = {
            "session_id": sid,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": parent,
            "run_id": None if run_id is None else str(run_id),
            "checkpoint_type": checkpoint_type,
            "checkpoint": checkpoint_blob,
            "metadata_type": metadata_type,
            "metadata": metadata_blob,
        }
        messages = (
            values.get(MESSAGES_CHANNEL)
            if ns == "" and MESSAGES_CHANNEL in new_versions and MESSAGES_CHANNEL in values
            else None
        )

        server = not self.store.backend.is_file
        remembered = None
        if not server and messages is not None:
            remembered = self._remembered(sid)
        if remembered is not None:
            known = remembered[1]
        else:
            known = self._known(sid) if messages is not None else frozenset()
        synced: list[str] = []
        prefixes: list[str] = []

        def pipelined(dbapi: Any, lock_ms: int) -> bool | None:
            # One round trip: the lock budget, the owner's lock, the values, the
            # checkpoint, the new message rows with the counters (each written only
            # while the session row is the one this saver last found; a message whose
            # uid is stored is skipped and not counted) and COMMIT. Anything unexpected
            # hands over to ``work``.
            owner = self._owner(sid, thread_id)
            extra = loads(owner[1]) if owner[1] is not None else {}
            uids, unknown = (
                message_rows(messages, uid_prefix(extra), known)
                if messages is not None
                else ([], [])
            )
            if len(unknown) > state.SERVER_UIDS:
                return None  # a long history's first put: in chunks, the ordinary way
            rows = [message_to_row(sid, m) for m in unknown]
            if any(tool_call_count(m) for m in unknown):
                return None  # counted by the ordinary append (LangGraph's rows have none)
            found = state.put_pipelined(dbapi, lock_ms, sid, blobs, row, rows, owner)
            if found != owner:  # nothing was written
                if found is not None:
                    check_owner(thread_id, sid, found[0], loads(found[1]) if found[1] else {})
                    self._owners_put(sid, thread_id, found)
                return None
            synced[:] = uids
            return True

        def work(uow: UnitOfWork) -> None:
            extra = own_for_write(uow, thread_id, sid, create=True)
            assert extra is not None  # created when missing
            conn = uow.connection
            if server:
                # One round trip for the values, the checkpoint and the lookup of which
                # new messages the session holds already (a put's dearest cost there).
                uids, unknown = (
                    message_rows(messages, uid_prefix(extra), known)
                    if messages is not None
                    else ([], [])
                )
                asked, rest = unknown[: state.SERVER_UIDS], unknown[state.SERVER_UIDS :]
                stored = state.put_on_server(conn, sid, blobs, row, [r["uid"] for r in asked])
                fresh = [r for r in asked if r["uid"] not in stored]
                if rest:  # a long history's first put: the rest in chunks of their own
                    fresh += new_message_rows(conn, sid, rest)
                if fresh:
                    uow.messages.append_many(sid, fresh)
                synced[:] = uids
                return
            if blobs:
                conn.execute(self._insert_blobs, blobs)
            conn.execute(self._upsert_checkpoint, row)
            if messages is not None:
                prefix = uid_prefix(extra)
                synced[:] = state.append_messages(uow, sid, messages, prefix, known)
                prefixes[:] = [prefix]

        fast: Callable[[Any], Any] | None = None
        adds = 0
        if not server and (messages is None or remembered is not None):
            # The thread's session as this saver left it: the messages it did not see
            # committed are new (a step adds one or two), so they are inserted without
            # a lookup. Should another writer have stored one meanwhile, the session's
            # unique uids refuse the INSERT, the attempt rolls back whole and the unit
            # (which looks first) stores each message once.
            prefix = remembered[0] if remembered is not None else ""
            uids, fresh = ([], []) if messages is None else message_rows(messages, prefix, known)
            adds = len(fresh)

            def fast(cursor: Any) -> bool | None:
                extra = self._owner_on(cursor, thread_id, sid)
                if extra is None:
                    return None  # the unit creates the session
                if messages is not None and uid_prefix(extra) != prefix:
                    return None  # the thread was deleted since: its uids changed
                if blobs:
                    cursor.executemany(self._blobs_sql, blobs)
                cursor.execute(self._checkpoint_sql, row)
                if fresh:
                    # The store's message contract on the cursor: the rows and the
                    # session's counters exactly as a unit's append_many writes them.
                    MessageRepository(cursor).append_many(sid, fresh)
                synced[:] = uids
                prefixes[:] = [prefix] if messages is not None else []
                return True

        if server:
            self._write_on_server(work, pipelined)
        else:
            self._write_fast(work, fast, adds)
        if prefixes:
            self._remember(sid, synced, prefixes[0])
        elif synced:
            self._remember(sid, synced)
        stored = {"thread_id": given, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        return {"configurable": stored}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes for the checkpoint ``config`` names, in one unit of
        work. A write already stored is kept (the special channels' are replaced), as
        LangGraph's own savers do."""
        _, thread_id, sid = _thread(config)
        ns = config["configurable"].get("checkpoint_ns", "")
        checkpoint_id = config["configurable"]["checkpoint_id"]
        rows = []
        for idx, (channel, value) in enumerate(writes):
            type_, blob = self.serde.dumps_typed(value)
            rows.append(
                {
                    "session_id": sid,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                    "task_id": task_id,
                    "task_path": task_path,
                    "idx": WRITES_IDX_MAP.get(channel, idx),
                    "channel": channel,
                    "type": type_,
                    "blob": blob,
                }
            )
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)

        server = not self.store.backend.is_file

        def pipelined(dbapi: Any, lock_ms: int) -> bool | None:
            # One round trip: the lock budget, the owner's lock with the rows (written
            # only while the session row is the one this saver last found), COMMIT.
            owner = self._owner(sid, thread_id)
            found = state.put_writes_pipelined(
                dbapi, lock_ms, sid, rows, replace=replace, owner=owner
            )
            if found == owner:
                return True
            # Nothing was written (the empty transaction committed).
            if found is not None:
                check_owner(thread_id, sid, found[0], loads(found[1]) if found[1] else {})
                self._owners_put(sid, thread_id, found)
            return None

        def work(uow: UnitOfWork) -> None:
            if server:
                # The owner's lock and the rows in one round trip; the owner is checked
                # before the unit commits (a refusal rolls the rows back).
                found = state.put_writes_on_server(
                    uow.connection, sid, SOURCE, rows, replace=replace
                )
                if found is not None:
                    check_owner(thread_id, sid, *found)
                    return
            own_for_write(uow, thread_id, sid, create=True)
            uow.connection.execute(self._replace_writes if replace else self._insert_writes, rows)

        fast: Callable[[Any], Any] | None = None
        if not server:
            sql = self._replace_writes_sql if replace else self._insert_writes_sql

            def fast(cursor: Any) -> bool | None:
                if self._owner_on(cursor, thread_id, sid) is None:
                    return None  # the unit creates the session
                cursor.executemany(sql, rows)
                return True

        if rows and server:
            self._write_on_server(work, pipelined)
        elif rows:
            self._write_fast(work, fast)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints, values and writes; archive its message rows
        with the reason :data:`DELETE_REASON` (the session and its rows stay)."""
        self._drop(str(thread_id), DELETE_REASON)

    def _drop(self, thread_id: str, reason: str) -> None:
        sid = session_id_for(thread_id)

        def work(uow: UnitOfWork) -> None:
            extra = own_for_write(uow, thread_id, sid, create=False)
            if extra is None:
                return
            state.delete_rows(uow.connection, sid)
            if uow.messages.archive_active(sid, reason=reason):
                uow.messages.recount(sid)
            next_generation(uow, sid, extra)

        self.store.write(work)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints of these runs (``metadata["run_id"]``), in every
        thread and namespace, with their writes and the values only they named.

        Refuses the whole call (:class:`~hermes_repo.InvalidArgumentError` naming the
        thread, the runs, the channels and the runs that depend on them; nothing
        deleted, in any thread) when a checkpoint that stays holds ``DeltaChannel``
        values rebuilt from the doomed checkpoints. LangGraph stores such a value
        whole only every ``snapshot_frequency`` updates; in between it rebuilds it by
        walking the checkpoint's parents and replaying their pending writes back to
        the last snapshot, and a missing parent ends that walk without an error, so
        the value would come back short or empty. A thread's next run starts from the
        previous run's last checkpoint: deleting an earlier run of a thread that uses
        a ``DeltaChannel`` is refused unless the runs after it are deleted in the same
        call or have snapshotted every delta channel since. Runs of graphs without delta
        channels, the newest run, and delta values snapshotted since are deleted as
        before.

        LangGraph's own savers do not have this operation: ``InMemorySaver``,
        ``SqliteSaver``, ``AsyncSqliteSaver`` (langgraph-checkpoint-sqlite 3.1.2) and
        ``PostgresSaver``, ``AsyncPostgresSaver`` (langgraph-checkpoint-postgres 3.2.0) raise
        ``NotImplementedError``, and ``BaseCheckpointSaver.delete_for_runs`` only
        warns that deleting these rows silently corrupts the channel."""
        ids = [str(run_id) for run_id in run_ids]
        if ids:
            self.store.write(lambda uow: state.delete_runs(uow.connection, self.serde, ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and write of one thread to another (and the
        messages of its newest root checkpoint to the target's rows). A source with no
        session copies nothing."""
        source, target = str(source_thread_id), str(target_thread_id)
        source_sid, target_sid = session_id_for(source), session_id_for(target)

        def work(uow: UnitOfWork) -> None:
            if own_for_write(uow, source, source_sid, create=False) is None:
                return
            extra = own_for_write(uow, target, target_sid, create=True)
            assert extra is not None  # created when missing
            if source_sid != target_sid:
                state.copy_rows(uow.connection, self.store.backend, source_sid, target_sid)
                state.append_latest_messages(uow, self.serde, target_sid, uid_prefix(extra))

        self.store.write(work)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: only the newest checkpoint of each namespace stays (with its
        writes and the values it names). ``delete``: as :meth:`delete_thread`, with the
        reason :data:`PRUNE_REASON`. One unit of work per thread.

        ``keep_latest`` refuses a thread (:class:`~hermes_repo.InvalidArgumentError`,
        nothing of that thread deleted) whose newest checkpoint holds ``DeltaChannel``
        values not yet snapshotted: LangGraph rebuilds them from the writes of earlier
        checkpoints, which pruning would drop. Threads before it in ``thread_ids`` stay
        pruned."""
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"unknown prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                self._drop(str(thread_id), PRUNE_REASON)
                continue
            text = str(thread_id)
            sid = session_id_for(text)

            def work(uow: UnitOfWork, text: str = text, sid: str = sid) -> None:
                if own_for_write(uow, text, sid, create=False) is not None:
                    state.keep_latest(uow.connection, self.serde, sid, text)

            self.store.write(work)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """Versions LangGraph's SQL savers use: a counter, then a random tiebreak."""
        return next_version(current)

    # -- async: the same work in a worker thread --------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(
            lambda: self.store.read(lambda conn: self._list(conn, config, filter, before, limit))
        )
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)
