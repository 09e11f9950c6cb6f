"""A malformed transcript (seed 001's cases) and helpers to store and inspect it."""

from __future__ import annotations

from contextlib import closing
from typing import Any

from hermes_repo import StateStore
from hermes_repo.transcript.repair import (
    RULE_DUPLICATE_TOOL,
    RULE_MERGE_ASSISTANT,
    RULE_MERGE_USER,
    RULE_ORPHAN_TOOL,
)
from tests.support.pg import RawPg

__all__ = ["EXPECTED_ARCHIVED", "MALFORMED", "call", "raw_connect", "rows_of", "seed"]

Msg = dict[str, Any]


def call(cid: str, name: str = "search") -> Msg:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


MALFORMED: list[Msg] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "first question about zebras", "api_content": "stale user"},
    {"role": "user", "content": "second part mentions quokkas"},
    {"role": "user", "content": "shown to the person only", "display_only": True},
    {
        "role": "assistant",
        "content": "let me look",
        "tool_calls": [call("c1")],
        "api_content": "stale assistant",
        "reasoning": "plan A",
    },
    {
        "role": "assistant",
        "content": "and also this",
        "tool_calls": [call("c2", "read")],
        "reasoning": "plan B",
        "reasoning_details": [{"type": "summary", "text": "why"}],
    },
    {"role": "tool", "content": "result one", "tool_call_id": "c1"},
    {"role": "tool", "content": "result one again", "tool_call_id": "c1"},
    {"role": "tool", "content": "result two", "tool_call_id": "c2"},
    {"role": "tool", "content": "stray output pangolin", "tool_call_id": "zz"},
    {"role": "assistant", "content": "final answer"},
    {"role": "user", "content": "thanks"},
]
# Position in MALFORMED -> the archive reason (survivor named by its position).
EXPECTED_ARCHIVED = {
    2: (RULE_MERGE_USER, 1),
    5: (RULE_MERGE_ASSISTANT, 4),
    7: (RULE_DUPLICATE_TOOL, None),
    9: (RULE_ORPHAN_TOOL, None),
}


def seed(store: StateStore, messages: list[Msg], **kw: Any) -> tuple[str, list[int]]:
    """A session holding ``messages`` as stored rows; returns its id and the row ids."""
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(**kw)
        ids = [uow.messages.append(sid, m) for m in messages]
        uow.commit()
    return sid, ids


def raw_connect(store: StateStore) -> Any:
    """A read-only handle of the same SQLite build: it can neither write nor checkpoint.
    On PostgreSQL, a plain connection to the store's database (same ``?`` SQL)."""
    if not store.database.backend.is_file:
        return RawPg(store.engine.url.render_as_string(hide_password=False))
    return store.driver.module.connect(f"file:{store.path}?mode=ro", uri=True)


def rows_of(store: StateStore, sid: str) -> list[tuple[Any, ...]]:
    """The session's ``messages`` rows, every column, in id order, read behind the store."""
    with closing(raw_connect(store)) as conn:
        return list(conn.execute("SELECT * FROM messages WHERE session_id = ? ORDER BY id", (sid,)))
