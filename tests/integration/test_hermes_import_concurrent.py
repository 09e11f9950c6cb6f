"""Two imports of one Hermes state.db into one store at the same moment (two terminals,
a cron job and a person): each session and message lands once, neither import fails."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_repo import StateStore

FIXTURE = (
    Path(__file__).resolve().parents[1] / "fixtures" / "hermes" / "hermes_state_v16-5e01a5d.db"
)

pytestmark = pytest.mark.usefixtures("backend")

# Each importer opens the store, then waits on its stdin: the test releases both at once.
_IMPORTER = textwrap.dedent(
    """
    import json, sys
    from hermes_repo import StateStore

    with StateStore.open(sys.argv[1]) as store:
        print("ready", flush=True)
        sys.stdin.readline()
        report = store.import_hermes_db(sys.argv[2])
        print(json.dumps(report.as_dict()["tables"]), flush=True)
    """
)


def test_two_imports_of_one_file_at_once_store_everything_once(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "hermes"
    folder.mkdir()
    src = Path(shutil.copyfile(FIXTURE, folder / "state.db"))
    StateStore.open(home).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _IMPORTER, str(home), str(src)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = []
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            out, err = proc.communicate()
            assert proc.returncode == 0, err
            outputs.append(json.loads(out.splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    imported = sum(o["messages"]["imported"] for o in outputs)
    assert imported == 200
    assert sum(o["sessions"]["imported"] for o in outputs) == 7
    for o in outputs:
        assert o["messages"]["imported"] + o["messages"]["already_present"] == 200
    with StateStore.open(home) as store, store.engine.connect() as conn:
        row = conn.exec_driver_sql("SELECT count(*), count(DISTINCT uid) FROM messages").one()
        assert tuple(row) == (200, 200)
