"""Every public call answers hostile arguments with a library error naming the argument.

A wrong type or an impossible value used to leave as a raw ``TypeError``, ``ValueError``,
``OverflowError``, ``AttributeError`` or ``OSError`` from deep inside (``search(limit=
"5")``, ``search(session_id=5)``, ``list_sessions(limit=2**63)``, ``flush("text")``,
``StateStore.open(write_budget_s="5")``). Hypothesis drives each public call with values
of every kind; the only exceptions allowed out are :class:`HermesRepoError`\\ s.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_repo import HermesRepoError, InvalidArgumentError, StateStore

pytestmark = pytest.mark.usefixtures("backend")

HOSTILE = st.one_of(
    st.sampled_from(
        [
            None,
            True,
            0,
            -1,
            2**63,
            -(2**63) - 1,
            10**100,
            math.nan,
            math.inf,
            -math.inf,
            "",
            "5",
            "a\x00b",
            "\ud800",
            "x" * 5000,
            b"bytes",
            [],
            ["a"],
            {},
            {"role": "user"},
            (1, 2),
            object(),
        ]
    ),
    st.integers(),
    st.floats(),
    st.text(max_size=30),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)

Call = Callable[[StateStore, Any], object]

CALLS: dict[str, Call] = {
    "search(query)": lambda s, v: s.search(v),
    "search(limit)": lambda s, v: s.search("hello", limit=v),
    "search(session_id)": lambda s, v: s.search("hello", session_id=v),
    "search(role)": lambda s, v: s.search("hello", role=v),
    "search(include_inactive)": lambda s, v: s.search("hello", include_inactive=v),
    "search_page(query)": lambda s, v: s.search_page(v),
    "search_page(limit)": lambda s, v: s.search_page("hello", limit=v),
    "search_page(cursor)": lambda s, v: s.search_page("hello", cursor=v),
    "load_conversation(session_id)": lambda s, v: s.load_conversation(v),
    "load_conversation(last)": lambda s, v: s.load_conversation("s1", last=v),
    "load_conversation(repair)": lambda s, v: s.load_conversation("s1", repair=v),
    "list_sessions(limit)": lambda s, v: s.list_sessions(limit=v),
    "list_sessions(offset)": lambda s, v: s.list_sessions(offset=v),
    "list_sessions(source)": lambda s, v: s.list_sessions(source=v),
    "get_session": lambda s, v: s.get_session(v),
    "append_message(session_id)": lambda s, v: s.append_message(
        v, {"role": "user", "content": "x"}
    ),
    "append_message(message)": lambda s, v: s.append_message("s1", v),
    "append_message(content)": lambda s, v: s.append_message("s1", {"role": "user", "content": v}),
    "append_message(role)": lambda s, v: s.append_message("s1", {"role": v, "content": "x"}),
    "append_message(timestamp)": lambda s, v: s.append_message(
        "s1", {"role": "user", "content": "x", "timestamp": v}
    ),
    "append_messages(messages)": lambda s, v: s.append_messages("s1", v),
    "export_session(session_id)": lambda s, v: s.export_session(v),
    "export_session(fmt)": lambda s, v: s.export_session("s1", v),
    "transcript_writer(session_id)": lambda s, v: s.transcript_writer(v),
    "flush(messages)": lambda s, v: s.transcript_writer("s1").flush(v),
    "import_jsonl(path)": lambda s, v: s.import_jsonl(v if not isinstance(v, str) else "/" + v),
    "import_hermes_db(path)": lambda s, v: s.import_hermes_db(
        v if not isinstance(v, str) else "/" + v
    ),
    "sessions.create(id)": lambda s, v: s.write(lambda u: u.sessions.create(id=v)),
    "sessions.create(source)": lambda s, v: s.write(lambda u: u.sessions.create(source=v)),
    "sessions.create(title)": lambda s, v: s.write(lambda u: u.sessions.create(title=v)),
    "sessions.create(started_at)": lambda s, v: s.write(lambda u: u.sessions.create(started_at=v)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_public_call_raises_only_library_errors(store: StateStore, name: str) -> None:
    with store.unit_of_work() as uow:
        sid = uow.sessions.create(id="s1")
        uow.messages.append(sid, {"role": "user", "content": "hello world"})
        uow.commit()
    call = CALLS[name]

    @settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(value=HOSTILE)
    def run(value: Any) -> None:
        with contextlib.suppress(HermesRepoError):  # anything else fails the test
            call(store, value)

    run()


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"write_budget_s": "5"}, "write_budget_s"),
        ({"write_budget_s": -1}, "write_budget_s"),
        ({"write_budget_s": math.nan}, "write_budget_s"),
        ({"url": 5}, "url"),
    ],
)
def test_open_names_the_argument_it_cannot_take(
    tmp_path: Path, kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=named):
        StateStore.open(tmp_path / "h", **kwargs)
    assert not (tmp_path / "h").exists()  # refused before anything was made


@pytest.mark.parametrize("home", [5, b"bytes", "", "a\x00b", ["x"]])
def test_open_refuses_a_home_that_is_no_path(home: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="home"):
        StateStore.open(home)


def test_open_refuses_a_home_the_os_cannot_use(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(HermesRepoError, match="not a folder"):
        StateStore.open(tmp_path / "file")
    with pytest.raises(HermesRepoError, match="Not a directory"):
        StateStore.open(tmp_path / "file" / "sub")
    with pytest.raises(HermesRepoError, match="File name too long"):
        StateStore.open(tmp_path / ("x" * 300))


def test_listing_refuses_a_negative_limit_on_every_backend(store: StateStore) -> None:
    # It returned every session on SQLite and raised on PostgreSQL.
    with pytest.raises(InvalidArgumentError, match="limit"):
        store.list_sessions(limit=-1)


def test_flushing_text_instead_of_a_list_writes_and_keeps_nothing(
    store: StateStore, home: Path
) -> None:
    with pytest.raises(InvalidArgumentError, match="list of message dicts"):
        store.transcript_writer("s2").flush("hello")  # type: ignore[arg-type]
    assert not list(home.glob("sessions/*"))
