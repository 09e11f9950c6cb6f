"""The roles a stored message may have.

Kept apart from :mod:`hermes_repo.models` (which loads SQLAlchemy) so the codec and the
CLI's option parsing know them without loading the database layer.
"""

from __future__ import annotations

ROLES = ("system", "user", "assistant", "tool")
