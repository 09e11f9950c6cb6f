"""A writer process for the PostgreSQL several-hosts test: appends, reports what committed.

Run as ``python -m tests.support.pg_concurrency_worker URL HOME MODE TAG COUNT GO``:
waits for the file GO (so every writer starts at once), then writes COUNT messages to
the shared session ``shared`` and COUNT to its own session ``solo-TAG``, alternating.
MODE ``append`` writes each with ``append_message`` (one transaction each); ``flush``
hands them to a :class:`TranscriptWriter` per session, three new messages a flush (a
group commit). Prints ``OK <session> <uid>`` for each committed message, in commit
order, and ``SPOOLED <n>`` at the end (what a flush had to spool: 0 expected).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from hermes_repo import StateStore, TranscriptWriter

SHARED = "shared"
GROUP = 3


def _message(tag: str, sid: str, i: int) -> dict[str, Any]:
    uid = f"{tag}-{sid}-{i}"
    if i % 5 == 4:  # some rows carry tool calls: tool_call_count must follow them too
        call = {"id": f"c-{uid}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        return {"role": "assistant", "content": f"calling {tag}", "tool_calls": [call], "uid": uid}
    return {"role": "user", "content": f"several hosts {tag} {i}", "uid": uid}


def main(argv: list[str]) -> None:
    url, home, mode, tag, count, go = (
        argv[0],
        Path(argv[1]),
        argv[2],
        argv[3],
        int(argv[4]),
        Path(argv[5]),
    )
    solo = f"solo-{tag}"
    spooled = 0
    with StateStore.open(home, url=url, replay=False) as store:
        for sid in (SHARED, solo):
            store.write(lambda uow, sid=sid: uow.sessions.ensure(sid))
        while not go.exists():
            time.sleep(0.01)
        if mode == "append":
            for i in range(count):
                for sid in (SHARED, solo):
                    message = _message(tag, sid, i)
                    store.append_message(sid, message)
                    print(f"OK {sid} {message['uid']}", flush=True)
        else:
            writers = {sid: TranscriptWriter(home, sid, store) for sid in (SHARED, solo)}
            lists: dict[str, list[dict[str, Any]]] = {SHARED: [], solo: []}
            for start in range(0, count, GROUP):
                for sid in (SHARED, solo):
                    lists[sid] += [
                        _message(tag, sid, i) for i in range(start, min(start + GROUP, count))
                    ]
                    result = writers[sid].flush(lists[sid])
                    spooled += result.spooled
                    for uid in result.written_uids:
                        print(f"OK {sid} {uid}", flush=True)
    print(f"SPOOLED {spooled}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
