"""Bounds of the CLI's numeric options: every one is range-checked by click.

An unbounded integer reaches SQLite as a bind parameter and fails there (past 64
bits) with a traceback; a NaN compares false with both bounds and slips through
``FloatRange``. Each option names a sane range instead, and click refuses anything
outside it with one usage line.
"""

from __future__ import annotations

import math
from typing import Any

import click

__all__ = ["BUDGET_S", "KEEP", "LIMIT", "FiniteFloatRange"]

#: Rows or hits a listing returns at most.
MAX_LIMIT = 100_000
#: Seconds a command may wait for a locked database (a day).
MAX_BUDGET_S = 86_400.0
#: Snapshots kept at most.
MAX_KEEP = 10_000


class FiniteFloatRange(click.FloatRange):
    """A ``FloatRange`` that also refuses NaN (which no bound comparison catches)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if isinstance(number, float) and math.isnan(number):
            self.fail(f"{value!r} is not a number.", param, ctx)
        return number


LIMIT = click.IntRange(min=1, max=MAX_LIMIT)
BUDGET_S = FiniteFloatRange(min=0, max=MAX_BUDGET_S)
KEEP = click.IntRange(min=1, max=MAX_KEEP)

# Defaults and bounds the library owns, restated so that parsing a command line (and its
# `--help`) loads no library module; tests/cli/test_cli_startup.py checks each against
# the library's own.
DEFAULT_KEEP = 5
"""``snapshot create --keep``: :data:`hermes_repo.maintenance.snapshots.DEFAULT_KEEP`."""
COPY_BATCH_SIZE = 1000
"""``db copy --batch-size``: :data:`hermes_repo.transfer.copy.DEFAULT_BATCH_SIZE`."""
MAX_COPY_BATCH_SIZE = 100_000
"""``db copy --batch-size`` at most: :data:`hermes_repo.transfer.copy.MAX_BATCH_SIZE`."""
MAX_SEARCH_LIMIT = 1000
"""``search --limit`` at most: :data:`hermes_repo.repositories.search.paging.MAX_SEARCH_LIMIT`."""
