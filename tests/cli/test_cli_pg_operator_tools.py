"""Operator tools on a PostgreSQL store: the file operations refuse by name, the doctor
runs the server's checks, and the transcript repair works through the write core.

Every store here is a fresh database copied from the migrated template (``HERMES_REPO_URL``
is set for the CLI); faults are made for real on the server (a failed concurrent index
build, a counter changed by SQL).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from hermes_repo import NotOnThisBackendError, StateStore
from hermes_repo.maintenance.snapshots import create_snapshot, restore_snapshot
from hermes_repo.ops.repair import repair_store
from hermes_repo.ops.replace import replace_store
from tests.cli.conftest import Cli
from tests.support.pg import PgServer


@pytest.fixture
def pg_url(pg_server: PgServer, pg_template: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh store database, exported as HERMES_REPO_URL (for the CLI too)."""
    name = pg_server.new_name("ops")
    url = pg_server.create(name, template=pg_template).render_as_string(hide_password=False)
    monkeypatch.setenv("HERMES_REPO_URL", url)
    yield url
    pg_server.drop(name)


def _sql(url: str, statement: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(statement))
    finally:
        engine.dispose()


def _untouched(home: Path) -> None:
    made = sorted(p.name for p in home.iterdir()) if home.exists() else []
    assert "state.db" not in made and "state-snapshots" not in made, made


REFUSED = [
    (["snapshot", "create"], "pg_dump -Fc"),
    (["snapshot", "list"], "pg_dump -Fc"),
    (["snapshot", "restore", "20260101T000000Z", "--yes"], "pg_restore -d NEW_DATABASE"),
    (["db", "replace", "{file}"], "pg_restore -d NEW_DATABASE"),
    (["sessions", "salvage", "--source", "{file}", "--inspect-only"], "server's own backups"),
]


