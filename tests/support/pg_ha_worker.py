"""A writer process for the pooler and failover tests: flushes, reports what it was told.

Run as ``python -m tests.support.pg_ha_worker URL HOME TAG COUNT GO``: waits for the file
GO (so every writer starts at once), then hands COUNT messages to a
:class:`TranscriptWriter` on the session ``ha-TAG``, three new ones a flush, each
flush's list the whole conversation so far (as an agent does). For each message a flush
acknowledged it prints ``OK <uid>`` (committed) or ``SPOOLED <uid>`` (safe in the spool,
to be replayed), and ``UNSAVED <n>`` when a flush could keep some in memory only (the
next flush tries them again). Ends with ``DONE``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hermes_repo import StateStore, TranscriptWriter

GROUP = 3


def message(tag: str, i: int) -> dict[str, Any]:
    """The ``i``-th message of writer ``tag`` (every fifth carries a tool call)."""
    uid = f"{tag}-{i}"
    if i % 5 == 4:
        call = {"id": f"c-{uid}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        return {"role": "assistant", "content": f"calling {tag}", "tool_calls": [call], "uid": uid}
    return {"role": "user", "content": f"through the pooler {tag} {i}", "uid": uid}


def main(argv: list[str]) -> None:
    url, home, tag, count, go = argv[0], Path(argv[1]), argv[2], int(argv[3]), Path(argv[4])
    sid = f"ha-{tag}"
    with StateStore.open(home, url=url, replay=False) as store:
        store.write(lambda uow: uow.sessions.ensure(sid))
        while not go.exists():
            time.sleep(0.01)
        writer = TranscriptWriter(home, sid, store)
        conversation: list[dict[str, Any]] = []
        for first in range(0, count, GROUP):
            conversation += [message(tag, i) for i in range(first, min(first + GROUP, count))]
            result = writer.flush(conversation)
            for uid in result.written_uids:
                print(f"OK {uid}", flush=True)
            for uid in result.spooled_uids:
                print(f"SPOOLED {uid}", flush=True)
            if result.unsaved:
                print(f"UNSAVED {result.unsaved}", flush=True)
    print("DONE", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])


# -- the test's side: start the writers, read what they were told, check the rows ------

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Acknowledged:
    """What one writer process was told: the uids committed or spooled, in order."""

    tag: str
    uids: list[str] = field(default_factory=list)
    spooled: int = 0
    unsaved: int = 0


def spawn(url: str, home: Path, tag: str, count: int, go: Path) -> subprocess.Popen[str]:
    """A writer process (see the module's docstring)."""
    args = [url, str(home), tag, str(count), str(go)]
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.pg_ha_worker", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def collect(tag: str, proc: subprocess.Popen[str]) -> Acknowledged:
    """Wait for the writer; what it was told (it must have ended cleanly)."""
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines and lines[-1] == "DONE", err
    told = Acknowledged(tag)
    seen: set[str] = set()
    for line in lines[:-1]:
        what, value = line.split()
        if what == "UNSAVED":
            told.unsaved += int(value)
            continue
        told.spooled += what == "SPOOLED"
        # A spooled message may be reported again when a later flush commits it.
        if value not in seen:
            seen.add(value)
            told.uids.append(value)
    return told


def check_exactly_once(
    sessions: dict[str, list[str]], told: list[Acknowledged], count: int
) -> dict[str, int]:
    """Every acknowledged message stored once, each writer's in its order; the counts.

    ``sessions`` maps each writer's session to its stored uids in id order."""
    acknowledged = lost = doubled = 0
    for ack in told:
        stored = sessions[f"ha-{ack.tag}"]
        acknowledged += len(ack.uids)
        lost += len(set(ack.uids) - set(stored))
        doubled += len(stored) - len(set(stored))
        # Nothing but the writer's own messages, in the order it wrote them (a message
        # the writer was not told about may be there too: its commit's reply was lost).
        assert stored == [f"{ack.tag}-{i}" for i in range(len(stored))]
        assert len(stored) <= count
    return {"acknowledged": acknowledged, "lost": lost, "doubled": doubled}
