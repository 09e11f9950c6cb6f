"""A Hermes state.db in rollback-journal mode (Hermes' fallback on network and FUSE
filesystems) left with a hot journal by a Hermes killed mid-commit: read as SQLite reads
it, the uncommitted transaction rolled back in a private copy, the source untouched."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hermes_repo import StateStore

hermes_state = pytest.importorskip(
    "hermes_state",
    reason="hermes-agent is not installed: pip install --no-deps hermes-agent==0.19.0",
)

pytestmark = pytest.mark.usefixtures("backend")

# A writer killed in the middle of a transaction too big for its page cache: SQLite has
# already written changed pages into the file, their originals are in the -journal.
_KILLED_MID_COMMIT = textwrap.dedent(
    """
    import os, sqlite3, sys
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("PRAGMA cache_size = 2")
    conn.execute("BEGIN IMMEDIATE")
    for i in range(300):
        conn.execute(
            "INSERT INTO messages (session_id, role, content, timestamp) "
            "VALUES ('s1', 'user', ?, 1772000000.0)",
            ("never committed " + "x" * 2000,),
        )
    os._exit(0)
    """
)


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_hot_journal_is_rolled_back_in_a_private_copy_and_the_source_left_as_it_was(
    store: StateStore, tmp_path: Path
) -> None:
    src = tmp_path / "hermes" / "state.db"
    src.parent.mkdir()
    db = hermes_state.SessionDB(db_path=src)
    try:
        db.create_session("s1", "cli")
        for i in range(3):
            db.append_message("s1", "user" if i % 2 == 0 else "assistant", f"committed {i}")
    finally:
        db.close()
    conn = sqlite3.connect(src)
    assert conn.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    conn.close()
    subprocess.run([sys.executable, "-c", _KILLED_MID_COMMIT, str(src)], check=True)
    journal = src.with_name("state.db-journal")
    assert journal.stat().st_size > 0  # hot: the killed writer's originals
    before = _digest(src.parent)

    report = store.import_hermes_db(src)

    assert _digest(src.parent) == before  # neither the file nor its journal touched
    assert report.messages.imported == report.messages.read == 3
    contents = [m["content"] for m in store.load_conversation("s1").messages]
    assert contents == ["committed 0", "committed 1", "committed 2"]

    # Hermes opens the file (SQLite rolls the journal back) and writes a real message
    # under the row id the rolled-back transaction had used: the next import takes it.
    db = hermes_state.SessionDB(db_path=src)
    try:
        db.append_message("s1", "assistant", "the real fourth message")
    finally:
        db.close()
    again = store.import_hermes_db(src)
    assert again.messages.imported == 1
    assert store.load_conversation("s1").messages[-1]["content"] == "the real fourth message"
