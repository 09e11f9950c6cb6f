"""The README's framework examples run as they are printed, on a fresh store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_repo import StateStore

README = Path(__file__).resolve().parents[2] / "README.md"


def _examples() -> dict[str, str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Memory for agent frameworks", 1)[1].split("\n## ", 1)[0]
    found: dict[str, str] = {}
    for part in section.split("\n### ")[1:]:
        title = part.splitlines()[0].strip()
        blocks = re.findall(r"```python\n(.*?)```", part, flags=re.S)
        if blocks:
            found[title] = blocks[0]
    return found


def test_every_framework_has_a_runnable_example() -> None:
    assert set(_examples()) >= {"OpenAI Agents SDK", "pydantic-ai", "LangGraph"}


@pytest.mark.parametrize("framework", sorted(_examples()))
def test_the_readme_example_runs_on_a_fresh_store(framework: str, tmp_path: Path) -> None:
    env = {**os.environ, "HERMES_HOME": str(tmp_path / "home")}
    env.pop("HERMES_REPO_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", _examples()[framework]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # What it saved is an ordinary session of the default store: the hermes-repo
    # folder inside HERMES_HOME.
    with StateStore.open(tmp_path / "home" / "hermes-repo") as store:
        sessions = store.list_sessions()
        assert sessions, done.stdout
        assert all(
            store.search(word) for word in re.findall(r"[\u3040-\u30ff]{2,}", done.stdout)[:1]
        )
