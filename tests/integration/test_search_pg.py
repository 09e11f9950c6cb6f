"""PostgreSQL search on its own: huge messages, ranking policy, limits, keyset paging,
hostile text, and the intended differences from SQLite that docs/search.md lists."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, text

from hermes_repo.repositories.search import CANDIDATE_CAP, RANK_CUTOFF, SearchHit
from hermes_repo.repositories.search_pg import PgSearchRepository
from hermes_repo.schema import pg_search
from tests.support.pg_search_db import pg_database

pytestmark = pytest.mark.pg


@pytest.fixture
def pg() -> Iterator[Engine]:
    with pg_database() as engine:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO sessions (id, started_at) VALUES ('s', 0)"))
        yield engine


def _add(engine: Engine, rows: list[tuple[str, str]] | list[tuple[str, str, str | None]]) -> None:
    """Append rows ``(role, content[, tool_name])`` to session ``s``, in order."""
    with engine.begin() as conn:
        start = conn.execute(text("SELECT count(*) FROM messages")).scalar_one()
        conn.execute(
            text(
                "INSERT INTO messages (session_id, uid, role, content, tool_name, timestamp)"
                " VALUES ('s', :uid, :role, :content, :tool, :ts)"
            ),
            [
                {
                    "uid": f"u{start + i}",
                    "role": row[0],
                    "content": row[1],
                    "tool": row[2] if len(row) > 2 else None,
                    "ts": float(start + i),
                }
                for i, row in enumerate(rows)
            ],
        )
        conn.execute(text("ANALYZE messages"))


def _search(engine: Engine, query: str, **kw: Any) -> list[SearchHit]:
    with engine.connect() as conn:
        return PgSearchRepository(conn).search(query, **kw)


def _ids(hits: list[SearchHit]) -> list[int]:
    return [h.message_id for h in hits]


def test_a_huge_message_is_stored_and_found_at_both_ends(pg: Engine) -> None:
    # 2 M characters of distinct words: a tsvector over all of it would pass 1 MB and
    # fail the INSERT; the capped one does not, and the end is found by the LIKE scan.
    rng = random.Random(7)
    words = " ".join(f"w{rng.getrandbits(40):x}" for _ in range(150_000))
    huge = "headword " + words + " tailneedle"
    assert len(huge) > 13 * pg_search.CAP
    _add(pg, [("tool", huge, "sh"), ("user", "a small tailneedle note")])
    with pg.connect() as conn:
        size = conn.execute(text("SELECT pg_column_size(search_vector) FROM messages")).all()
    assert all(s[0] < 1_000_000 for s in size)
    assert _ids(_search(pg, "headword")) == [1]
    hits = _search(pg, "tailneedle")
    assert sorted(_ids(hits)) == [1, 2]
    huge_hit = next(h for h in hits if h.message_id == 1)
    assert ">>>tailneedle<<<" in huge_hit.snippet and len(huge_hit.snippet) < 400


def test_capped_text_of_the_worst_kind_still_inserts(pg: Engine) -> None:
    # Every token distinct and as dense as text allows: 2-character CJK words (3 bytes a
    # character) and 4-byte ideographs, up to the cap; the tsvector stays under 1 MB.
    rng = random.Random(11)
    cjk = " ".join(
        chr(rng.randint(0x4E00, 0x9FFF)) + chr(rng.randint(0x4E00, 0x9FFF))
        for _ in range(pg_search.CAP // 3 + 10)
    )
    wide = " ".join(chr(rng.randint(0x20000, 0x2A6DF)) for _ in range(pg_search.CAP // 2 + 10))
    _add(pg, [("user", cjk), ("user", wide), ("user", "after them")])
    assert _ids(_search(pg, "after")) == [3]
    assert 1 in _ids(_search(pg, cjk[:5]))


def test_cjk_beyond_the_cap_of_a_tool_row_is_found(pg: Engine) -> None:
    # The trigram index holds no tool row without CJK in its capped text; the long-row
    # scan still finds CJK past the cap, as on SQLite.
    body = "x " * pg_search.CAP + "末尾的错误信息"
    _add(pg, [("tool", body, "sh"), ("user", "没有")])
    assert _ids(_search(pg, "错误信息")) == [1]
    assert _ids(_search(pg, "错误")) == [1]


def test_ranked_candidates_put_the_densest_match_first(pg: Engine) -> None:
    _add(
        pg,
        [
            ("user", "zircon zircon zircon zircon, all about zircon"),
            ("user", "one zircon among many other words in a longer sentence here"),
            ("user", "nothing relevant"),
        ],
    )
    assert _ids(_search(pg, "zircon")) == [1, 2]


def test_a_very_common_term_comes_newest_first(pg: Engine) -> None:
    rows = [("user", "basalt basalt basalt basalt")] + [
        ("assistant", f"basalt note {i}") for i in range(RANK_CUTOFF + 1)
    ]
    _add(pg, rows)
    hits = _search(pg, "basalt", limit=30)
    newest = RANK_CUTOFF + 2
    assert _ids(hits) == list(range(newest, newest - 30, -1))
    # Ranked, the densest row (the oldest) would come first: it is not even listed.
    assert 1 not in _ids(hits)


def test_limit_goes_past_the_ranked_candidates_newest_first(pg: Engine) -> None:
    total = CANDIDATE_CAP + 60
    _add(pg, [("user", "garnet " * (1 + i % 5)) for i in range(total)])
    everything = _search(pg, "garnet", limit=total + 10)
    assert sorted(_ids(everything)) == list(range(1, total + 1))
    hits = _search(pg, "garnet", limit=CANDIDATE_CAP + 30)
    ids = _ids(hits)
    assert set(ids[:CANDIDATE_CAP]) == set(range(total, total - CANDIDATE_CAP, -1))
    rest = list(range(total - CANDIDATE_CAP, total - CANDIDATE_CAP - 30, -1))
    assert ids[CANDIDATE_CAP:] == rest
    small = _search(pg, "garnet", limit=10)
    assert set(_ids(small)) <= set(ids[:CANDIDATE_CAP])


@pytest.mark.parametrize("query", ["obsidian", "玄武岩", "sidi", "玄", "🪨"])
def test_before_id_pages_through_every_hit_once_newest_first(pg: Engine, query: str) -> None:
    rows = []
    for i in range(45):
        hit = i % 3 != 0
        rows.append(("user" if i % 2 else "tool", f"obsidian 玄武岩 🪨 {i}" if hit else "none"))
    _add(pg, rows)
    expected = [i + 1 for i in reversed(range(45)) if i % 3 != 0]
    seen: list[int] = []
    before: int | None = None
    while True:
        page = _ids(_search(pg, query, limit=7, before_id=before))
        if not page:
            break
        assert page == sorted(page, reverse=True)
        assert before is None or max(page) < before
        seen += page
        before = page[-1]
    assert seen == expected


def test_role_session_and_inactive_filters_apply_on_every_path(pg: Engine) -> None:
    _add(pg, [("user", "quartz 石英 ok"), ("tool", "quartz 石英 ok", "sh")])
    with pg.begin() as conn:
        conn.execute(text("INSERT INTO sessions (id, started_at) VALUES ('t', 0)"))
        conn.execute(
            text(
                "INSERT INTO messages (session_id, uid, role, content, timestamp, active)"
                " VALUES ('t', 'x', 'user', 'quartz 石英 ok', 9, 0)"
            )
        )
    for query in ["quartz", "石英", "石", "ok", "quar"]:
        assert _ids(_search(pg, query, role="tool")) == [2], query
        assert _ids(_search(pg, query, session_id="t")) == [], query
        assert _ids(_search(pg, query, session_id="t", include_inactive=True)) == [3], query


def test_a_filter_value_postgresql_cannot_hold_finds_nothing(pg: Engine) -> None:
    _add(pg, [("user", "jasper")])
    assert _search(pg, "jasper", session_id="s\x00") == []
    assert _search(pg, "jasper", role="user\x00") == []
    assert _search(pg, "jasper", session_id="s\ud800") == []
    assert _ids(_search(pg, "jasper", session_id="s")) == [1]


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(query=st.text(min_size=1, max_size=30))
def test_any_text_is_a_safe_query(pg: Engine, query: str) -> None:
    if not _search(pg, "seed"):
        _add(pg, [("user", "seed text with 100% _odd_ \\chars 'quoted' \"x\" 汉字")])
    hits = _search(pg, query, limit=5)
    assert all(h.session_id == "s" for h in hits)


def test_intended_difference_unaccent_folds_more_letters_than_unicode61(pg: Engine) -> None:
    # docs/search.md: PostgreSQL's unaccent also maps ß to ss and æ to ae.
    _add(pg, [("user", "Straße und Æther")])
    assert _ids(_search(pg, "strasse")) == [1]
    assert _ids(_search(pg, "aether")) == [1]


def test_intended_difference_like_paths_fold_every_letter(pg: Engine) -> None:
    # docs/search.md: SQLite's LIKE folds ASCII only; ILIKE folds É to é too.
    _add(pg, [("user", "Élan 汉字")])
    assert _ids(_search(pg, "汉字 él")) == [1]
