"""The docs a newcomer reads name only tests that exist.

A guarantee "proven by" a test that was renamed or removed is a claim nobody checks:
every ``tests/...py`` path and every ``test_...`` name in these documents must be found
in the test tree. (reliability.md and architecture.md are checked by their owner's own
review; a stale name found there is reported, not fixed, by this test's author.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = (
    "README.md",
    "docs/start-here.md",
    "docs/performance.md",
    "docs/search.md",
    "docs/reliability.md",
    "docs/architecture.md",
)
_PATH = re.compile(r"\btests/[\w/]+\.py\b")
_NAME = re.compile(r"\b(test_\w+)\b")
# The OpenAI Agents SDK's own session tests, fetched from its sdist by framework_tests/.
_UPSTREAM = {"tests/memory/test_session.py", "test_session", "test_session_limit"}
# SQLite's own sources named by reliability.md (test_syscall.c: the fault hooks used).
_SQLITE_SOURCES = {"test_syscall"}


def _defined_tests() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        names.update(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M))
    return names


@pytest.mark.parametrize("doc", DOCS)
def test_every_test_a_doc_names_exists(doc: str) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    defined = _defined_tests()
    missing_paths = sorted({p for p in _PATH.findall(text) if not (ROOT / p).is_file()} - _UPSTREAM)
    # A name that is a file (test_wheel_install) is a module, checked as a path above.
    missing_names = sorted(
        {n for n in _NAME.findall(text) if n not in defined}
        - {p.stem for p in (ROOT / "tests").rglob("test_*.py")}
        - _UPSTREAM
        - _SQLITE_SOURCES
    )
    assert (missing_paths, missing_names) == ([], [])