@pytest.mark.parametrize(("args", "tool"), REFUSED, ids=[" ".join(a[:2]) for a, _ in REFUSED])
def test_a_file_operation_on_a_postgresql_store_exits_1_naming_the_server_tool(
    cli: Cli, tmp_path: Path, pg_url: str, args: list[str], tool: str
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    other = tmp_path / "other.db"
    other.write_bytes(b"SQLite format 3\x00" + bytes(4080))
    result = cli("--home", home, *(a.format(file=other) for a in args))
    assert result.code == 1, result.stdout + result.stderr
    (line,) = result.error_lines
    assert line.startswith("error: ") and "applies to SQLite stores" in line
    assert tool in line and "nothing was done" in line
    _untouched(home)


def test_rebuild_search_on_postgresql_names_reindex_of_each_search_index(
    cli: Cli, tmp_path: Path, pg_url: str
) -> None:
    result = cli("--home", tmp_path, "sessions", "repair", "--rebuild-search")
    assert result.code == 1
    (line,) = result.error_lines
    for index in ("ix_messages_search_vector", "ix_messages_search_trgm"):
        assert f"REINDEX INDEX CONCURRENTLY {index}" in line
    _untouched(tmp_path)


def test_the_library_functions_refuse_a_postgresql_store_before_touching_home(
    tmp_path: Path, pg_url: str
) -> None:
    calls = [
        lambda: create_snapshot(tmp_path),
        lambda: restore_snapshot(tmp_path, "20260101T000000Z"),
        lambda: replace_store(tmp_path, tmp_path / "new.db"),
        lambda: repair_store(tmp_path, rebuild_search=True),
        lambda: create_snapshot(tmp_path, url=pg_url),
    ]
    for call in calls:
        with pytest.raises(NotOnThisBackendError, match="PostgreSQL"):
            call()
    _untouched(tmp_path)


def test_url_sqlite_keeps_the_file_operations_on_the_file(tmp_path: Path, pg_url: str) -> None:
    StateStore.open(tmp_path, url="sqlite").close()
    snap = create_snapshot(tmp_path, url="sqlite", label="on-the-file")
    assert snap.label == "on-the-file"


def test_doctor_on_a_healthy_server_reports_its_checks_and_no_file_checks(
    cli: Cli, tmp_path: Path, pg_url: str
) -> None:
    result = cli("--home", tmp_path, "doctor", "--json")
    assert result.code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["healthy"] and report["findings"] == []
    assert set(report) >= {"server", "schema", "indexes", "store", "spool"}
    assert not set(report) & {"header", "fts", "quick_check", "snapshots", "holders"}
    assert report["schema"]["at_head"] and report["schema"]["drift"] is None
    assert report["server"]["server_version"]
    assert "ix_messages_search_vector" in report["indexes"]["valid"]
    assert report["indexes"]["extensions"] == {"pg_trgm": True, "unaccent": True}
    _untouched(tmp_path)


def _session_with(url: str, home: Path, messages: list[dict[str, str]]) -> str:
    with StateStore.open(home, url=url) as store:
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli")
            uow.commit()
        for message in messages:
            store.append_message(sid, message)
    return sid


def test_doctor_finds_an_index_left_invalid_by_a_failed_concurrent_build(
    cli: Cli, tmp_path: Path, pg_url: str
) -> None:
    _session_with(pg_url, tmp_path, [{"role": "user", "content": "a"}] * 2)
    with pytest.raises(Exception, match="could not create unique index"):
        _sql(pg_url, "CREATE UNIQUE INDEX CONCURRENTLY ix_messages_role_once ON messages (role)")
    result = cli("--home", tmp_path, "doctor", "--json")
    assert result.code == 1
    findings = {f["code"]: f for f in json.loads(result.stdout)["findings"]}
    assert set(findings) <= {"index-invalid", "schema-drift"}  # the index is not ours
    finding = findings["index-invalid"]
    assert "ix_messages_role_once" in finding["summary"]
    assert "REINDEX INDEX CONCURRENTLY ix_messages_role_once" in finding["fix"]


def test_doctor_finds_a_session_counter_that_disagrees_and_its_fix_recounts(
    cli: Cli, tmp_path: Path, pg_url: str
) -> None:
    sid = _session_with(pg_url, tmp_path, [{"role": "user", "content": "a"}])
    _sql(pg_url, f"UPDATE sessions SET message_count = 7 WHERE id = '{sid}'")
    result = cli("--home", tmp_path, "doctor", "--json")
    assert result.code == 1
    (finding,) = json.loads(result.stdout)["findings"]
    assert finding["code"] == "counter-drift" and finding["severity"] == "warning"
    statement = re.search(r"-c '([^']+)'", finding["fix"])
    assert statement is not None
    _sql(pg_url, statement.group(1))
    assert cli("--home", tmp_path, "doctor").code == 0


def test_doctor_on_a_server_reports_pending_spool_files_with_the_url_command(
    cli: Cli, tmp_path: Path, pg_url: str
) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    record = {"role": "user", "content": "queued", "uid": "u1", "timestamp": 1.0}
    (sessions / "s1.pending.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    result = cli("--home", tmp_path, "doctor", "--json")
    assert result.code == 1
    (finding,) = json.loads(result.stdout)["findings"]
    # An older version's record names no store: a server replays it only when adopted.
    assert finding["code"] == "pending-of-unknown-store"
    assert '--url "$HERMES_REPO_URL" pending replay --adopt legacy' in finding["fix"]


def test_doctor_names_a_server_that_is_down_and_still_reports_the_spool(
    cli: Cli, tmp_path: Path, pg_url: str
) -> None:
    down = re.sub(r"@([^/:]+):\d+/", r"@\1:1/", pg_url)  # nothing listens on port 1
    result = cli("--home", tmp_path, "--url", down, "doctor", "--json")
    assert result.code == 1
    report = json.loads(result.stdout)
    assert [f["code"] for f in report["findings"]] == ["server-unreachable"]
    assert "spool" in report and "schema" not in report


def test_sessions_repair_on_postgresql_archives_an_orphan_tool_result_without_backups(
    cli: Cli, tmp_path: Path, pg_url: str
) -> None:
    sid = _session_with(
        pg_url,
        tmp_path,
        [
            {"role": "user", "content": "hi"},
            {"role": "tool", "content": "lost", "tool_call_id": "never-called"},
            {"role": "assistant", "content": "ok"},
        ],
    )
    check = cli("--home", tmp_path, "sessions", "repair", "--check-only", "--json")
    assert json.loads(check.stdout)["sessions_violating"] == 1
    result = cli("--home", tmp_path, "sessions", "repair", "--json")
    assert result.code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["backend"] == "postgresql"
    assert report["sessions_repaired"] == 1 and report["backup"] is None
    assert report["snapshot"] is None
    with StateStore.open(tmp_path, url=pg_url) as store:
        replay = [m["role"] for m in store.load_conversation(sid).messages]
        audit = store.load_conversation(sid, include_inactive=True).messages
        assert store.get_session(sid).message_count == 2
    assert replay == ["user", "assistant"]
    assert [m.get("archive_reason") is not None for m in audit] == [False, True, False]
    _untouched(tmp_path)
