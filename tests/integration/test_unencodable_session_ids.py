"""A session id that cannot be encoded is refused with IntegrityViolation at every
library entry, never a raw UnicodeEncodeError; ids valid before stay valid."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from hermes_repo import StateStore
from hermes_repo.errors import IntegrityViolation

BAD = "S\udcff"
MSG = {"role": "user", "content": "x"}

ENTRIES: dict[str, Callable[[StateStore], Any]] = {
    "load_conversation": lambda s: s.load_conversation(BAD),
    "append_message": lambda s: s.append_message(BAD, dict(MSG)),
}


def _in_uow(action: Callable[[Any], Any]) -> Callable[[StateStore], Any]:
    def run(store: StateStore) -> Any:
        with store.unit_of_work() as uow:
            return action(uow)

    return run


ENTRIES.update(
    {
        "uow.messages.append": _in_uow(lambda u: u.messages.append(BAD, dict(MSG))),
        "uow.messages.append_many": _in_uow(lambda u: u.messages.append_many(BAD, [dict(MSG)])),
        "uow.sessions.get": _in_uow(lambda u: u.sessions.get(BAD)),
        "uow.sessions.create": _in_uow(lambda u: u.sessions.create("cli", id=BAD)),
    }
)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_an_unencodable_session_id_is_refused_with_integrity_violation(
    store: StateStore, entry: str
) -> None:
    with pytest.raises(IntegrityViolation, match="session id"):
        ENTRIES[entry](store)


def test_an_id_with_non_ascii_text_still_works_where_it_did(store: StateStore) -> None:
    sid = "café-会话"
    assert store.load_conversation(sid).messages == []
    with store.unit_of_work() as uow:
        assert uow.sessions.get(sid) is None
