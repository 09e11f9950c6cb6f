"""Rows another tool could have written: odd values put in place by raw SQL through the
store's own engine (never a second SQLite library in this process: see DESIGN.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from hermes_repo import StateStore

__all__ = ["BOTH", "NUMBERS", "ONLY", "damaged_session", "nested"]

# (column, SQL value, message field, raw value as kept) per backend: what each one's
# column types let another tool write.
BOTH = [
    ("tool_calls", "'[{bad'", "tool_calls", "[{bad"),
    ("content_parts", "'{oops'", "content", "{oops"),
    ("reasoning_details", "'nope'", "reasoning_details", "nope"),
    ("extra", "'{x'", "extra", "{x"),
    ("extra", "'[1, 2]'", "extra", "[1, 2]"),
    ("tool_calls", "'" + "[" * 3000 + "]" * 3000 + "'", "tool_calls", "[" * 3000 + "]" * 3000),
]
# Numbers a read returns as stored (JSON output writes a non-finite one as text), which
# doctor names as implausible times: (column, SQL value) per backend.
NUMBERS = {
    "sqlite": [("timestamp", "1e300"), ("timestamp", "-5")],
    "postgresql": [("timestamp", "1e300"), ("timestamp", "-5"), ("timestamp", "'NaN'::float8")],
}
ONLY = {
    "sqlite": [
        ("timestamp", "'2024-01-01'", "timestamp", "2024-01-01"),
        ("timestamp", "'abc'", "timestamp", "abc"),
        ("token_count", "'abc'", "token_count", "abc"),
        ("reasoning", "X'00ff'", "reasoning", repr(b"\x00\xff")),
        ("content", "X'41'", "content", repr(b"A")),
    ],
    "postgresql": [],
}


def damaged_session(
    store: StateStore, backend: str
) -> tuple[str, list[tuple[int, str, Any]], list[int]]:
    """A session of alternating turns, one value per damaged row overwritten by raw SQL
    through the store's own engine (never a second SQLite library in this process).

    Returns the session id, ``(message id, field, raw value)`` of each value a read
    keeps under ``$invalid``, and the ids of the rows holding an implausible time."""
    cases = BOTH + ONLY[backend]
    numbers = NUMBERS[backend]
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="odd")
        uow.commit()
    ids = []
    for i in range(len(cases) + len(numbers) + 2):
        role = "user" if i % 2 == 0 else "assistant"
        ids.append(store.append_message(sid, {"role": role, "content": f"alpha {i}"}))
    damaged = []
    with store.engine.begin() as conn:
        for (column, value, field, raw), mid in zip(cases, ids[1:], strict=False):
            conn.execute(text(f"UPDATE messages SET {column} = {value} WHERE id = {mid}"))
            damaged.append((mid, field, raw))
        odd = ids[1 + len(cases) : 1 + len(cases) + len(numbers)]
        for (column, value), mid in zip(numbers, odd, strict=True):
            conn.execute(text(f"UPDATE messages SET {column} = {value} WHERE id = {mid}"))
        conn.execute(text(f"UPDATE sessions SET extra = '{{bad' WHERE id = '{sid}'"))
    return sid, damaged, odd


def nested(depth: int, *, dicts: bool = False) -> Any:
    """``"leaf"`` inside ``depth`` lists (or ``{"k": ...}`` objects with ``dicts``)."""
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value} if dicts else [value]
    return value
