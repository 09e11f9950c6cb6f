"""The built wheel works on its own: migrations inside it, console script, any folder,
and the type information its users' type checkers read.

The package is installed from a freshly built wheel (not the editable checkout) into a
new virtual environment, and `hermes-repo db upgrade` runs from an unrelated working
directory: this catches migrations missing from the wheel, imports that only resolve
from the source tree, and a broken entry point. mypy then checks a user's script against
the installed wheel: without `py.typed` it would see `StateStore` as Any.
"""

from __future__ import annotations

import os
import re
import site
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_repo.schema import migrate

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"{args}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def make_venv(path: Path, cwd: Path) -> Path:
    """A venv that sees the test interpreter's dependencies but not its hermes_repo."""
    # --system-site-packages gives the base interpreter's packages; when the tests run
    # from a venv, its site-packages (SQLAlchemy, alembic...) is added by a .pth file.
    # A .pth line adds a folder but does not run the .pth files inside it, so the
    # editable install of hermes_repo living there stays invisible to the new venv.
    run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", path, cwd=cwd)
    purelib = Path(
        run(
            path / "bin" / "python",
            "-c",
            "import sysconfig; print(sysconfig.get_path('purelib'))",
            cwd=cwd,
        ).strip()
    )
    if sys.prefix != sys.base_prefix:
        (purelib / "_test_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return path / "bin" / "python"


def install_wheel(tmp_path: Path) -> tuple[Path, Path]:
    """A new venv holding the wheel built from this checkout, and an unrelated folder."""
    wheels = tmp_path / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, ROOT, cwd=ROOT)
    (wheel,) = wheels.glob("hermes_repo-*.whl")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    venv = tmp_path / "venv"
    python = make_venv(venv, elsewhere)
    run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        "-q",
        wheel,
        cwd=elsewhere,
    )
    return venv, elsewhere


def test_the_wheel_installs_and_upgrades_a_store_from_any_folder(tmp_path: Path) -> None:
    venv, elsewhere = install_wheel(tmp_path)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    installed_at = run(
        python, "-c", "import hermes_repo; print(hermes_repo.__file__)", cwd=elsewhere, env=env
    )
    assert Path(installed_at.strip()).resolve().is_relative_to(venv.resolve())

    home = tmp_path / "home"
    run(venv / "bin" / "hermes-repo", "--home", home, "db", "upgrade", cwd=elsewhere, env=env)

    conn = sqlite3.connect(home / "state.db")
    try:
        (revision,) = conn.execute("SELECT version_num FROM alembic_version").fetchone()
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    assert revision == migrate.head_revision()
    assert {"sessions", "messages", "state_meta", "messages_fts"} <= tables


_USER_SCRIPT = """\
from hermes_repo import StateStore

with StateStore.open("home") as store:
    reveal_type(store)
    reveal_type(store.search("words"))
    revision: int = store.health().revision  # a str or None: the one error to report
"""


def test_the_installed_wheel_is_typed_for_its_users(tmp_path: Path) -> None:
    pytest.importorskip("mypy", reason="mypy comes with the dev extra: pip install -e '.[dev]'")
    venv, elsewhere = install_wheel(tmp_path)
    script = elsewhere / "user_script.py"
    script.write_text(_USER_SCRIPT)
    # The test run's mypy, told to resolve imports as the new venv's Python does: it finds
    # hermes_repo only in the installed wheel (the checkout is not on that path).
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
         "--python-executable", str(venv / "bin" / "python"), script.name],
        cwd=elsewhere,
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    out = proc.stdout
    assert 'Revealed type is "hermes_repo.store.StateStore"' in out, out
    hits = r'Revealed type is "(builtins\.)?list\[hermes_repo\.[\w.]*SearchHit\]"'
    assert re.search(hits, out), out
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "[assignment]" in errors[0], out
    assert proc.returncode == 1, out
