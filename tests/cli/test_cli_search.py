"""`hermes-repo search QUERY` through the installed console script."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from hermes_repo import StateStore
from hermes_repo.schema import fts

Cli = Callable[..., Any]


def test_search_table_marks_the_hit_in_each_snippet(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "search", "checkpoint")

    assert result.code == 0, result.stderr
    assert "sample-wal-locked" in result.stdout
    # Without a colour terminal the markers stay: they are what shows the hit.
    assert ">>>checkpoint<<<" in result.stdout


def test_search_json_returns_the_library_hits(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "search", "BEGIN IMMEDIATE", "--json", "--limit", "2")

    assert result.code == 0, result.stderr
    found = json.loads(result.stdout)
    hits = found["hits"]
    # One shape with and without paging; a ranked search is one answer (no cursor).
    assert found["cursor"] is None
    with StateStore.open(shared_home) as store:
        expected = store.search("BEGIN IMMEDIATE", limit=2)
    assert hits == [
        {
            "message_id": h.message_id,
            "session_id": h.session_id,
            "role": h.role,
            "snippet": h.snippet,
            "timestamp": h.timestamp,
        }
        for h in expected
    ]
    assert len(hits) == 2


def test_search_finds_chinese_text(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "search", "伏见稻荷", "--json")

    hits = json.loads(result.stdout)["hits"]
    assert hits and {h["session_id"] for h in hits} == {"sample-kyoto-trip"}
    assert all(">>>" in h["snippet"] for h in hits)


def test_search_filters_by_role_and_session(shared_home: Path, cli: Cli) -> None:
    by_role = json.loads(
        cli("--home", shared_home, "search", "WAL", "--role", "user", "--json").stdout
    )["hits"]
    by_session = json.loads(
        cli(
            "--home",
            shared_home,
            "search",
            "backup",
            "--session",
            "sample-dashboard-review",
            "--json",
        ).stdout
    )["hits"]

    assert by_role and {h["role"] for h in by_role} == {"user"}
    assert by_session and {h["session_id"] for h in by_session} == {"sample-dashboard-review"}


def test_hostile_query_text_finds_its_message_and_leaves_the_index_live(
    imported_home: Path, cli: Cli
) -> None:
    queries = ['"unbalanced', "NEAR(a b", "*", "a OR", "%_\\", "-x:y^"]
    with StateStore.open(imported_home) as store:
        store.write(lambda uow: uow.sessions.create(id="hostile"))
        planted = {
            q: store.append_message("hostile", {"role": "user", "content": q}) for q in queries
        }
    for query in queries:
        # `--` ends the options, as the help says, for queries that start with "-".
        result = cli(
            "--home", imported_home, "search", "--json", "--session", "hostile", "--", query
        )

        assert result.code == 0, (query, result.stderr)
        hits = json.loads(result.stdout)["hits"]
        assert planted[query] in [h["message_id"] for h in hits], query
    # No query detached the index (an fts5 error would have, quietly).
    with StateStore.open(imported_home) as store:
        health = store.health()
        with store.engine.connect() as conn:
            triggers = fts.present_triggers(conn)
    assert not health.fts_stale
    assert triggers == set(fts.TRIGGER_NAMES)


def test_search_with_no_hit_says_so(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "search", "zeppelin")

    assert result.code == 0
    assert "no messages match 'zeppelin'" in result.stdout


def test_an_unknown_role_is_a_usage_error(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "search", "x", "--role", "robot")

    assert result.code == 2
    assert "robot" in result.stderr


def test_search_pages_walk_every_hit_by_page_and_by_cursor(shared_home: Path, cli: Cli) -> None:
    with StateStore.open(shared_home) as store:
        expected = [h.message_id for h in store.search_page("the", limit=1000).hits]
    assert len(expected) > 4

    def page(*args: str) -> dict[str, Any]:
        result = cli("--home", shared_home, "search", "the", "--limit", "2", "--json", *args)
        assert result.code == 0, result.stderr
        return dict(json.loads(result.stdout))

    walked, cursor = [], None
    while True:
        got = page("--cursor", cursor) if cursor else page("--page", "1")
        walked += [h["message_id"] for h in got["hits"]]
        cursor = got["cursor"]
        if cursor is None:
            break
    assert walked == expected
    assert [h["message_id"] for h in page("--page", "2")["hits"]] == expected[2:4]
    assert page("--page", "100000") == {"hits": [], "cursor": None}


def test_search_table_prints_the_next_cursor(shared_home: Path, cli: Cli) -> None:
    result = cli("--home", shared_home, "search", "the", "--limit", "1", "--page", "1")
    assert result.code == 0, result.stderr
    shown = result.stdout.split("next page: --cursor ")[1].split()[0]
    following = cli("--home", shared_home, "search", "the", "--limit", "1", "--cursor", shown)
    assert following.code == 0, following.stderr
    assert "hit(s) for 'the'" in following.stdout


def test_search_refuses_a_bad_cursor_a_cursor_with_page_and_a_limit_over_the_maximum(
    shared_home: Path, cli: Cli
) -> None:
    bad = cli("--home", shared_home, "search", "the", "--cursor", "garbage")
    assert bad.code != 0 and "cursor" in bad.stderr and "previous page" in bad.stderr
    both = cli("--home", shared_home, "search", "the", "--cursor", "x", "--page", "2")
    assert both.code != 0 and "one of --cursor and --page" in both.stderr
    big = cli("--home", shared_home, "search", "the", "--limit", "1001")
    # A usage error naming the CLI option, not the library's argument or API.
    assert big.code == 2 and "'--limit'" in big.stderr and "1<=x<=1000" in big.stderr
    assert "search_page" not in big.stderr and "StateStore" not in big.stderr
    at_most = cli("--home", shared_home, "search", "the", "--limit", "1000", "--json")
    assert at_most.code == 0, at_most.stderr


def test_search_help_states_the_limit_the_search_accepts() -> None:
    from hermes_repo import MAX_SEARCH_LIMIT
    from hermes_repo.cli import main

    limit = next(p for p in main.commands["search"].params if p.name == "limit")
    assert isinstance(limit.type, click.IntRange)
    assert limit.type.max == MAX_SEARCH_LIMIT
    assert f"1 to {MAX_SEARCH_LIMIT:,}" in (limit.help or "")


def test_search_json_has_one_shape_with_and_without_paging(shared_home: Path, cli: Cli) -> None:
    plain = json.loads(cli("--home", shared_home, "search", "the", "--json").stdout)
    paged = json.loads(cli("--home", shared_home, "search", "the", "--json", "--page", "1").stdout)
    last = json.loads(
        cli("--home", shared_home, "search", "the", "--json", "--page", "100000").stdout
    )

    assert set(plain) == set(paged) == set(last) == {"hits", "cursor"}
    assert plain["cursor"] is None and isinstance(paged["cursor"], str)
    assert set(plain["hits"][0]) == set(paged["hits"][0])
