"""The seed's checks after a repair: integrity, each index against its rows, counts."""

from __future__ import annotations

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from ...driver_errors import describe
from ...schema import fts
from ...schema.tables import store_counts
from .verdict import VerifyItem

__all__ = ["integrity_text", "read_counts", "verify"]

# Invariant 3 is about these: archiving (a transcript repair) lowers active_messages.
_CANONICAL = ("sessions", "messages")


def read_counts(engine: Engine) -> dict[str, int]:
    """The canonical counts of the store behind ``engine``, in a transaction rolled back."""
    with engine.connect() as conn:
        counts = store_counts(conn)
        conn.rollback()
    return counts


def integrity_text(engine: Engine) -> str:
    """``ok``, or the first problems ``PRAGMA integrity_check`` reports.

    From SQLite 3.44 the check covers the FTS5 indexes, and a damaged one can make the
    pragma itself fail (bad format version, unreadable page): that is a verdict too.
    """
    try:
        with engine.connect() as conn:
            rows = [str(r[0]) for r in conn.exec_driver_sql("PRAGMA integrity_check").fetchall()]
            conn.rollback()
    except DBAPIError as exc:
        return describe(exc)
    if rows == ["ok"]:
        return "ok"
    return "; ".join(" ".join(r.split()) for r in rows[:3]) + (
        f" (+{len(rows) - 3} more)" if len(rows) > 3 else ""
    )


def verify(engine: Engine, before: dict[str, int]) -> tuple[list[VerifyItem], dict[str, int]]:
    """The seed's checks after a repair, read from the file through a new connection."""
    items: list[VerifyItem] = []
    integrity = integrity_text(engine)
    items.append(VerifyItem("integrity_check", integrity == "ok", integrity))
    with engine.connect() as conn:
        failing = fts.integrity_errors(conn)
        for ix in fts.INDEXES:
            items.append(
                VerifyItem(
                    f"integrity-check {ix.name}",
                    ix.name not in failing,
                    failing.get(ix.name, "ok"),
                )
            )
        try:
            with conn.begin_nested():
                partial = [str(p) for p in fts.coverage_check(conn)]
        except DBAPIError as exc:
            # A probe that errors is an index that does not find what the table holds.
            partial = [f"the index could not be probed: {describe(exc)}"]
        items.append(
            VerifyItem(
                "search coverage",
                not partial,
                "; ".join(partial) or "every probed message found, nothing missing",
            )
        )
        marker = fts.stale_marker(conn)
        items.append(
            VerifyItem(
                "fts_stale",
                marker is None,
                "no row" if marker is None else f"still set ({marker.get('error')})",
            )
        )
        missing = [n for n in fts.TRIGGER_NAMES if n not in fts.present_triggers(conn)]
        items.append(
            VerifyItem(
                "triggers",
                not missing,
                "all 6 present" if not missing else f"missing: {', '.join(missing)}",
            )
        )
        conn.rollback()
    after = read_counts(engine)
    lower = [t for t in _CANONICAL if after[t] < before.get(t, 0)]
    detail = ", ".join(f"{t} {before.get(t, '?')} -> {after[t]}" for t in _CANONICAL)
    if lower:
        # Invariant 3: no repair step deletes canonical rows. Lower counts are a bug.
        detail += f"; LOWER than before for {', '.join(lower)}: a bug, keep the backup"
    items.append(VerifyItem("canonical counts", not lower, detail))
    return items, after
