"""LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) passes on
HermesSaver: every base capability and every extended one, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from hermes_repo import StateStore
from hermes_repo.integrations.langgraph import HermesSaver

conformance = pytest.importorskip(
    "langgraph.checkpoint.conformance",
    reason="the LangGraph conformance suite: pip install 'langgraph-checkpoint-conformance==0.0.2'",
)
from langgraph.checkpoint.conformance.capabilities import (  # noqa: E402
    BASE_CAPABILITIES,
    EXTENDED_CAPABILITIES,
)

EVERY_CAPABILITY = {cap.value for cap in BASE_CAPABILITIES | EXTENDED_CAPABILITIES}


async def test_hermes_saver_passes_every_capability_of_the_conformance_suite(
    backend: str, store: StateStore
) -> None:
    @conformance.checkpointer_test(name=f"HermesSaver-{backend}")
    async def saver() -> AsyncIterator[HermesSaver]:
        yield HermesSaver(store)

    report = await conformance.validate(saver)
    results = report.results
    assert set(results) == EVERY_CAPABILITY
    failures = {name: r.failures for name, r in results.items() if not r.passed}
    assert failures == {}
    # Detected and run, not skipped: a capability the suite did not see would pass too.
    assert all(r.detected and r.tests_passed > 0 for r in results.values())
