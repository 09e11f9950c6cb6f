"""A pydantic-ai ``ConversationStore`` on a hermes_repo store.

::

    from hermes_repo import StateStore
    from hermes_repo.integrations.pydantic_ai import HermesConversationStore

    conversations = HermesConversationStore(StateStore.open())
    conversation = await conversations.load(cid) or Conversation(conversation_id=cid)
    result = await agent.run("hi", conversation=conversation)
    await conversations.save(result)

Needs ``pip install 'pydantic-ai-slim>=2.68'`` (the ``pydantic-ai`` extra).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

try:
    from pydantic_ai.conversation_store import (
        ConversationConflict,
        ConversationEntry,
        ConversationRecord,
        ConversationStore,
    )

    from ._pydantic_ai_rows import (
        ENTRY_KEY,
        RECORD_KEY,
        SOURCE,
        check_owner,
        checked_rows,
        entry_from_row,
        record_from_json,
        record_json,
        session_id_for,
    )
except ImportError as exc:  # pragma: no cover - exercised without the extra installed
    raise ImportError(
        "hermes_repo.integrations.pydantic_ai needs pydantic-ai: "
        "pip install 'pydantic-ai-slim>=2.68' (the pydantic-ai extra: pip install "
        "'.[pydantic-ai]' in a hermes_repo checkout)"
    ) from exc

from sqlalchemy.engine import Connection

from hermes_repo import (
    EntryRepository,
    MessageRepository,
    SessionRepository,
    SessionTakenError,
    StateStore,
    UnitOfWork,
)

__all__ = ["HermesConversationStore", "SessionTakenError", "session_id_for"]

#: The archive reason of the rows of a conversation deleted through pydantic-ai.
DELETE_REASON = "pydantic-ai ConversationStore.delete: conversation deleted"


class HermesConversationStore(ConversationStore):
    """pydantic-ai's ``ConversationStore`` on a :class:`~hermes_repo.StateStore`
    (SQLite or PostgreSQL); the store stays the caller's to close.

    A conversation is an ordinary session of source ``pydantic-ai`` titled with its
    conversation id (its session id is that id when it is a valid session id, else
    ``pai-`` and a hash of it, see :func:`session_id_for`), so ``hermes-repo sessions
    list``, ``search``, ``doctor``, snapshots and the repair tools see it. Its record is a
    key of the session's ``extra``; each entry is a ``display_only`` message row of the
    session whose save stored it, its uid the entry id. The framework replays its own
    chain of entries; the rows are display-only because hermes' transcript repair merges
    consecutive same-role rows and drops unpaired tool rows, which would corrupt the
    branches, and it never touches display-only rows. A session of another source (or
    of another conversation) under the id is refused with
    :class:`SessionTakenError`.

    **What delete does:** no row is deleted. :meth:`delete_record` removes the record
    (so the conversation no longer loads or lists) and archives the conversation's
    active rows with the reason "pydantic-ai ConversationStore.delete": they leave
    search and hermes' replay, and stay for the audit (``hermes-repo sessions show
    SID --include-inactive``). Entries are never released: :meth:`read_entry` still
    finds archived rows, so a fork whose history runs into a deleted conversation keeps
    loading. Don't rely on delete to erase messages: hermes_repo never deletes a
    message row. A conversation saved again under a deleted id starts afresh in the
    same session (the old rows stay archived).

    Reads run in read transactions (a writer never blocks them on SQLite's WAL);
    listing reads the records of every pydantic-ai session: it grows with their number.

    Every save is one unit of work on the store (retried whole on a locked or busy
    database): the compare-and-set of the record on its revision (the session row is
    locked, so it holds on PostgreSQL under READ COMMITTED too), the check that the new
    head exists, and the new entries. A lost race raises ``ConversationConflict`` and
    writes nothing. Every call runs in a worker thread: the event loop never waits on
    the database.
    """

    def __init__(self, store: StateStore) -> None:
        self.store = store

    # -- the five primitives -------------------------------------------------------

    async def read_record(self, conversation_id: str) -> ConversationRecord | None:
        return await asyncio.to_thread(self._run_read_record, conversation_id)

    async def read_records(
        self, *, scope: str | None = None, limit: int | None = None
    ) -> Sequence[ConversationRecord]:
        return await asyncio.to_thread(self._run_read_records, scope, limit)

    async def write_record(
        self,
        record: ConversationRecord,
        *,
        new_entries: Sequence[ConversationEntry] = (),
        expected_revision: str | None,
    ) -> None:
        await asyncio.to_thread(
            self._run_write_record, record, list(new_entries), expected_revision
        )

    async def delete_record(self, conversation_id: str, *, expected_revision: str) -> None:
        await asyncio.to_thread(self._run_delete_record, conversation_id, expected_revision)

    async def read_entry(self, entry_id: str) -> ConversationEntry:
        return await asyncio.to_thread(self._run_read_entry, entry_id)

    async def read_history(
        self, head_id: str | None, *, limit: int | None = None
    ) -> list[ConversationEntry]:
        """The chain up to ``head_id`` in one unit of work: the head's session is read
        whole (one query), and each session a fork's history runs into after it."""
        if head_id is None:
            return []
        if isinstance(head_id, str) and "\x00" in head_id:
            raise KeyError(head_id)  # never stored (see checked_rows), on any backend
        return await asyncio.to_thread(self._run_read_history, head_id, limit)

    # -- the work, in a worker thread ----------------------------------------------

    def _run_read_record(self, conversation_id: str) -> ConversationRecord | None:
        sid = session_id_for(conversation_id)

        def work(conn: Connection) -> dict[str, Any] | None:
            state = SessionRepository(conn).source_and_extra(sid)
            if state is None:
                return None
            check_owner(conversation_id, sid, *state)
            stored: dict[str, Any] | None = state[1].get(RECORD_KEY)
            return stored

        stored = self.store.read(work)
        return None if stored is None else record_from_json(stored)

    def _run_read_records(self, scope: str | None, limit: int | None) -> list[ConversationRecord]:
        stored = self.store.read(lambda conn: SessionRepository(conn).extras_of_source(SOURCE))
        records = [
            record_from_json(extra[RECORD_KEY]) for _, extra in stored if RECORD_KEY in extra
        ]
        if scope is not None:
            records = [record for record in records if record.scope == scope]
        records.sort(key=lambda record: record.updated_at, reverse=True)
        return records[:limit]

    def _run_write_record(
        self,
        record: ConversationRecord,
        new_entries: list[ConversationEntry],
        expected_revision: str | None,
    ) -> None:
        cid = record.conversation_id
        sid = session_id_for(cid)
        # Every entry checked before the unit starts: a bad one refuses the save whole.
        rows = checked_rows(new_entries, sid, server=not self.store.backend.is_file)
        new_ids = {entry.id for entry in new_entries}
        head = record.head_id
        stored_record = record_json(record)

        def work(uow: UnitOfWork) -> None:
            state = uow.sessions.source_and_extra(sid, lock=True)
            extra: dict[str, Any] = {}
            if state is not None:
                check_owner(cid, sid, *state)
                extra = state[1]
            stored = extra.get(RECORD_KEY)
            if (stored["revision"] if stored is not None else None) != expected_revision:
                raise ConversationConflict(cid)
            if (
                head is not None
                and head not in new_ids
                and not uow.entries.find([head], source=SOURCE)
            ):
                raise ConversationConflict(cid)
            # On a server another writer may create the session at the same moment:
            # ensure() then finds it created, and this save lost the race.
            if state is None and not uow.sessions.ensure(sid, source=SOURCE):
                raise ConversationConflict(cid)
            uow.sessions.update(
                sid,
                title=cid,
                input_tokens=record.usage.input_tokens,
                output_tokens=record.usage.output_tokens,
                extra={**extra, RECORD_KEY: stored_record},
            )
            if rows:
                uow.messages.append_many(sid, rows)

        self.store.write(work)

    def _run_delete_record(self, conversation_id: str, expected_revision: str) -> None:
        sid = session_id_for(conversation_id)

        def work(uow: UnitOfWork) -> None:
            state = uow.sessions.source_and_extra(sid, lock=True)
            if state is None:
                raise ConversationConflict(conversation_id)
            check_owner(conversation_id, sid, *state)
            extra = state[1]
            stored = extra.get(RECORD_KEY)
            if stored is None or stored["revision"] != expected_revision:
                raise ConversationConflict(conversation_id)
            rest = {key: value for key, value in extra.items() if key != RECORD_KEY}
            uow.sessions.update(sid, title=conversation_id, extra=rest or None)
            uow.messages.archive_active(sid, reason=DELETE_REASON)
            uow.messages.recount(sid)

        self.store.write(work)

    def _run_read_entry(self, entry_id: str) -> ConversationEntry:
        if isinstance(entry_id, str) and "\x00" in entry_id:
            raise KeyError(entry_id)  # never stored (see checked_rows), on any backend
        found = self.store.read(lambda conn: EntryRepository(conn).find([entry_id], source=SOURCE))
        rows = [row for _, row in found if ENTRY_KEY in row]
        if not rows:
            raise KeyError(entry_id)  # a LookupError, as the framework expects
        return entry_from_row(rows[0])

    def _run_read_history(self, head_id: str, limit: int | None) -> list[ConversationEntry]:
        def work(conn: Connection) -> list[dict[str, Any]]:
            entries, messages = EntryRepository(conn), MessageRepository(conn)
            rows: dict[str, dict[str, Any]] = {}
            read: set[str] = set()
            chain: list[dict[str, Any]] = []
            entry_id: str | None = head_id
            while entry_id is not None and (limit is None or len(chain) < limit):
                if entry_id not in rows:
                    found = [
                        sid
                        for sid, row in entries.find([entry_id], source=SOURCE)
                        if ENTRY_KEY in row
                    ]
                    if not found or found[0] in read:
                        raise KeyError(entry_id)
                    read.add(found[0])
                    for row in messages.list(found[0], include_inactive=True):
                        if ENTRY_KEY in row:
                            rows[row["uid"]] = row
                row = rows.pop(entry_id)  # popped: a cycle would end in a KeyError
                chain.append(row)
                entry_id = row[ENTRY_KEY]["parent_id"]
            return chain

        chain = self.store.read(work)
        return [entry_from_row(row) for row in reversed(chain)]
