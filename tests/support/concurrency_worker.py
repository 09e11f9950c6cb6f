"""A worker process for the concurrency test: writes or searches, reports what it saw.

Run as ``python -m tests.support.concurrency_worker HOME ROLE SESSION COUNT``:
``write`` appends COUNT messages (each in its own transaction) and prints one
``OK <uid>`` line per committed message; ``search`` searches until a stop file appears
and prints ``SEARCHES <n> ERRORS <m>``.
"""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

from hermes_repo import HermesRepoError, StateStore


def write(home: Path, session_id: str, count: int, tag: str) -> None:
    with StateStore.open(home, replay=False) as store:
        # store.write, not a bare unit of work: six writers start at once, and with a
        # rollback journal the first BEGIN IMMEDIATE may find the lock taken for longer
        # than busy_timeout; only the write path replays the unit within its budget.
        store.write(lambda uow: uow.sessions.ensure(session_id))
        for i in range(count):
            uid = f"{tag}-{i}-{uuid.uuid4().hex[:8]}"
            store.append_message(
                session_id,
                {"role": "user", "content": f"concurrent {tag} word{i % 17}", "uid": uid},
            )
            print(f"OK {uid}", flush=True)


def search(home: Path, stop: Path) -> None:
    searches = errors = 0
    with StateStore.open(home, replay=False) as store:
        while not stop.exists():
            try:
                store.search("concurrent", limit=20)
                store.search("word3", limit=20)
                searches += 2
            except HermesRepoError as exc:
                errors += 1
                print(f"ERROR {exc}", flush=True)
            time.sleep(0.005)
    print(f"SEARCHES {searches} ERRORS {errors}", flush=True)


def main(argv: list[str]) -> None:
    home, role = Path(argv[0]), argv[1]
    if role == "write":
        write(home, argv[2], int(argv[3]), argv[4])
    else:
        search(home, Path(argv[2]))


if __name__ == "__main__":
    main(sys.argv[1:])
