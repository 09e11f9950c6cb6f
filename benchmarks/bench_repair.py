"""Durable repair of a 20k-message session with 1% violations vs a plain load.

The session is the benchmark corpus (alternating turns, tool calls and results) with 1%
of its rows made violations, one of each kind in turn: a second user turn (the first
carries a stale ``api_content``), a second assistant turn, a duplicate tool result and
an orphan tool result. A neighbour session is left clean.

Every run works on fresh copies of that store (made with the backup API, outside the
timing) and measures, on a warm connection:

* ``plain``: ``load_conversation(sid)`` of the malformed session (read only);
* ``repair``: ``reconcile_session`` (what ``load_conversation(sid, repair=True)`` runs),
  uncontended: read and plan in a read transaction, and write in that same transaction
  (SQLite upgrades it);
* ``repair, re-read``: the alternative that re-reads and re-plans under
  ``BEGIN IMMEDIATE`` every time (two full reads), for comparison;
* ``repair, stale read``: the repairing load when another connection commits between
  its read and its write: the write is refused, and the unit under the write lock
  re-reads (the cost of losing the race);
* ``plain, after`` and ``repair, clean``: a plain and a repairing load once nothing is
  left to repair (the lock-free path every later resume takes);
* ``raw SQL``: the statements the repairing load sent, replayed with the same DB-API
  module on another fresh copy (no decoding, no planning).

Rows touched are counted three ways and must agree with the plan: the SQLite change
count of the write's statements (``rows_written``), ``total_changes`` of the writing
connection (which also counts the rows the FTS triggers wrote), and a row-by-row
comparison of the table before and after.

    python benchmarks/bench_repair.py [--quick] [--runs N] [--size N] [--json FILE]

Nothing here asserts a time; the target (repair <= 1.5x plain) is printed for reading.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from random import Random
from typing import Any

from _common import (
    Corpus,
    Sample,
    capture_sql,
    checkpoint,
    copy_db,
    environment,
    new_store,
    parser,
    raw_connect,
    run_main,
    timed,
    workspace,
    write_json,
)
from sqlalchemy import event

from hermes_repo.store import StateStore
from hermes_repo.transcript import reconcile
from hermes_repo.transcript.reconcile import (
    PATH_SAME_TRANSACTION,
    PATH_WRITE_UNIT,
    reconcile_session,
)
from hermes_repo.transcript.repair import repair_transcript, violations

NAME = "repair"
SESSION = "malformed-conversation"
NEIGHBOUR = "clean-neighbour"
VIOLATION_SHARE = 0.01
TARGET = 1.5


def malformed(corpus: Corpus, size: int, seed: int = 7) -> list[dict[str, Any]]:
    """``size`` messages of which 1% are violations, each kind in turn, far apart."""
    n_bad = max(4, int(size * VIOLATION_SHARE))
    base = corpus.messages(size - n_bad, plant=False)
    assert violations(base) == [], "the corpus itself must be clean"
    rng = Random(seed)
    kinds = ["user", "assistant", "duplicate", "orphan"]
    anchors: dict[str, list[int]] = {k: [] for k in kinds}
    for i, m in enumerate(base[:-1]):
        nxt = base[i + 1]
        if m["role"] == "user" and nxt["role"] == "assistant":
            anchors["user"].append(i)  # a second user after it merges
            anchors["orphan"].append(i)  # a tool result after a user answers nothing
        elif m["role"] == "assistant" and not m.get("tool_calls") and nxt["role"] == "user":
            anchors["assistant"].append(i)
        elif m["role"] == "tool":
            anchors["duplicate"].append(i)
    chosen: dict[int, str] = {}
    taken: set[int] = set()
    for j in range(n_bad):
        kind = kinds[j % len(kinds)]
        while True:
            at = rng.choice(anchors[kind])
            # Keep violations apart, so each injected row is exactly one violation.
            if not taken & set(range(at - 3, at + 4)):
                break
        taken.add(at)
        chosen[at] = kind
    out: list[dict[str, Any]] = []
    for i, m in enumerate(base):
        kind = chosen.get(i)
        row = dict(m)
        if kind == "user":
            row["api_content"] = "stale: " + row["content"]
        out.append(row)
        if kind is None:
            continue
        ts = row["timestamp"] + 0.01
        if kind == "user":
            out.append({"role": "user", "content": "and also: " + m["content"], "timestamp": ts})
        elif kind == "assistant":
            out.append({"role": "assistant", "content": "p.s. " + m["content"], "timestamp": ts})
        elif kind == "duplicate":
            out.append({**m, "content": "retried: " + m["content"], "timestamp": ts})
        else:
            out.append(
                {"role": "tool", "content": "stray", "tool_call_id": "ghost", "timestamp": ts}
            )
    assert len(out) == size and len(violations(out)) == n_bad
    return out


def table_rows(con: Any) -> dict[int, tuple[Any, ...]]:
    return {r[0]: tuple(r) for r in con.execute("SELECT * FROM messages ORDER BY id")}


class ChangeCounter:
    """``total_changes`` of the connection that runs a write unit, begin to commit."""

    def __init__(self, store: StateStore) -> None:
        self.deltas: list[int] = []
        self._start: dict[int, int] = {}
        event.listen(store.engine, "begin", self._begin)
        event.listen(store.engine, "commit", self._commit)

    @staticmethod
    def _raw(conn: Any) -> Any:
        return conn.connection.dbapi_connection

    def _begin(self, conn: Any) -> None:
        self._start[id(conn)] = self._raw(conn).total_changes

    def _commit(self, conn: Any) -> None:
        start = self._start.pop(id(conn), None)
        if start is not None:
            self.deltas.append(self._raw(conn).total_changes - start)


def replay_raw(path: Path, captured: list[tuple[str, Any, bool]]) -> None:
    """Send the captured statements with a raw connection, transactions as the library did."""
    con = raw_connect(path)
    cur = con.cursor()
    try:
        in_tx = False
        for stmt, params, many in captured:
            if stmt.startswith("BEGIN"):
                if in_tx:
                    cur.execute("COMMIT")
                in_tx = True
            if many:
                cur.executemany(stmt, params)
            else:
                cur.execute(stmt, params or ())
                if stmt.lstrip().upper().startswith("SELECT"):
                    cur.fetchall()
        if in_tx:
            cur.execute("COMMIT")
    finally:
        con.close()


def ms(samples: list[Sample], attr: str = "wall") -> float:
    return statistics.median(getattr(s, attr) for s in samples) * 1000.0


def fresh_copy(ws: Any, name: str) -> Path:
    home = ws.home(name)
    copy_db(ws.root / "base" / "state.db", home / "state.db")
    checkpoint(home / "state.db")
    return home


def commit_elsewhere_after_read(home: Path) -> Any:
    """Make the next repair's read stale: another connection commits right after it."""
    original = reconcile._Snapshot.read.__func__  # type: ignore[attr-defined]
    fired: list[bool] = []

    def read(cls: Any, *args: Any) -> Any:
        snapshot = original(cls, *args)
        if not fired:
            fired.append(True)
            other = raw_connect(home / "state.db")
            other.execute("UPDATE sessions SET title = 'touched' WHERE id = ?", (NEIGHBOUR,))
            other.close()
        return snapshot

    reconcile._Snapshot.read = classmethod(read)  # type: ignore[method-assign, assignment]
    return lambda: setattr(reconcile._Snapshot, "read", classmethod(original))


