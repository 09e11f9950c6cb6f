"""Fixtures for driving the ``hermes-repo`` command.

``cli`` runs the command in this process through click's test runner (the same
``main`` group the console script calls, with its own environment, working folder and
streams): a subprocess costs a Python start-up and the imports, ~100 times the command
itself. Tests that must prove the real console script (its exit codes as a shell sees
them, signals, a second process holding the store, stdin, the interpreter's own start)
ask for it with ``@pytest.mark.subprocess_cli``, and ``HERMES_TEST_CLI=subprocess`` runs
every CLI test that way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "sample_sessions.jsonl"
SCRIPT = Path(sys.executable).parent / "hermes-repo"


@dataclass(frozen=True)
class Result:
    """What one run of the console script did."""

    code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


Cli = Callable[..., Result]


#: ``HERMES_TEST_CLI=subprocess``: every CLI test runs the installed console script.
ALWAYS_SUBPROCESS = os.environ.get("HERMES_TEST_CLI") == "subprocess"


@contextlib.contextmanager
def _working_folder(cwd: Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(before)


def run_cli_in_process(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """Run the ``hermes-repo`` group in this process (click's runner) from ``cwd``."""
    from click.testing import CliRunner

    from hermes_repo.cli import main

    environ = {"COLUMNS": "200", **(env or {})}
    runner = CliRunner()
    with _working_folder(cwd):
        result = runner.invoke(main, [str(a) for a in args], env=environ, prog_name="hermes-repo")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        # What the interpreter would print for an uncaught exception (tests look for it).
        stderr += "Traceback (most recent call last):\n" + "".join(
            traceback.format_exception(result.exception)
        )
        return Result(1, result.stdout, stderr)
    return Result(result.exit_code, result.stdout, stderr)


def run_cli(
    *args: str | Path,
    cwd: Path,
    env: dict[str, str] | None = None,
    subprocess_only: bool = False,
) -> Result:
    """Run ``hermes-repo ARGS`` and capture its output: in this process, or with
    ``subprocess_only`` (or ``HERMES_TEST_CLI=subprocess``) the installed script."""
    args = _naming_the_server(args, env)
    if not (subprocess_only or ALWAYS_SUBPROCESS):
        return run_cli_in_process(*args, cwd=cwd, env=env)
    return run_script(*args, cwd=cwd, env=env)


def run_script(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """Run ``hermes-repo ARGS`` (the installed script) in a subprocess."""
    if not SCRIPT.exists():
        pytest.fail(f"the console script is not installed next to {sys.executable}")
    # COLUMNS is wide so table cells are not folded in assertions.
    environ = {**os.environ, "COLUMNS": "200", **(env or {})}
    environ.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def _naming_the_server(
    args: tuple[str | Path, ...], env: dict[str, str] | None
) -> tuple[str | Path, ...]:
    """On a PostgreSQL run the suite exports HERMES_REPO_URL (the store under test); a
    command line that names --home then also says it means that server, as a user must
    (--home with the variable alone is refused as ambiguous). A test that sets the
    variable itself (``env``) runs exactly what it wrote."""
    url = os.environ.get("HERMES_REPO_URL", "").strip()
    if not url or "HERMES_REPO_URL" in (env or {}) or "--url" in map(str, args):
        return args
    if "--home" not in map(str, args):
        return args
    return ("--url", url, *args)


def run_cli_from_root(*args: str | Path) -> Result:
    """``run_cli`` from the file system's root: no relative path can resolve by chance."""
    return run_cli(*args, cwd=Path(os.sep))


@pytest.fixture
def cli(tmp_path: Path, request: pytest.FixtureRequest) -> Cli:
    """``cli(*args, env=None)`` runs the command from a scratch folder, so nothing
    depends on the working directory being the repository (in this process unless the
    test is marked ``subprocess_cli``)."""
    workdir = tmp_path / "cwd"
    workdir.mkdir(exist_ok=True)
    real = request.node.get_closest_marker("subprocess_cli") is not None

    def run(*args: str | Path, env: dict[str, str] | None = None) -> Result:
        return run_cli(*args, cwd=workdir, env=env, subprocess_only=real)

    return run


@pytest.fixture
def imported_home(home: Path, cli: Cli) -> Path:
    """A migrated store with the shipped samples imported through the CLI (per test)."""
    result = cli("--home", home, "import", SAMPLES)
    assert result.code == 0, result.stderr
    return home


@pytest.fixture(scope="session")
def shared_home(tmp_path_factory: pytest.TempPathFactory, template_home: Path) -> Path:
    """The samples imported once for the whole run: only for tests that never write."""
    home = tmp_path_factory.mktemp("shared-cli-home")
    shutil.copyfile(template_home / "state.db", home / "state.db")
    result = run_cli("--home", home, "import", SAMPLES, cwd=home)
    assert result.code == 0, result.stderr
    return home
