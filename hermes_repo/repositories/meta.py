"""state_meta: durable markers of the store's state."""

from __future__ import annotations

import time

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from ..backend import backend_of
from ..models import state_meta_table

__all__ = ["COPIED_FROM_KEY", "CREATED_AT_KEY", "STORE_ID_KEY", "MetaRepository"]

_meta = state_meta_table

#: The store's own id (a uuid4 hex), made once; never copied to another store.
STORE_ID_KEY = "store_id"
#: When this version created the store (epoch seconds as text); absent for older stores.
CREATED_AT_KEY = "store_created_at"
#: A JSON list of the ids of the stores this one was copied from (``db copy``).
COPIED_FROM_KEY = "copied_from"


class MetaRepository:
    """Key/value markers (e.g. ``fts_stale``) inside the caller's transaction."""

    def __init__(self, db: Connection | Session) -> None:
        self._session = db

    def get(self, key: str) -> str | None:
        row = self._session.execute(select(_meta.c.value).where(_meta.c.key == key)).first()
        return None if row is None else row[0]

    def set(self, key: str, value: str | None) -> None:
        # An upsert: both dialects say it alike, each with its own construct.
        stmt = backend_of(self._session).insert(_meta)
        stmt = stmt.values(key=key, value=value, updated_at=time.time())
        stmt = stmt.on_conflict_do_update(
            index_elements=[_meta.c.key],
            set_={"value": stmt.excluded.value, "updated_at": stmt.excluded.updated_at},
        )
        self._session.execute(stmt)

    def insert_absent(self, key: str, value: str) -> None:
        """Set ``key`` only if it has no row yet (two writers racing keep the first)."""
        stmt = backend_of(self._session).insert(_meta)
        stmt = stmt.values(key=key, value=value, updated_at=time.time())
        self._session.execute(stmt.on_conflict_do_nothing(index_elements=[_meta.c.key]))

    def delete(self, key: str) -> bool:
        result = self._session.execute(delete(_meta).where(_meta.c.key == key))
        return bool(result.rowcount)  # type: ignore[attr-defined]

    def all(self) -> dict[str, str | None]:
        return {k: v for k, v in self._session.execute(select(_meta.c.key, _meta.c.value))}
