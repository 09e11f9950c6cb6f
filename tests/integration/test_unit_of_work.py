"""The unit of work rolls back unless told to commit, and translates errors once."""

from __future__ import annotations

import pytest

from hermes_repo import IntegrityViolation, NotFoundError, StateStore

# The public API these tests prove runs on SQLite and on PostgreSQL.
pytestmark = pytest.mark.usefixtures("backend")


def _count(store: StateStore) -> tuple[int, int]:
    h = store.health()
    return h.counts["sessions"], h.counts["messages"]


def test_unit_rolls_back_by_default(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        sid = uow.sessions.create()
        uow.messages.append(sid, {"role": "user", "content": "never committed"})
    assert _count(store) == (0, 0)


def test_unit_commits_when_told(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        sid = uow.sessions.create()
        uow.messages.append(sid, {"role": "user", "content": "kept"})
        uow.commit()
    assert _count(store) == (1, 1)
    assert store.load_conversation(sid).messages[0]["content"] == "kept"


def test_failure_inside_a_unit_rolls_back_everything(store: StateStore) -> None:
    with pytest.raises(RuntimeError, match="boom"), store.unit_of_work() as uow:
        sid = uow.sessions.create()
        uow.messages.append(sid, {"role": "user", "content": "a"})
        raise RuntimeError("boom")
    assert _count(store) == (0, 0)


def test_constraint_error_is_translated_and_chained(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        sid = uow.sessions.create()
        uow.messages.append(sid, {"role": "user", "content": "a", "uid": "same"})
        uow.commit()
    # SQLite says "UNIQUE constraint failed", PostgreSQL "violates unique constraint".
    with (
        pytest.raises(IntegrityViolation, match=r"(?i)unique.*uid") as caught,
        store.unit_of_work() as uow,
    ):
        uow.messages.append(sid, {"role": "user", "content": "b", "uid": "same"})
    assert caught.value.__cause__ is not None
    assert _count(store) == (1, 1)


def test_append_to_a_missing_session_names_the_session(store: StateStore) -> None:
    with pytest.raises(NotFoundError, match="nope"):
        store.append_message("nope", {"role": "user", "content": "x"})


def test_bad_role_is_refused_before_reaching_sqlite(store: StateStore) -> None:
    with store.unit_of_work() as uow:
        sid = uow.sessions.create()
        uow.commit()
    with pytest.raises(IntegrityViolation, match="role"):
        store.append_message(sid, {"role": "wizard", "content": "x"})
