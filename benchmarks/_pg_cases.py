"""The single-process cases of bench_pg.py: append, bulk append, load.

Each case runs three sides interleaved in one process (PostgreSQL library, raw psycopg
on the same database, the SQLite store), round-robin, one timed sample each per run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from _common import Sample, SqlMismatch, timed, tool_calls_of
from _pg_sql import (
    RAW_BUMP,
    RAW_INSERT_MANY,
    RAW_INSERT_ONE,
    RAW_LOAD,
    RAW_LOCK_TIMEOUT,
    RecordingCursor,
    library_sql,
    require_same_sql,
    wire_sql,
)
from bench_load import raw_message

from hermes_repo.codec import message_to_row
from hermes_repo.store import StateStore

SIDES = ("pg", "raw", "sqlite")


@dataclass
class Case:
    """One workload: samples of the three sides, ``work`` messages per sample."""

    name: str
    work: int
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {s: [] for s in SIDES})
    note: str = ""

    def rate(self, side: str) -> float:
        """Messages per second, median of the samples."""
        return self.work / statistics.median(s.wall for s in self.samples[side])

    def paired(self, side: str, other: str) -> float:
        """Median over runs of ``side``'s rate / ``other``'s in the same run: the two
        samples of a run are taken back to back, so a load change on a shared machine
        moves both, where the ratio of the medians compares different moments."""
        pairs = zip(self.samples[side], self.samples[other], strict=True)
        return statistics.median(b.wall / a.wall for a, b in pairs)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "work": self.work, "note": self.note}
        out["pg_over_raw_paired"] = self.paired("pg", "raw")
        out["pg_over_sqlite_paired"] = self.paired("pg", "sqlite")
        for side, samples in self.samples.items():
            if samples:
                out[f"{side}_msg_s"] = self.rate(side)
                out[f"{side}_samples_s"] = [s.wall for s in samples]
        return out


@dataclass
class Sides:
    """What every case runs on: the PostgreSQL store and a raw psycopg connection to
    the same database, and a SQLite store."""

    pg: StateStore
    raw: Any  # psycopg.Connection, the library's connect arguments
    sqlite: StateStore

    def create_sessions(self, ids: Sequence[str]) -> None:
        for store in (self.pg, self.sqlite):
            with store.unit_of_work() as uow:
                for i, sid in enumerate(ids):
                    uow.sessions.create("bench", id=sid, started_at=1_700_000_000.0 + i)
                uow.commit()


def run_interleaved(case: Case, runs: int, sides: dict[str, Callable[[int], Any]]) -> Case:
    """pg, raw, sqlite, pg, raw, sqlite...; each callable gets the run number."""
    for i in range(runs):
        for side in SIDES:
            sample, _ = timed(lambda i=i, side=side: sides[side](i))
            case.samples[side].append(sample)
    return case


def _raw_append(cur: Any, con: Any, sid: str, calls: int, row: dict[str, Any]) -> int:
    cur.execute(RAW_LOCK_TIMEOUT)
    cur.execute(RAW_BUMP, {"n_messages": 1, "n_calls": calls, "sid": sid})
    if cur.rowcount == 0:
        raise LookupError(sid)
    cur.execute(RAW_INSERT_ONE, row)
    rowid = int(cur.fetchone()[0])
    con.commit()
    return rowid


def append_case(s: Sides, msgs: list[dict[str, Any]], per_run: int, runs: int, label: str) -> Case:
    """One message per transaction, round-robin over 50 sessions per side."""
    lib_ids = [f"lib-{i:03d}" for i in range(50)]
    raw_ids = [f"raw-{i:03d}" for i in range(50)]
    s.create_sessions(lib_ids + raw_ids)
    warm, rest = msgs[0], msgs[1:]
    plan = [rest[i * per_run : (i + 1) * per_run] for i in range(runs)]
    lib_plan = [[(lib_ids[j % 50], m) for j, m in enumerate(b)] for b in plan]
    raw_plan = [
        [
            (raw_ids[j % 50], tool_calls_of([m]), message_to_row(raw_ids[j % 50], m))
            for j, m in enumerate(b)
        ]
        for b in plan
    ]
    cur = s.raw.cursor()
    # On the wire: the library's append runs on psycopg's connection, not through
    # SQLAlchemy (see _pg_sql.wire_sql). The first append checks the connection out.
    with wire_sql(engine=s.pg.engine) as lib_wire:
        s.pg.append_message(lib_ids[0], warm)
    with wire_sql(conn=s.raw) as raw_wire:
        _raw_append(cur, s.raw, raw_ids[0], tool_calls_of([warm]), message_to_row(raw_ids[0], warm))
    require_same_sql("append", lib_wire[0], raw_wire[0])  # type: ignore[arg-type]
    if lib_wire[1] != raw_wire[1]:
        raise SqlMismatch(
            f"ERROR [append]: the library made {lib_wire[1]} round trips, the raw side "
            f"{raw_wire[1]}, for the same statements; the ratio would compare different work"
        )
    s.sqlite.append_message(lib_ids[0], warm)

    def lib(i: int) -> None:
        append = s.pg.append_message
        for sid, m in lib_plan[i]:
            append(sid, m)

    def raw(i: int) -> None:
        for sid, calls, row in raw_plan[i]:
            _raw_append(cur, s.raw, sid, calls, row)

    def lite(i: int) -> None:
        append = s.sqlite.append_message
        for sid, m in lib_plan[i]:
            append(sid, m)

    case = Case(f"append, 1 msg/txn ({label})", per_run, note="target >= 0.85x raw")
    return run_interleaved(case, runs, {"pg": lib, "raw": raw, "sqlite": lite})


def bulk_case(s: Sides, msgs: list[dict[str, Any]], runs: int, label: str) -> Case:
    """A unit of work appending ``len(msgs)`` messages to a new session (each run, each
    side) vs the counters UPDATE and one ``executemany`` of the INSERT."""
    calls = tool_calls_of(msgs)
    n = len(msgs)
    ids = [f"bulk-{side}-{i}" for i in range(runs + 1) for side in ("lib", "raw")]
    s.create_sessions(ids)
    raw_rows = [[message_to_row(f"bulk-raw-{i}", m) for m in msgs] for i in range(runs + 1)]
    cur = s.raw.cursor()

    def lib_on(store: StateStore, i: int) -> None:
        with store.unit_of_work() as uow:
            uow.messages.append_many(f"bulk-lib-{i}", msgs)
            uow.commit()

    def raw_on(c: Any, i: int) -> None:
        c.execute(RAW_BUMP, {"n_messages": n, "n_calls": calls, "sid": f"bulk-raw-{i}"})
        if c.rowcount == 0:
            raise LookupError(i)
        c.executemany(RAW_INSERT_MANY, raw_rows[i])
        s.raw.commit()

    raw_seen: list[tuple[str, bool]] = []
    with library_sql(s.pg.engine) as lib_seen:
        lib_on(s.pg, runs)
    raw_on(RecordingCursor(cur, raw_seen), runs)
    require_same_sql("bulk", lib_seen, raw_seen)
    lib_on(s.sqlite, runs)
    case = Case(f"bulk append, {n:,} msgs in 1 txn ({label})", n)
    return run_interleaved(
        case,
        runs,
        {
            "pg": lambda i: lib_on(s.pg, i),
            "raw": lambda i: raw_on(cur, i),
            "sqlite": lambda i: lib_on(s.sqlite, i),
        },
    )


def _no_uid(m: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k != "uid"}


def load_case(s: Sides, msgs: list[dict[str, Any]], runs: int, reps: int, label: str) -> Case:
    """``load_conversation`` of a ``len(msgs)``-message session vs the same SELECT on
    psycopg and a hand-written row-to-dict loop (outputs compared once)."""
    sid = "long-conversation"
    s.create_sessions([sid])
    for store in (s.pg, s.sqlite):
        for start in range(0, len(msgs), 2000):
            with store.unit_of_work() as uow:
                uow.messages.append_many(sid, msgs[start : start + 2000])
                uow.commit()
    cur = s.raw.cursor()

    def raw_load(c: Any) -> list[dict[str, Any]]:
        c.execute(RAW_LOAD, {"sid": sid, "active": 1})
        rows = c.fetchall()
        s.raw.commit()
        return [raw_message(r) for r in rows]

    raw_seen: list[tuple[str, bool]] = []
    with library_sql(s.pg.engine) as lib_seen:
        lib_msgs = s.pg.load_conversation(sid).messages
    raw_msgs = raw_load(RecordingCursor(cur, raw_seen))
    require_same_sql("load", lib_seen, raw_seen)
    assert len(lib_msgs) == len(msgs), len(lib_msgs)
    assert lib_msgs == raw_msgs, "raw dicts differ from the library's"
    # The same messages on SQLite (each store gave them its own uid).
    lite_msgs = s.sqlite.load_conversation(sid).messages
    assert [_no_uid(m) for m in lite_msgs] == [_no_uid(m) for m in lib_msgs], "SQLite differs"
    case = Case(f"load_conversation, {len(msgs):,} msgs ({label})", len(msgs) * reps)
    return run_interleaved(
        case,
        runs,
        {
            "pg": lambda i: [s.pg.load_conversation(sid) for _ in range(reps)],
            "raw": lambda i: [raw_load(cur) for _ in range(reps)],
            "sqlite": lambda i: [s.sqlite.load_conversation(sid) for _ in range(reps)],
        },
    )
