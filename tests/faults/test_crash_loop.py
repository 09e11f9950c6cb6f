"""Crash loop: a writer process killed again and again, the store checked after each.

Modelled on SQLite's own crash tests. A child process (forked) flushes a growing conversation
through ``TranscriptWriter``, mostly several new messages a flush (one transaction: the
group commit), and prints ``OK <uid>`` once a message is committed, ``FB <uid>`` once it
is fsynced in the spool file, and ``GROUP <n>`` when a flush committed n messages in one
transaction (SQLite's statement trace counts the commits). Each iteration kills it differently:

* ``kill`` / ``torn``: SIGKILL instead of (or halfway through) SQLite's N-th write (the
  fault injector hooks the unix VFS system calls): N steps through the run for
  ``kill``, is random for ``torn``;
* ``sigkill``: SIGKILL at a random moment;
* ``enospc`` / ``eio``: every SQLite write from the N-th on fails (disk full, I/O error),
  so the child spools, then exits normally.

After each iteration: ``PRAGMA integrity_check`` is ok, both FTS indexes pass
``'integrity-check'``, no uid is stored twice, session counters match their rows, and
every uid the child reported is in the database (or, on iterations that leave recovery
to the next child's ``StateStore.open``, in the database or a spool file). The next
child's open then recovers under the same faults, so recovery itself gets crashed too.
A final recovery must leave every reported uid stored exactly once.

``HERMES_CRASH_ITERATIONS`` (default 25) sets the number of iterations for a soak run;
``HERMES_FAULT_SUMMARY=<file>`` records the run's counts there as JSON (docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import random
import time
import traceback
from pathlib import Path
from typing import Any

from hermes_repo import HermesRepoError, StateStore, TranscriptWriter
from hermes_repo.transcript import spool
from tests.support.faultinject import FaultInjector, under
from tests.support.processes import reaped
from tests.support.spooling import MODULE, check_store, pending_files
from tests.support.sqltrace import traced, write_commits
from tests.support.summary import record, stored_counts

ITERATIONS = int(os.environ.get("HERMES_CRASH_ITERATIONS", "25"))
MODES = ("kill", "torn", "sigkill", "enospc", "eio")
# Children are forked from this (already importing) process: a fresh interpreter per
# iteration would spend most of the loop importing SQLAlchemy.
FORK = multiprocessing.get_context("fork")


def message(rng: random.Random, seed: int, i: int) -> dict[str, Any]:
    """A varied message: CJK, multimodal, tool calls, rows large enough to overflow."""
    kind = rng.random()
    m: dict[str, Any] = {
        "role": "user" if i % 2 == 0 else "assistant",
        "content": f"s{seed} m{i} ",
    }
    if kind < 0.1:
        m["content"] += "数据库写入失败时不丢消息 " * rng.randint(1, 40)
    elif kind < 0.2:
        m["content"] = [
            {"type": "text", "text": f"part s{seed} m{i}"},
            {"type": "image_url", "image_url": {"url": "data:x"}},
        ]
    elif kind < 0.3 and m["role"] == "assistant":
        m["tool_calls"] = [
            {
                "id": f"c{seed}_{i}",
                "type": "function",
                "function": {"name": "terminal", "arguments": "{}"},
            }
        ]
    elif kind < 0.35:
        m["content"] += "x" * rng.randint(2000, 20000)  # overflow pages
    else:
        m["content"] += "word " * rng.randint(1, 60)
    return m


def child(home: Path, report: Path, mode: str, nth: int, seed: int, count: int) -> None:
    """The writer process. Reports go to ``report`` with one write(2) per flush, so a
    line is in the file before the next message is even tried."""
    out = os.open(report, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def say(text: str) -> None:
        os.write(out, (text + "\n").encode())

    try:
        if mode != "sigkill":
            fi = FaultInjector(MODULE).install()
            where = under(home)
            if mode == "kill":
                fi.kill_at("write", where, after=nth)
            elif mode == "torn":
                fi.torn_at("write", where, after=nth)
            else:
                code = errno.ENOSPC if mode == "enospc" else errno.EIO
                fi.fail("write", where, code, after=nth, count=None)
        rng = random.Random(seed)
        store: StateStore | None
        try:
            # Recovers what earlier runs left, under the same faults.
            store = StateStore.open(home, write_budget_s=0.3)
        except HermesRepoError:
            # The fault hit the store's first writes: like an agent whose store failed
            # to initialise, spool everything.
            store = None
        writer = TranscriptWriter(home, f"crash-{seed % 3}", store)
        tracing = traced(store.engine) if store is not None else contextlib.nullcontext([])
        say("READY")
        messages: list[dict[str, Any]] = []
        i = 0
        with tracing as seen:
            while i < count:
                # Mostly several new messages a flush: the group commit's path.
                for _ in range(rng.choice((1, 2, 3, 5))):
                    messages.append(message(rng, seed, i))
                    i += 1
                seen.clear()
                r = writer.flush(messages)
                lines = [f"OK {u}" for u in r.written_uids]
                lines += [f"FB {u}" for u in r.spooled_uids]
                if len(r.written_uids) > 1 and write_commits(seen) == 1:
                    lines.append(f"GROUP {len(r.written_uids)}")  # n messages, 1 commit
                if r.unsaved:
                    lines.append(f"UNSAVED {r.error}")
                if lines:
                    say("\n".join(lines))
        say("DONE")
        if store is not None:
            with contextlib.suppress(Exception):  # a persistent fault may fail the close
                store.close()
    except BaseException:
        say("ERROR " + traceback.format_exc().replace("\n", " | "))
        os._exit(1)
    # os._exit: no atexit handlers or finalizers of the test process run in the child.
    os._exit(0)


def run_child(home: Path, mode: str, nth: int, seed: int, rng: random.Random) -> str:
    count = 2000 if mode == "sigkill" else 60
    report = home.parent / f"report-{seed}.txt"
    proc = FORK.Process(target=child, args=(home, report, mode, nth, seed, count))
    proc.start()
    with reaped([proc]):
        if mode == "sigkill":
            deadline = time.monotonic() + 30
            while not (report.exists() and b"READY" in report.read_bytes()):
                assert time.monotonic() < deadline and proc.is_alive(), "child did not start"
                time.sleep(0.005)
            time.sleep(rng.uniform(0.02, 0.3))
            proc.kill()
        proc.join(60)
    out = report.read_text() if report.exists() else ""
    assert proc.exitcode in (0, -9), f"{mode} N={nth}: exit {proc.exitcode}\n{out[-3000:]}"
    assert "UNSAVED" not in out and "ERROR" not in out, out[-3000:]
    return out


def groups(out: str) -> int:
    """How many flushes committed several messages in one transaction."""
    return sum(1 for line in out.splitlines() if line.startswith("GROUP "))


def reported(out: str) -> tuple[set[str], set[str]]:
    ok: set[str] = set()
    fb: set[str] = set()
    for line in out.splitlines():
        # A line cut short by the kill is not a report.
        parts = line.split(" ")
        if len(parts) == 2 and len(parts[1]) == 32:
            (ok if parts[0] == "OK" else fb if parts[0] == "FB" else set()).add(parts[1])
    return ok, fb


def spooled_uids(home: Path) -> set[str]:
    out: set[str] = set()
    for name in pending_files(home):
        contents = spool.read_spool(home, name)
        assert contents is not None
        out |= {str(r.message.get("uid")) for r in contents.records}
    return out


def test_crash_loop(home: Path) -> None:
    rng = random.Random(20240611)
    committed: set[str] = set()
    spooled: set[str] = set()
    modes_seen: dict[str, int] = {}
    group_commits = 0
    for it in range(ITERATIONS):
        mode = MODES[it % len(MODES)]
        j = modes_seen.get(mode, 0)
        modes_seen[mode] = j + 1
        # A run makes ~2000 SQLite writes (~30 a message). kill: N = 0, 37, 74, ...
        # (a stride that wraps, so a soak run visits every region of the run, open and
        # recovery included); torn: anywhere; enospc/eio: from the N-th write on.
        if mode == "kill":
            nth = (j * 37) % 1500
        elif mode == "torn":
            nth = rng.randint(0, 1500)
        else:
            nth = rng.randint(0, 300)
        out = run_child(home, mode, nth, seed=it, rng=rng)
        ok, fb = reported(out)
        group_commits += groups(out)
        committed |= ok
        spooled |= fb - ok
        if it % 2 == 0:
            with StateStore.open(home) as store:  # recovery at open
                report = store.last_replay
                assert report is not None and not report.errors, report
            assert pending_files(home) == []
            stored_uids = check_store(home)
            missing = (committed | spooled) - stored_uids.keys()
            assert not missing, f"iteration {it} ({mode} N={nth}): lost {sorted(missing)[:5]}"
        else:
            # Leave the spool to the next child's open (recovery under faults).
            stored_uids = check_store(home)
            lost = committed - stored_uids.keys()
            assert not lost, f"iteration {it} ({mode} N={nth}): lost committed {sorted(lost)[:5]}"
            unaccounted = spooled - stored_uids.keys() - spooled_uids(home)
            assert not unaccounted, f"iteration {it}: spooled but gone {sorted(unaccounted)[:5]}"
    with StateStore.open(home) as store:
        report = store.last_replay
        assert report is not None and not report.errors
    stored_uids = check_store(home)
    durable = committed | spooled
    rows, distinct = stored_counts(home)
    record(
        "crash_loop",
        iterations=ITERATIONS,
        modes=modes_seen,
        store_checks=ITERATIONS + 1,
        reported_committed=len(committed),
        reported_spooled=len(spooled),
        reported_durable=len(durable),
        stored_rows=rows,
        checked=len(durable & stored_uids.keys()),
        lost=len(durable - stored_uids.keys()),
        duplicated=rows - distinct,
        group_commits=group_commits,
    )
    assert pending_files(home) == []
    assert durable <= stored_uids.keys()
    assert committed and spooled  # both paths were exercised
    assert group_commits > 0  # and flushes of several messages in one transaction
