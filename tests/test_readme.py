"""Every code block of the README runs as written, in a fresh venv.

The blocks are read from README.md itself, so an example that stops working (a session
id the samples do not hold, a command that is not on PATH, a fragment without its
imports) fails here. Each runs in a new virtual environment holding the wheel built from
this checkout, its ``bin`` first on PATH (what `. .venv/bin/activate` gives: `.venv` in
the working folder is that venv), with a scratch ``HOME`` and ``HERMES_HOME=~/.hermes``,
from a folder laid out like the checkout's root (``samples/``, ``alembic.ini``,
``migrations/``). Every block but the quick start finds the quick start done: the
samples imported into the default store.

What the fixture does instead of the block: creating `.venv` and `pip install .` (or an
extra, `'.[name]'`): the venv is built offline from the wheel, with the test run's
dependencies. A block needing a PostgreSQL server runs on a fresh database of
``HERMES_TEST_PG_URL`` (its example URLs replaced by that one; skipped without a
server, failed when ``HERMES_TEST_REQUIRE_PG=1``); one needing an extra that is not
installed is skipped, naming it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.pg import PgServer
from tests.test_wheel_install import make_venv, run

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

_FENCE = re.compile(r"^```(?P<lang>\w+)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)
_PG_URL = re.compile(r"postgresql\+psycopg://\w[^\s'\"`]+")
# Steps the fixture has taken (see the module docstring), dropped from a shell block.
_INSTALL_STEP = re.compile(
    r"^(?:python3 -m venv \.venv|pip install (?:\.|'\.\[(?P<extra>[\w-]+)\]'))$"
)
# The module each extra brings, to know whether the fresh venv has it.
_EXTRA_MODULE = {"postgresql": "psycopg", "openai-agents": "agents", "pydantic-ai": "pydantic_ai"}
_FRAMEWORK_MODULE = {
    "hermes_repo.integrations.openai_agents": "agents",
    "hermes_repo.integrations.pydantic_ai": "pydantic_ai",
}

# Blocks that cannot run here, each with its reason (matched by a line of the block).
_NOT_RUN = {
    "python -m pytest": "runs the whole test suite, this test included",
}


@dataclass(frozen=True)
class Block:
    """One fenced code block of the README."""

    line: int
    lang: str
    code: str

    @property
    def id(self) -> str:
        first = self.code.strip().splitlines()[0]
        return f"L{self.line}-{self.lang}-{re.sub(r'[^A-Za-z0-9]+', '-', first)[:40]}"


def readme_blocks() -> list[Block]:
    text = README.read_text(encoding="utf-8")
    return [
        Block(text.count("\n", 0, m.start()) + 1, m["lang"], m["code"])
        for m in _FENCE.finditer(text)
    ]


BLOCKS = readme_blocks()


def test_the_readme_has_the_blocks_this_test_runs() -> None:
    # Guards the extraction: were the fence pattern wrong, every block test would vanish.
    langs = [b.lang for b in BLOCKS]
    assert langs.count("python") >= 4 and langs.count("sh") >= 3, langs
    assert {b.lang for b in BLOCKS} <= {"sh", "bash", "python", "json"}


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding the wheel of this checkout (dependencies from the test run)."""
    base = tmp_path_factory.mktemp("readme-venv")
    wheels = base / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, ROOT, cwd=ROOT)
    (wheel,) = wheels.glob("hermes_repo-*.whl")
    venv = base / "venv"
    python = make_venv(venv, base)
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
        "-q", wheel, cwd=base)  # fmt: skip
    return venv


def _has_module(venv: Path, module: str) -> bool:
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([venv / "bin" / "python", "-c", probe], check=False).returncode == 0


def _shell_script(code: str) -> tuple[str, set[str]]:
    """The block without the install steps the fixture took, and the extras they named."""
    extras: set[str] = set()
    lines = []
    for line in code.splitlines():
        kept = []
        for step in line.split(" && "):
            command = step.split("#", 1)[0].strip()
            match = _INSTALL_STEP.match(command)
            if match is None:
                kept.append(step)
            elif match["extra"]:
                extras.add(match["extra"])
        if kept:
            lines.append(" && ".join(kept))
    return "\n".join(lines) + "\n", extras


