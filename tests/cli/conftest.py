"""Fixtures for driving the real ``hermes-repo`` console script in a subprocess."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
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


def run_cli(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> Result:
    """Run ``hermes-repo ARGS`` (the installed script) and capture its output."""
    if not SCRIPT.exists():
        pytest.fail(f"the console script is not installed next to {sys.executable}")
    # COLUMNS is wide so table cells are not folded in assertions.
    environ = {**os.environ, "COLUMNS": "200", **(env or {})}
    environ.pop("PYTHONPATH", None)
    args = _naming_the_server(args, env)
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
def cli(tmp_path: Path) -> Cli:
    """``cli(*args, env=None)`` runs the console script from a scratch folder, so nothing
    depends on the working directory being the repository."""
    workdir = tmp_path / "cwd"
    workdir.mkdir(exist_ok=True)

    def run(*args: str | Path, env: dict[str, str] | None = None) -> Result:
        return run_cli(*args, cwd=workdir, env=env)

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
