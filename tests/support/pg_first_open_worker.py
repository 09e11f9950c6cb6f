"""One host opening a fresh PostgreSQL database, for the concurrent first-open test.

Run as ``python -m tests.support.pg_first_open_worker URL HOME MODE READY GO``: imports
everything, creates the file READY, waits for the file GO (so every host starts at the
same moment), then MODE ``open`` opens the store (``StateStore.open``) and writes one
session, MODE ``upgrade`` runs what ``hermes-repo db upgrade --url`` runs. Prints
``MIGRATED <n>``: how many revisions this process applied itself (Alembic's log).
A library error is printed as ``ERROR <class>: <message>`` with exit status 1.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from hermes_repo import HermesRepoError, StateStore
from hermes_repo.engine_pg import resolve_url
from hermes_repo.ops.server_schema import upgrade_server


class _Revisions(logging.Handler):
    """Counts Alembic's "Running upgrade" lines: one per revision this process applies."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Running upgrade"):
            self.count += 1


def main(argv: list[str]) -> int:
    url, home, mode, ready, go = argv[0], Path(argv[1]), argv[2], Path(argv[3]), Path(argv[4])
    revisions = _Revisions()
    alembic_log = logging.getLogger("alembic.runtime.migration")
    alembic_log.setLevel(logging.INFO)
    alembic_log.addHandler(revisions)
    ready.touch()
    while not go.exists():  # a barrier on a file: every host is past its imports
        time.sleep(0.002)
    try:
        if mode == "open":
            with StateStore.open(home, url=url, replay=False) as store:
                store.write(lambda uow: uow.sessions.ensure(f"host-{home.name}"))
        else:
            target = resolve_url(url)
            assert target is not None
            upgrade_server(target)
    except HermesRepoError as exc:
        print(f"ERROR {type(exc).__name__}: {exc}")
        return 1
    print(f"MIGRATED {revisions.count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
