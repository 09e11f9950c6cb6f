"""JSON as a strict reader takes it: ``NaN``, ``Infinity`` and ``-Infinity`` are refused.

Python's own ``json`` accepts them, so a test that let it parse the output would pass
on output that other programs reject.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["strict_json"]


def strict_json(text: str | bytes) -> Any:
    """Parse ``text``; a non-finite constant raises ``ValueError``."""

    def refuse(token: str) -> Any:
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)
