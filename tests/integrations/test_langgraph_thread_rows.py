"""What a LangGraph thread said is the store's: its messages are display-only rows of
its session, once each however often checkpoints repeat them, seen by search, the CLI
and doctor; a deleted thread is gone for LangGraph and archived for the operator; a
session that is not the thread's is never read or written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import WRITES_IDX_MAP
from sqlalchemy import func, select

from hermes_repo import MessageRepository, SessionTakenError, StateStore
from hermes_repo.integrations.langgraph import DELETE_REASON, HermesSaver, session_id_for
from hermes_repo.models import langgraph_writes_table as WR
from tests.cli.conftest import run_cli_from_root
from tests.integrations.langgraph_scenario import RESUME, ask, chat_graph

CONFIG = {"configurable": {"thread_id": "trip"}}


def _talk(saver: HermesSaver) -> list[str]:
    """Two questions, each paused for approval and resumed; the final message ids."""
    graph = chat_graph(saver)
    for n, text in enumerate(("weather in 大阪", "and in Lyon")):
        graph.invoke(ask("trip", text, n)[0], CONFIG)
        graph.invoke(RESUME, CONFIG)
    return [m.id for m in graph.get_state(CONFIG).values["messages"]]


def test_thread_messages_are_rows_once_each_however_many_checkpoints_repeat_them(
    backend: str, store: StateStore, home: Path
) -> None:
    saver = HermesSaver(store)
    ids = _talk(saver)
    checkpoints = len(list(saver.list(CONFIG)))
    assert checkpoints > len(ids)  # every step's checkpoint repeated the messages

    rows = store.read(lambda conn: MessageRepository(conn).list("trip", include_inactive=True))
    assert [row["uid"] for row in rows] == [f"langgraph:{i}" for i in ids]
    assert all(row["display_only"] for row in rows)
    assert [row["role"] for row in rows][:4] == ["user", "assistant", "user", "tool"]
    assert rows[3]["tool_name"] == "weather" and rows[3]["content"] == "晴れ、23度"
    info = store.get_session("trip")
    assert (info.source, info.title, info.message_count) == ("langgraph", "trip", len(ids))

    # The same checkpoints written again (a replayed write) add no row.
    for found in list(saver.list(CONFIG)):
        saver.put(
            found.parent_config or {"configurable": {"thread_id": "trip", "checkpoint_ns": ""}},
            found.checkpoint,
            found.metadata,
            dict(found.checkpoint["channel_versions"]),
        )
    assert store.get_session("trip").message_count == len(ids)

    assert {hit.session_id for hit in store.search("晴れ")} == {"trip"}
    assert {hit.session_id for hit in store.search("pluie")} == {"trip"}
    shown = run_cli_from_root("--home", home, "sessions", "show", "trip", "--json")
    assert shown.code == 0 and "pluie fine" in shown.stdout, shown.stdout + shown.stderr
    found = run_cli_from_root("--home", home, "search", "大阪", "--json")
    assert found.code == 0 and "trip" in found.stdout, found.stdout + found.stderr
    doctor = run_cli_from_root("--home", home, "doctor", "--json")
    assert doctor.code == 0, doctor.stdout + doctor.stderr


def test_delete_thread_is_gone_for_langgraph_and_archived_for_the_operator(
    backend: str, store: StateStore
) -> None:
    saver = HermesSaver(store)
    ids = _talk(saver)
    saver.delete_thread("trip")

    assert saver.get_tuple(CONFIG) is None
    assert list(saver.list(CONFIG)) == []
    assert chat_graph(saver).get_state(CONFIG).values == {}
    states = store.read(lambda conn: MessageRepository(conn).states("trip"))
    assert states == {f"langgraph:{i}": (0, DELETE_REASON) for i in ids}
    assert store.get_session("trip").message_count == 0
    assert store.search("晴れ") == []

    # The thread starts afresh in the same session, its uids in a new generation (the
    # fake model's ids repeat); what it said before stays archived.
    graph = chat_graph(saver)
    graph.invoke({"messages": [HumanMessage(content="weather in Lyon", id="again")]}, CONFIG)
    graph.invoke(RESUME, CONFIG)
    assert len(graph.get_state(CONFIG).values["messages"]) == 5
    states = store.read(lambda conn: MessageRepository(conn).states("trip"))
    assert states["langgraph:1:again"] == (1, None)
    assert sum(1 for active, _ in states.values() if active) == 5
    assert store.get_session("trip").message_count == 5
    assert {hit.session_id for hit in store.search("pluie")} == {"trip"}


def test_a_session_of_another_source_is_never_read_or_written(
    backend: str, store: StateStore
) -> None:
    with store.unit_of_work() as uow:
        uow.sessions.create("cli", id="taken", title="an operator's session")
        uow.messages.append("taken", {"role": "user", "content": "mine"})
        uow.commit()
    saver = HermesSaver(store)
    graph = chat_graph(saver)
    taken = {"configurable": {"thread_id": "taken"}}
    with pytest.raises(SessionTakenError, match="source 'cli'"):
        graph.invoke(ask("taken", "weather in Lyon", 0)[0], taken)
    _talk(saver)  # a thread of its own, to copy from
    for call in (
        lambda: saver.get_tuple(taken),
        lambda: list(saver.list(taken)),
        lambda: saver.delete_thread("taken"),
        lambda: saver.copy_thread("taken", "elsewhere"),
        lambda: saver.copy_thread("trip", "taken"),
        lambda: saver.prune(["taken"]),
    ):
        with pytest.raises(SessionTakenError):
            call()
    rows = store.read(lambda conn: MessageRepository(conn).list("taken", include_inactive=True))
    assert [row["content"] for row in rows] == ["mine"]
    assert store.get_session("taken").source == "cli"
    # Ids that are not session ids get a hashed one, always the same.
    assert session_id_for("a thread / with spaces").startswith("lg-")
    assert json.dumps(session_id_for("x" * 300)) == json.dumps(session_id_for("x" * 300))


@pytest.mark.sqlite_only
def test_a_snapshot_restore_brings_back_the_thread_its_checkpoints_and_its_rows(
    store: StateStore, home: Path
) -> None:
    saver = HermesSaver(store)
    _talk(saver)
    graph = chat_graph(saver)
    state = graph.get_state(CONFIG).values
    history = [s.config for s in graph.get_state_history(CONFIG)]
    made = run_cli_from_root("--home", home, "snapshot", "create", "--json")
    assert made.code == 0, made.stderr
    saver.delete_thread("trip")
    store.close()  # a restore of a SQLite file runs alone

    restored = run_cli_from_root(
        "--home", home, "snapshot", "restore", json.loads(made.stdout)["id"], "--yes"
    )
    assert restored.code == 0, restored.stdout + restored.stderr
    with StateStore.open(home) as reopened:
        graph = chat_graph(HermesSaver(reopened))
        assert graph.get_state(CONFIG).values == state
        assert [s.config for s in graph.get_state_history(CONFIG)] == history
        assert {hit.session_id for hit in reopened.search("pluie")} == {"trip"}


def test_a_history_longer_than_one_lookup_is_stored_once_by_a_saver_that_forgot_it(
    backend: str, store: StateStore
) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from hermes_repo.integrations import _langgraph_state

    # More new messages than one put looks up in its own statement on a server.
    total = _langgraph_state.SERVER_UIDS + 30
    messages = [HumanMessage(content=f"line {n}", id=f"h-{n}") for n in range(total)]
    config = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}

    def put(saver: HermesSaver, step: int) -> None:
        checkpoint = dict(empty_checkpoint())
        versions = {"messages": saver.get_next_version(None, None)}
        checkpoint["channel_values"] = {"messages": messages}
        checkpoint["channel_versions"] = versions
        saver.put(config, checkpoint, {"source": "loop", "step": step}, versions)  # type: ignore[arg-type]

    put(HermesSaver(store), 0)
    # A fresh saver (another worker, a restart) remembers none of them: the store does.
    put(HermesSaver(store), 1)

    rows = store.read(lambda conn: MessageRepository(conn).list("long", include_inactive=True))
    assert [row["uid"] for row in rows] == [f"langgraph:h-{n}" for n in range(total)]
    assert store.get_session("long").message_count == total


def test_pending_writes_to_a_session_that_is_not_the_threads_leave_no_row(
    backend: str, store: StateStore
) -> None:
    with store.unit_of_work() as uow:
        uow.sessions.create("cli", id="taken", title="an operator's session")
        # A LangGraph session holding another thread (as a hash collision would).
        uow.sessions.create("langgraph", id="held", title="held")
        uow.sessions.update("held", extra={"langgraph_thread": "another thread"})
        uow.commit()
    saver = HermesSaver(store)
    special = next(iter(WRITES_IDX_MAP))  # a channel whose stored write is replaced
    writes = [("messages", [HumanMessage(content="late", id="late-1")]), (special, "boom")]
    for sid, match in (("taken", "source 'cli'"), ("held", "holds thread 'another thread'")):
        config = {"configurable": {"thread_id": sid, "checkpoint_ns": "", "checkpoint_id": "c"}}
        for chosen in (writes, writes[1:]):  # kept writes, and replaced special ones
            with pytest.raises(SessionTakenError, match=match):
                saver.put_writes(config, chosen, task_id="t")
        stored = store.read(
            lambda conn, sid=sid: conn.execute(
                select(func.count()).select_from(WR).where(WR.c.session_id == sid)
            ).scalar()
        )
        assert stored == 0