@pytest.mark.parametrize(
    "block",
    # A block naming a PostgreSQL URL runs on a fresh database of the test server.
    [pytest.param(b, marks=[pytest.mark.pg] if _PG_URL.search(b.code) else []) for b in BLOCKS],
    ids=lambda b: b.id,
)
def test_readme_block_runs_as_written(
    block: Block, fresh_venv: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    for marker, why in _NOT_RUN.items():
        if any(line.strip().startswith(marker) for line in block.code.splitlines()):
            pytest.skip(f"README line {block.line}: {why}")

    work = tmp_path / "checkout"
    work.mkdir()
    shutil.copytree(ROOT / "samples", work / "samples")
    shutil.copytree(ROOT / "migrations", work / "migrations")
    shutil.copy(ROOT / "alembic.ini", work / "alembic.ini")
    (work / ".venv").symlink_to(fresh_venv, target_is_directory=True)
    home = tmp_path / "user"
    home.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith("HERMES_")
    }
    # The fresh venv first; then the test run's own bin, for `alembic`, whose console
    # script a --no-deps install does not write.
    env["PATH"] = os.pathsep.join(
        [str(fresh_venv / "bin"), str(Path(sys.executable).parent), env.get("PATH", "")]
    )
    env.update(HOME=str(home), HERMES_HOME=str(home / ".hermes"), COLUMNS="120")

    code = block.code
    if _PG_URL.search(code):
        server: PgServer = request.getfixturevalue("pg_server")
        name = server.new_name("readme")
        url = server.create(name).render_as_string(hide_password=False)
        request.addfinalizer(lambda: server.drop(name))
        code = _PG_URL.sub(url, code)

    needs = {m for prefix, m in _FRAMEWORK_MODULE.items() if f"from {prefix} import" in code}
    if block.lang in ("sh", "bash"):
        script, extras = _shell_script(code)
        needs |= {_EXTRA_MODULE[e] for e in extras}
    missing = sorted(m for m in needs if not _has_module(fresh_venv, m))
    if missing:
        pytest.skip(f"README line {block.line}: needs {', '.join(missing)}, not installed here")

    if "~/.hermes/state.db" in code:
        # A Hermes Agent user's machine: Hermes' own store, written by its own code.
        _hermes_state_db(home / ".hermes")
    if "quick start" not in _section_of(block):
        # Every later example starts where the quick start left the user.
        run(fresh_venv / "bin" / "hermes-repo", "import", work / "samples" /
            "sample_sessions.jsonl", cwd=work, env=env)  # fmt: skip

    if block.lang in ("sh", "bash"):
        argv = ["bash", "-e", "-c", script]
    elif block.lang == "python":
        source = work / f"readme_line_{block.line}.py"
        source.write_text(code, encoding="utf-8")
        argv = [str(fresh_venv / "bin" / "python"), str(source)]
    else:  # json: the import format's example, imported as a file of its own
        source = work / "example.jsonl"
        source.write_text(code, encoding="utf-8")
        argv = [str(fresh_venv / "bin" / "hermes-repo"), "import", str(source)]
    done = subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, (
        f"README line {block.line} ({block.lang}) failed with exit {done.returncode}\n"
        f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )


def _hermes_state_db(folder: Path) -> None:
    """``folder/state.db`` as Hermes Agent 0.19.0 writes it (its ``SessionDB``)."""
    hermes_state = pytest.importorskip(
        "hermes_state", reason="Hermes Agent (pip install --no-deps hermes-agent) builds it"
    )
    folder.mkdir(parents=True, exist_ok=True)
    db = hermes_state.SessionDB(db_path=folder / "state.db")
    try:
        db.create_session("20260401_090000_aaaaaa", "cli", model="claude-sonnet-4")
        db.append_message("20260401_090000_aaaaaa", "user", "deploy the checkpoint please")
    finally:
        db.close()


def _section_of(block: Block) -> str:
    """The title of the README section holding ``block``, lower case."""
    above = README.read_text(encoding="utf-8").splitlines()[: block.line]
    titles = [line.lstrip("#").strip() for line in above if line.startswith("## ")]
    return titles[-1].lower() if titles else ""
