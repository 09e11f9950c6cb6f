"""An interrupted ``sessions salvage --output`` leaves nothing that passes for a store.

A real console-script process salvages a store large enough that the run lasts well
after its partial output appears; the test waits for that file and then sends the
signal. SIGTERM, SIGHUP (a dropped ssh session) and SIGINT clean up at once; after a
SIGKILL (no cleanup possible) the next run removes what the killed one left. Either
way nothing exists at the output path until the store there is complete and verified,
and running the same command again just works.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from hermes_repo.salvage import SalvageError, salvage
from tests.cli.conftest import SCRIPT
from tests.support import damage

MODULE = select_driver().module
SESSIONS = 4
PER_SESSION = 6_000


@pytest.fixture(scope="module")
def big_source(tmp_path_factory: pytest.TempPathFactory, template_home: Path) -> Path:
    """A store with enough rows that a salvage runs for a while (built once)."""
    home = tmp_path_factory.mktemp("big-source")
    shutil.copyfile(template_home / "state.db", home / "state.db")
    with StateStore.open(home) as store, store.unit_of_work() as uow:
        for s in range(SESSIONS):
            sid = uow.sessions.create(id=f"s{s}")
            uow.messages.append_many(
                sid,
                [
                    {"role": "user" if i % 2 else "assistant", "content": f"{s}/{i} " * 40}
                    for i in range(PER_SESSION)
                ],
            )
        uow.commit()
    damage.checkpoint_and_close(home / "state.db", module=MODULE)
    return home / "state.db"


@pytest.fixture
def source(big_source: Path, tmp_path: Path) -> Path:
    home = tmp_path / "damaged"
    home.mkdir(mode=0o700)
    shutil.copyfile(big_source, home / "state.db")
    return home / "state.db"


def _start(source: Path, output: Path) -> subprocess.Popen[str]:
    env = {**os.environ}
    env.pop("PYTHONPATH", None)
    return subprocess.Popen(
        [str(SCRIPT), "sessions", "salvage", "--source", str(source), "--output", str(output)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != "state.db")


def _interrupt_when_building(proc: subprocess.Popen[str], output: Path, sig: int) -> None:
    """Wait for the partial output of ``proc`` to appear, check the scratch copy's mode,
    then send ``sig``. Fails if the run ends before the partial file was seen."""
    partial = output.with_name(f".{output.name}.recover-{proc.pid}.partial")
    while not partial.exists():
        assert proc.poll() is None, "recover ended before it could be interrupted"
        assert not output.exists(), "the output appeared before its partial file"
        time.sleep(0.005)
    # Frozen while the test looks: on a busy machine the run could otherwise finish
    # between seeing its partial file and the signal (a stopped process gets ``sig``
    # when it continues; SIGKILL ends it at once).
    proc.send_signal(signal.SIGSTOP)
    try:
        assert partial.exists(), "recover finished before it could be interrupted"
        [scratch] = output.parent.glob("hermes-recover-*")
        copies = list(scratch.iterdir())
        assert copies and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in copies)
        proc.send_signal(sig)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_removes_the_partial_output_and_the_scratch_copy(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[str]], sig: int
) -> None:
    output = tmp_path / "recovered" / "state.db"
    proc = _start(source, output)
    processes.append(proc)
    _interrupt_when_building(proc, output, sig)
    _, err = proc.communicate()

    assert proc.returncode == 128 + sig
    [line] = [x for x in err.splitlines() if x.strip()]
    assert line.startswith("error: interrupted by") and "run the same command again" in line
    assert not output.exists()
    assert _leftovers(output.parent) == []

    again = _start(source, output)
    processes.append(again)
    _, err = again.communicate()
    assert again.returncode == 0, err
    _assert_complete(output)


def test_after_sigkill_the_next_run_removes_the_leftovers_and_succeeds(
    source: Path, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    output = tmp_path / "recovered" / "state.db"
    proc = _start(source, output)
    processes.append(proc)
    _interrupt_when_building(proc, output, signal.SIGKILL)
    proc.communicate()

    assert not output.exists()  # never an empty store at head that passes for the result
    left = _leftovers(output.parent)
    assert any(name.startswith(f".state.db.recover-{proc.pid}.partial") for name in left)
    assert f"hermes-recover-{proc.pid}-" in " ".join(left)

    again = _start(source, output)
    processes.append(again)
    _, err = again.communicate()
    assert again.returncode == 0, err
    assert _leftovers(output.parent) == []
    _assert_complete(output)


def _assert_complete(output: Path) -> None:
    con = MODULE.connect(f"{output.absolute().as_uri()}?mode=ro", uri=True)
    try:
        assert con.execute("SELECT count(*) FROM messages").fetchone()[0] == (
            SESSIONS * PER_SESSION
        )
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        con.close()


def test_the_output_is_never_written_over_an_existing_database_or_the_source(
    source: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other" / "state.db"
    other.parent.mkdir()
    shutil.copyfile(source, other)
    before = damage.file_digest(other)
    for target in (other, source, Path(f"{source}-wal"), Path(f"{source}-journal")):
        with pytest.raises(SalvageError, match=r"already exists|is the source|own files"):
            salvage(source, target)
    assert damage.file_digest(other) == before
    assert not Path(f"{source}-wal").exists() and not Path(f"{source}-journal").exists()
