"""Random queries over the differential corpus's own characters: the same sets on both."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine

from hermes_repo import StateStore
from hermes_repo.repositories.search_pg import PgSearchRepository
from tests.integration.test_search_pg_differential import CORPUS, LIMIT, backends

__all__ = ["backends"]

pytestmark = pytest.mark.pg

_WORDS = sorted({w for row in CORPUS if isinstance(row[2], str) for w in row[2].split()})
_CHARS = sorted({ch for row in CORPUS if isinstance(row[2], str) for ch in row[2]})
_TERM = st.one_of(
    st.sampled_from(_WORDS),
    st.text(alphabet=_CHARS, min_size=1, max_size=5),
    st.sampled_from(_WORDS).map(lambda w: w[1:4]),
)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    terms=st.lists(_TERM, min_size=1, max_size=3),
    role=st.sampled_from([None, "tool", "user", "assistant"]),
    include_inactive=st.booleans(),
)
def test_random_queries_find_the_same_messages_on_both_backends(
    backends: tuple[StateStore, Engine], terms: list[str], role: str | None, include_inactive: bool
) -> None:
    store, engine = backends
    query = " ".join(terms)
    kw = {"role": role, "include_inactive": include_inactive}
    expected = {h.message_id for h in store.search(query, limit=LIMIT, **kw)}
    with engine.connect() as conn:
        got = {h.message_id for h in PgSearchRepository(conn).search(query, limit=LIMIT, **kw)}
    assert got == expected, query