def reread_design(store: StateStore) -> Any:
    """Plan in a read transaction, then re-read, re-plan and write under BEGIN IMMEDIATE."""
    snap = store.read(lambda conn: reconcile._Snapshot.read(conn, SESSION, False))
    assert snap.found

    def work(uow: Any) -> Any:
        conn = uow.orm.connection()
        current = reconcile._Snapshot.read(conn, SESSION, False)
        return reconcile._write(conn, SESSION, current, time.time(), PATH_WRITE_UNIT)

    return store.write(work)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None, help="messages in the session")
    args = p.parse_args(argv)
    size = args.size or (5_000 if args.quick else 20_000)
    runs = args.runs or (3 if args.quick else 7)

    names = (
        "plain",
        "repair",
        "repair, re-read",
        "repair, stale read",
        "plain, after",
        "repair, clean",
        "raw SQL",
    )
    samples: dict[str, list[Sample]] = {n: [] for n in names}
    counts: list[dict[str, int]] = []
    with workspace() as ws:
        corpus = Corpus()
        messages = malformed(corpus, size)
        base = new_store(ws.home("base"), [SESSION, NEIGHBOUR])
        with base.unit_of_work() as uow:
            uow.messages.append_many(SESSION, messages)
            uow.messages.append_many(NEIGHBOUR, corpus.messages(size // 4, seed_offset=3))
            uow.commit()
        base.close()
        expected = repair_transcript(messages).plan
        plan_rows = len(expected.updates) + len(expected.removals)

        for run in range(runs):
            # The uncontended repairing load, between a plain load and a clean one.
            home = fresh_copy(ws, f"run{run}")
            store = StateStore.open(home)
            counter = ChangeCounter(store)
            store.load_conversation(SESSION)  # warm the connection and the page cache
            watcher = raw_connect(home / "state.db")
            before = table_rows(watcher)
            s, plain = timed(lambda st=store: st.load_conversation(SESSION))
            samples["plain"].append(s)
            counter.deltas.clear()
            with capture_sql(store) as captured:
                s, repaired = timed(lambda st=store: reconcile_session(st, SESSION))
            samples["repair"].append(s)
            write_changes = max(counter.deltas)
            s, again = timed(lambda st=store: st.load_conversation(SESSION, repair=True))
            samples["repair, clean"].append(s)
            s, _ = timed(lambda st=store: st.load_conversation(SESSION))
            samples["plain, after"].append(s)
            after = table_rows(watcher)
            watcher.close()
            store.close()
            assert repaired.path == PATH_SAME_TRANSACTION, repaired.path
            assert repaired.repairs == expected.repairs and again.repairs == 0
            assert len(plain.messages) == size and len(again.messages) == len(repaired.messages)
            counts.append(
                {
                    "plan_rows": plan_rows,
                    "rows_written": repaired.rows_written,
                    "row_diff": sum(1 for i in before if before[i] != after[i]),
                    "total_changes": write_changes,
                }
            )

            # The design that re-reads under BEGIN IMMEDIATE every time, for comparison.
            home = fresh_copy(ws, f"reread{run}")
            with StateStore.open(home) as store:
                store.load_conversation(SESSION)
                s, reread = timed(lambda st=store: reread_design(st))
            samples["repair, re-read"].append(s)
            assert reread.repairs == expected.repairs

            # The same repair when another connection committed between read and write.
            home = fresh_copy(ws, f"stale{run}")
            with StateStore.open(home) as store:
                store.load_conversation(SESSION)
                restore = commit_elsewhere_after_read(home)
                try:
                    s, stale = timed(lambda st=store: reconcile_session(st, SESSION))
                finally:
                    restore()
            samples["repair, stale read"].append(s)
            assert stale.path == PATH_WRITE_UNIT and stale.repairs == expected.repairs

            # The statements of the repair, replayed raw on another copy.
            raw_home = fresh_copy(ws, f"raw{run}")
            replay = list(captured)
            s, _ = timed(lambda p=raw_home / "state.db", c=replay: replay_raw(p, c))
            samples["raw SQL"].append(s)

    medians = {name: ms(v) for name, v in samples.items()}
    cpu = {name: ms(v, "cpu") for name, v in samples.items()}
    plain_ms, plain_cpu = medians["plain"], cpu["plain"]
    c = counts[0]
    assert all(x == c for x in counts), counts
    print(f"repair of a {size}-message session ({expected.repairs} repairs), {runs} runs")
    print(
        f"  rows touched: plan {c['plan_rows']} message rows (+1 session row); "
        f"rows_written {c['rows_written']}; row diff {c['row_diff']}; "
        f"total_changes {c['total_changes']} (counts the FTS trigger writes too)"
    )
    print(f"  {'median':<20} {'wall':>8}     {'x plain':>7}   {'cpu':>8}     {'x plain':>7}")
    for name, value in medians.items():
        print(
            f"  {name:<20} {value:8.1f} ms  {value / plain_ms:5.2f}x   "
            f"{cpu[name]:8.1f} ms  {cpu[name] / plain_cpu:5.2f}x"
        )
    print(f"  target: repair <= {TARGET}x plain")
    data = {
        "benchmark": NAME,
        "params": {"size": size, "runs": runs, "repairs": expected.repairs},
        "environment": environment(),
        "median_ms": medians,
        "median_cpu_ms": cpu,
        "over_plain": {k: v / plain_ms for k, v in medians.items()},
        "over_plain_cpu": {k: v / plain_cpu for k, v in cpu.items()},
        "rows": c,
        "samples_ms": {k: [x.wall * 1000.0 for x in v] for k, v in samples.items()},
    }
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
