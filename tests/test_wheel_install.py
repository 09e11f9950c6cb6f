"""The built wheel works on its own: migrations inside it, console script, any folder.

The package is installed from a freshly built wheel (not the editable checkout) into a
new virtual environment, and `hermes-repo db upgrade` runs from an unrelated working
directory: this catches migrations missing from the wheel, imports that only resolve
from the source tree, and a broken entry point.
"""

from __future__ import annotations

import os
import site
import sqlite3
import subprocess
import sys
from pathlib import Path

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


def test_the_wheel_installs_and_upgrades_a_store_from_any_folder(tmp_path: Path) -> None:
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
