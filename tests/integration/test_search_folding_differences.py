"""Letter folding on SQLite and PostgreSQL: the backends differ exactly where docs/search.md says.

FTS5's ``unicode61 remove_diacritics 2`` strips combining marks after a canonical
decomposition; PostgreSQL's ``unaccent`` applies a table of the server's (ligatures,
letters with a stroke, compatibility forms). Neither can be made the other without a
tokenizer or a rules file of our own on every machine, so the differences are listed,
and this test holds the list to what the two really do: a new difference, or one that
went away, fails here until the table in docs/search.md says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_repo import StateStore
from hermes_repo.engine import select_driver
from tests.support.pg_search_db import pg_database

# (stored word, query): found on SQLite?, found on PostgreSQL?
FOLDING: dict[tuple[str, str], tuple[bool, bool]] = {
    # Both fold these the same way.
    ("café", "cafe"): (True, True),
    ("cafe\u0301", "cafe"): (True, True),
    ("naïve", "naive"): (True, True),
    ("Ångström", "angstrom"): (True, True),
    ("Việt", "viet"): (True, True),
    ("ñandú", "nandu"): (True, True),
    ("Привет", "привет"): (True, True),
    ("İstanbul", "istanbul"): (True, True),
    # PostgreSQL only: unaccent's table maps ligatures, letters with a stroke or a
    # bar, and compatibility forms, which are no diacritics to unicode61.
    ("Straße", "strasse"): (False, True),
    ("Ærø", "aero"): (False, True),
    ("œuvre", "oeuvre"): (False, True),
    ("ﬁnal", "final"): (False, True),
    ("ﬀ", "ff"): (False, True),
    ("ﬆ", "st"): (False, True),
    ("Ĳssel", "ijssel"): (False, True),
    ("ǅ", "dž"): (False, True),
    ("ǆ", "dz"): (False, True),
    ("Ｆｕｌｌ", "full"): (False, True),
    ("Ⅻ", "xii"): (False, True),
    ("ışık", "isik"): (False, True),
    ("Łódź", "lodz"): (False, True),
    ("Đà", "da"): (False, True),
    ("ø", "o"): (False, True),
    ("þorn", "thorn"): (False, True),
    ("ħ", "h"): (False, True),
    ("Ŧ", "t"): (False, True),
    ("ŋ", "n"): (False, True),
    ("Ёлка", "елка"): (False, True),
    ("σοφός", "σοφος"): (False, True),
    # SQLite only: unicode61 folds final sigma and the micro sign with case; the
    # server's lower() keeps them apart.
    ("ΣΟΦΟΣ", "σοφος"): (True, False),
    ("µ", "μ"): (True, False),
}


@pytest.fixture(scope="module")
def found(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[str, str], list[bool]]]:
    pytest.importorskip("psycopg")
    out: dict[tuple[str, str], list[bool]] = {k: [] for k in FOLDING}
    with pg_database() as engine:
        url = engine.url.render_as_string(hide_password=False)
        for name, kw in (("sqlite", {}), ("postgresql", {"url": url})):
            home: Path = tmp_path_factory.mktemp(f"folding-{name}")
            with StateStore.open(home, **kw) as store:
                with store.unit_of_work() as uow:
                    sid = uow.sessions.create(id="folding")
                    ids = [
                        uow.messages.append(sid, {"role": "user", "content": f"zz {word} zz"})
                        for word, _ in FOLDING
                    ]
                    uow.commit()
                for key, row_id in zip(FOLDING, ids, strict=True):
                    hits = {h.message_id for h in store.search(key[1], limit=100)}
                    out[key].append(row_id in hits)
        yield out


@pytest.mark.skipif(
    select_driver().name != "pysqlite3",
    reason="the table is of the bundled SQLite (pysqlite3); the standard library's is older",
)
def test_folding_differences_are_exactly_the_documented_ones(
    pg_server: object, found: dict[tuple[str, str], list[bool]]
) -> None:
    assert {k: tuple(v) for k, v in found.items()} == FOLDING


def test_every_difference_in_the_table_is_in_the_docs() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "search.md").read_text()
    for (word, query), (on_sqlite, on_pg) in FOLDING.items():
        if on_sqlite != on_pg:
            assert f"`{word}`" in docs, f"{word!r} -> {query!r} is not in docs/search.md"
