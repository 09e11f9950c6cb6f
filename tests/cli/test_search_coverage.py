"""A partial full-text index is damage: the doctor reports it, a repair rebuilds it.

FTS5's own ``'integrity-check'`` (even with rank 1) and ``PRAGMA integrity_check`` pass
when rows of an index's ``_idx`` shadow table (the b-tree that leads a term lookup to
its leaf page) are deleted; every term on the pages those rows led to is then silently
unfindable. These tests produce exactly that damage on a real store.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hermes_repo import MAX_SEARCH_LIMIT, StateStore
from hermes_repo.engine import select_driver
from hermes_repo.ops.doctor import diagnose
from hermes_repo.schema import fts
from tests.support import damage

Cli = Callable[..., Any]

WORD = "zebracorn"
HITS = 3380
_FILLER = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "omicron",
    "sigma",
]


def _fill(home: Path, rows: int = HITS) -> None:
    """``rows`` messages holding WORD, in many transactions (many index segments)."""
    with StateStore.open(home) as store:
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli")
            uow.commit()
        for start in range(0, rows, 400):
            batch = []
            for i in range(start, min(rows, start + 400)):
                words = [_FILLER[(i * 7 + k) % len(_FILLER)] + str(i % 97 + k) for k in range(9)]
                words.insert(i % 9, WORD)
                batch.append({"role": "user" if i % 2 else "assistant", "content": " ".join(words)})
            with store.unit_of_work() as uow:
                uow.messages.append_many(sid, batch)
                uow.commit()


def _delete_term_btree_rows(home: Path, index: str = "messages_fts") -> int:
    """Delete every `_idx` row but each segment's first: the issue's damage."""
    module = select_driver().module
    db = home / "state.db"
    damage.checkpoint_and_close(db, module=module)
    con = module.connect(str(db), isolation_level=None)
    try:
        deleted = con.execute(f"DELETE FROM {index}_idx WHERE (pgno >> 1) > 1").rowcount
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        con.close()
    return int(deleted)


def _found(home: Path, word: str = WORD) -> int:
    """How many messages the word index finds for ``word`` (search itself ranks at most
    a capped candidate set, so it cannot show a count)."""
    module = select_driver().module
    con = module.connect(f"{(home / 'state.db').as_uri()}?mode=ro", uri=True)
    try:
        row = con.execute(
            "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (f'"{word}"',)
        ).fetchone()
    finally:
        con.close()
    return int(row[0])


def _fts5_checks_pass(home: Path) -> bool:
    module = select_driver().module
    con = module.connect(str(home / "state.db"), isolation_level=None)
    try:
        for ix in fts.INDEXES:
            con.execute(f"INSERT INTO {ix.name}({ix.name}, rank) VALUES ('integrity-check', 1)")
        return bool(con.execute("PRAGMA integrity_check").fetchall() == [("ok",)])
    finally:
        con.close()


@pytest.fixture
def partial_home(home: Path) -> Path:
    _fill(home)
    assert _delete_term_btree_rows(home) > 0
    return home


def test_deleted_term_btree_rows_pass_fts5_checks_but_search_misses(partial_home: Path) -> None:
    # The premise: nothing FTS5 offers sees it, and search silently returns fewer.
    assert _fts5_checks_pass(partial_home)
    assert _found(partial_home) < HITS / 2
    with StateStore.open(partial_home) as store:
        seen, cursor = 0, None
        while True:  # every page of the search: it finds what the damaged index holds
            page = store.search_page(WORD, limit=MAX_SEARCH_LIMIT, cursor=cursor)
            seen += len(page.hits)
            if page.cursor is None:
                break
            cursor = page.cursor
        assert seen == _found(partial_home) < HITS / 2


def test_doctor_reports_a_partial_index_as_damage(partial_home: Path) -> None:
    report = diagnose(partial_home)
    assert not report.healthy
    partial = [f for f in report.findings if f.code == "fts-partial"]
    assert len(partial) == 1
    assert "messages_fts" in partial[0].summary and "_idx" in partial[0].summary
    assert "sessions repair" in partial[0].fix


def test_coverage_check_names_the_unreachable_pages_and_the_missed_messages(
    partial_home: Path,
) -> None:
    module = select_driver().module
    con = module.connect(f"{(partial_home / 'state.db').as_uri()}?mode=ro", uri=True)
    try:
        problems = fts.coverage_check(lambda sql, p: con.execute(sql, p).fetchall())
    finally:
        con.close()
    assert {(p.index, p.kind) for p in problems} == {
        ("messages_fts", "term-btree"),
        ("messages_fts", "probe"),
    }


def test_coverage_check_reports_documents_missing_from_the_index(home: Path) -> None:
    _fill(home, 200)
    module = select_driver().module
    damage.checkpoint_and_close(home / "state.db", module=module)
    con = module.connect(str(home / "state.db"), isolation_level=None)
    try:
        con.execute("DELETE FROM messages_fts_trigram_docsize WHERE id % 2 = 0")
        problems = fts.coverage_check(lambda sql, p: con.execute(sql, p).fetchall())
    finally:
        con.close()
    assert [(p.index, p.kind) for p in problems] == [("messages_fts_trigram", "documents")]


def test_repair_rebuilds_a_partial_index_and_search_then_finds_all(
    partial_home: Path, cli: Cli
) -> None:
    checked = cli("--home", partial_home, "sessions", "repair", "--check-only", "--json")
    assert json.loads(checked.stdout)["damage"] == "index"
    result = cli("--home", partial_home, "sessions", "repair", "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["rebuild"]["ran"] and report["rebuild"]["ok"]
    coverage = next(v for v in report["verification"] if v["name"] == "search coverage")
    assert coverage["ok"], coverage
    assert _found(partial_home) == HITS
    assert diagnose(partial_home).healthy


def test_rebuild_search_on_a_healthy_store_rebuilds_and_verifies(home: Path, cli: Cli) -> None:
    _fill(home, 500)
    assert diagnose(home).healthy
    plain = json.loads(cli("--home", home, "sessions", "repair", "--json").stdout)
    assert plain["ok"] and plain["rebuild"] is None  # nothing to do without the flag
    result = cli("--home", home, "sessions", "repair", "--rebuild-search", "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["rebuild"]["ran"] and report["rebuild"]["ok"]
    assert "--rebuild-search" in report["summary"] or "rebuilt" in report["summary"]
    assert all(v["ok"] for v in report["verification"])
    assert "search coverage" in {v["name"] for v in report["verification"]}
    assert _found(home) == 500


def test_rebuild_search_with_check_only_is_one_error_line(home: Path, cli: Cli) -> None:
    result = cli("--home", home, "sessions", "repair", "--check-only", "--rebuild-search")
    assert result.code != 0
    assert result.error_lines == [
        "error: --check-only writes nothing and --rebuild-search rewrites the index; "
        "run `hermes-repo sessions repair --rebuild-search` without --check-only"
    ]


def test_coverage_check_finds_nothing_wrong_while_segments_merge(home: Path) -> None:
    # One message per transaction: FTS5 merges segments incrementally, so the index
    # passes through partly merged states; none of them may read as damage.
    with StateStore.open(home) as store:
        with store.unit_of_work() as uow:
            sid = uow.sessions.create(source="cli")
            uow.commit()
        for i in range(600):
            content = " ".join(f"{_FILLER[(i + k) % len(_FILLER)]}{i % 53}" for k in range(12))
            role = "tool" if i % 5 == 4 else "user"
            if i % 10 == 9:
                content += " 数据库连接超时"
            store.append_message(sid, {"role": role, "content": content})
            if i % 50 == 0:
                with store.engine.connect() as conn:
                    assert fts.coverage_check(conn) == [], i
