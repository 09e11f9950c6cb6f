"""The import/export library API (hermes_repo.transfer) against the CLI, on real stores.

What a program gets from ``import_jsonl`` / ``export_session`` / ``list_sessions`` /
``get_session`` must be exactly what ``hermes-repo`` prints, since the commands are
thin layers over the same calls.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from hermes_repo import (
    HermesRepoError,
    ImportReport,
    JsonlImportError,
    NotFoundError,
    SessionInfo,
    StateStore,
    UnsafePathError,
)
from hermes_repo.maintenance.snapshots import SNAPSHOT_DIR
from hermes_repo.transfer import (
    export_session,
    import_jsonl,
    read_export,
    refuse_store_targets,
    write_export,
)
from tests.cli.conftest import run_cli

# The public API these tests prove runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("backend")

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "sample_sessions.jsonl"


def _cli(home: Path, *args: str) -> str:
    """stdout of ``hermes-repo --home HOME ARGS``, run in this process (on a PostgreSQL
    run with the server's --url, as a user names it beside --home)."""
    result = run_cli("--home", home, *args, cwd=home)
    assert result.code == 0, result.stderr
    return result.stdout


def _sample_ids() -> list[str]:
    ids = []
    for line in SAMPLES.read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            if "session" in obj:
                ids.append(obj["session"]["id"])
    return ids


def test_import_then_export_matches_the_cli(home: Path, store: StateStore) -> None:
    seen: list[tuple[int, int]] = []
    report = import_jsonl(
        store, SAMPLES, progress=lambda done, total, _r: seen.append((done, total))
    )
    ids = _sample_ids()
    assert isinstance(report, ImportReport)
    assert report.sessions_created == len(ids) and report.sessions_reused == 0
    assert report.messages_inserted > 0 and report.messages_skipped == 0
    size = SAMPLES.stat().st_size
    assert seen and seen[-1] == (size, size)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)

    for sid in ids:
        replay = store.load_conversation(sid).messages
        for fmt in ("jsonl", "markdown"):
            text = export_session(store, sid, fmt)
            assert text == _cli(home, "sessions", "export", sid, "--format", fmt)
            assert store.export_session(sid, fmt) == text
        lines = export_session(store, sid).splitlines()
        assert [json.loads(line) for line in lines] == replay


def test_reimport_through_the_store_adds_nothing(store: StateStore) -> None:
    first = store.import_jsonl(SAMPLES)
    again = store.import_jsonl(SAMPLES)
    assert again.sessions_created == 0 and again.sessions_reused == first.sessions_created
    assert again.messages_inserted == 0
    assert again.messages_skipped == first.messages_inserted


def test_list_and_get_agree_with_the_cli(home: Path, store: StateStore) -> None:
    store.import_jsonl(SAMPLES)
    listed = store.list_sessions()
    assert all(isinstance(info, SessionInfo) for info in listed)
    assert [info.as_dict() for info in listed] == json.loads(
        _cli(home, "sessions", "list", "--json")
    )
    assert [info.as_dict() for info in store.list_sessions(limit=2, source="telegram")] == (
        json.loads(_cli(home, "sessions", "list", "--json", "--limit", "2", "--source", "telegram"))
    )
    started = [info.started_at for info in listed]
    assert started == sorted(started, reverse=True)
    assert [i.id for i in store.list_sessions(limit=1, offset=1)] == [listed[1].id]
    for info in listed:
        assert store.get_session(info.id) == info
        shown = json.loads(_cli(home, "sessions", "show", info.id, "--json"))
        assert shown["session"] == info.as_dict()


def test_a_missing_session_raises_not_found(store: StateStore) -> None:
    with pytest.raises(NotFoundError, match="sessions list"):
        store.get_session("no-such-session")
    with pytest.raises(NotFoundError, match="does not exist"):
        export_session(store, "no-such-session")
    with pytest.raises(NotFoundError):
        store.export_session("no-such-session", "markdown")


def test_an_unknown_format_is_refused_with_the_choices(store: StateStore) -> None:
    store.import_jsonl(SAMPLES)
    with pytest.raises(HermesRepoError, match="jsonl, markdown"):
        export_session(store, _sample_ids()[0], "html")


def test_a_bad_line_names_file_line_cause_and_fix(tmp_path: Path, store: StateStore) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"session": {"id": "ok-1"}}\n'
        '{"session_id": "ok-1", "message": {"role": "user", "content": "hi"}}\n'
        '{"session": {"id": "bad-1"}}\n'
        '{"session_id": "bad-1", "message": {"role": "robot", "content": "x"}}\n',
        encoding="utf-8",
    )
    with pytest.raises(JsonlImportError) as caught:
        import_jsonl(store, path)
    err = caught.value
    assert err.line == 4 and err.path == str(path)
    assert str(err).startswith(f"{path}:4: ")
    assert "fix that line and run the same import again" in str(err)
    assert "session 'bad-1' was not imported" in str(err)
    assert err.report.sessions_created == 1 and err.report.messages_inserted == 1
    assert [i.id for i in store.list_sessions()] == ["ok-1"]


def test_write_export_is_private_and_refuses_store_files(home: Path, store: StateStore) -> None:
    store.import_jsonl(SAMPLES)
    sid = _sample_ids()[0]
    export = read_export(store, sid, "markdown")
    out = home.parent / "transcript.md"
    write_export(export, out, home=home)
    assert out.read_text(encoding="utf-8") == export.text()
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert not [p for p in out.parent.iterdir() if p.name.endswith(".tmp")]
    before = (home / "state.db").read_bytes()[:100]
    for target in (home / "state.db", home / "state.db-wal", home / "sessions" / "x.md"):
        with pytest.raises(UnsafePathError, match="choose another file for -o"):
            write_export(export, target, home=home)
    # The snapshot folder's name is restated below ops: this pins it to the real one.
    with pytest.raises(UnsafePathError, match=f"inside the store's {SNAPSHOT_DIR}/ folder"):
        refuse_store_targets(home / SNAPSHOT_DIR / "x.md", home)
    assert (home / "state.db").read_bytes()[:100] == before
