"""A Hermes ``state.db`` whose JSON is nested past what the store keeps (or past Python's
parser) imports with each such value kept as text and a warning, never a traceback."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from hermes_repo import StateStore
from hermes_repo.codec import MAX_DEPTH

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hermes"
FIXTURE = FIXTURES / "hermes_state_v16-5e01a5d.db"


def test_deep_json_in_a_hermes_source_is_kept_as_text_with_a_warning(
    backend: str, store: StateStore, tmp_path: Path
) -> None:
    source = tmp_path / "hermes.db"
    shutil.copyfile(FIXTURE, source)
    # The source is a file the store never opens as its own: the standard library's
    # SQLite edits it, closed before the import reads it.
    con = sqlite3.connect(source)
    try:
        ids = [r[0] for r in con.execute("SELECT id FROM messages ORDER BY id LIMIT 4")]
        deep = ["[" * n + "]" * n for n in (5000, MAX_DEPTH + 1)]
        for mid, text in zip(ids[:2], deep, strict=True):
            con.execute("UPDATE messages SET tool_calls = ? WHERE id = ?", (text, mid))
        # Content kept as text keeps Hermes' NUL marker, which PostgreSQL text refuses.
        for mid, text in zip(ids[2:], deep if backend == "sqlite" else [], strict=False):
            con.execute("UPDATE messages SET content = ? WHERE id = ?", ("\x00json:" + text, mid))
        con.commit()
    finally:
        con.close()
    report = store.import_hermes_db(source)
    deep_warnings = [w for w in report.warnings if f"deeper than {MAX_DEPTH} levels" in w]
    assert len(deep_warnings) == (4 if backend == "sqlite" else 2)
    assert report.messages.imported == 200
