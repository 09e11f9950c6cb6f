"""HermesSession: the OpenAI Agents SDK's Session protocol on a real hermes store.

The SDK's own session tests run against HermesSession in CI (framework_tests/); these
prove what they cannot: the items are ordinary rows of the store, nothing is deleted,
a locked database spools instead of failing, and the event loop never waits.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, SessionSettings
from agents.memory import Session
from agents.testing import ScriptedModel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import make_url

from hermes_repo import (
    ConfigurationError,
    IntegrityViolation,
    SessionTakenError,
    StateDbCorruptError,
    StateStore,
    StoreClosedError,
)
from hermes_repo.integrations import openai_agents
from hermes_repo.integrations.openai_agents import (
    CLEAR_REASON,
    POP_REASON,
    SOURCE,
    HermesSession,
    session_key,
)
from hermes_repo.repositories.messages import MessageRepository
from tests.cli.conftest import run_cli
from tests.support import damage
from tests.support.locking import write_lock_held_by_another_process
from tests.support.pg import PgServer

ITEMS: list[dict[str, Any]] = [
    {"content": "What is the capital of Japan? 日本の首都は？", "role": "user"},
    {
        "id": "msg_1",
        "content": [{"annotations": [], "text": "东京是日本的首都。", "type": "output_text"}],
        "role": "assistant",
        "status": "completed",
        "type": "message",
    },
    {
        "arguments": '{"city": "東京"}',
        "call_id": "call_1",
        "name": "weather",
        "type": "function_call",
        "id": "fc_1",
        "status": "completed",
    },
    {"call_id": "call_1", "output": "晴れ、18°C 🌤", "type": "function_call_output"},
    {"id": "rs_1", "summary": [{"text": "thinking", "type": "summary_text"}], "type": "reasoning"},
    {"role": "developer", "content": "Be brief."},
]


def _as_sdk_stores(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # What the SDK's SQLiteSession gives back: json.loads(json.dumps(item)).
    return [json.loads(json.dumps(item)) for item in items]


def _ids_of_rows(store: StateStore, key: str) -> list[tuple[str, bool, str | None]]:
    rows = store.load_conversation(key, include_inactive=True).messages
    return [(m["role"], m.get("active", True), m.get("archive_reason")) for m in rows]


@pytest.mark.usefixtures("backend")
async def test_items_come_back_exactly_with_their_keys_in_order(store: StateStore) -> None:
    session = HermesSession("exact", store)
    await session.add_items(ITEMS[:3])
    await session.add_items(ITEMS[3:])
    back = await session.get_items()
    assert back == ITEMS
    assert [list(item) for item in back] == [list(item) for item in ITEMS]
    assert json.dumps(back) == json.dumps(ITEMS)
    assert isinstance(session, Session)


_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_json = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(items=st.lists(st.dictionaries(st.text(max_size=12), _json, max_size=6), max_size=4))
def test_any_json_item_comes_back_as_the_sdk_store_gives_it(
    tmp_path: Path, items: list[dict[str, Any]]
) -> None:
    # Lone surrogates, keys named like hermes' own columns (uid, timestamp, role...),
    # huge integers, nested parts: the item is opaque to the store.
    async def run() -> list[Any]:
        with StateStore.open(tmp_path / "h") as store:
            session = HermesSession(f"p{len(items)}", store)
            await session.clear_session()
            await session.add_items(items)
            return await session.get_items()

    assert asyncio.run(run()) == _as_sdk_stores(items)


@pytest.mark.usefixtures("backend")
async def test_limit_returns_the_newest_items_oldest_first(store: StateStore) -> None:
    session = HermesSession("limits", store, session_settings={"limit": 3})
    items = [{"role": "user", "content": f"m{i}"} for i in range(8)]
    await session.add_items(items)
    assert await session.get_items() == items[-3:]  # the settings' limit
    assert await session.get_items(limit=5) == items[-5:]  # an explicit one wins
    assert await session.get_items(limit=50) == items
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == items  # SQLiteSession: no limit
    assert HermesSession("limits", store).session_settings == SessionSettings()


def test_unknown_settings_are_refused_as_the_sdk_refuses_them(store: StateStore) -> None:
    with pytest.raises(TypeError, match="Unknown session settings: limitt"):  # the SDK's own
        HermesSession("s", store, session_settings={"limitt": 1})


@pytest.mark.usefixtures("backend")
async def test_pop_and_clear_archive_rows_with_a_reason_and_delete_nothing(
    store: StateStore,
) -> None:
    session = HermesSession("audit", store)
    await session.add_items(ITEMS[:4])
    assert await session.pop_item() == ITEMS[3]
    assert await session.get_items() == ITEMS[:3]
    await session.clear_session()
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.add_items([ITEMS[0]])
    assert await session.get_items() == [ITEMS[0]]

    rows = _ids_of_rows(store, "audit")
    assert len(rows) == 5  # every row ever written is still there
    assert [reason for _, active, reason in rows if not active] == [
        CLEAR_REASON,
        CLEAR_REASON,
        CLEAR_REASON,
        POP_REASON,
    ]
    info = store.get_session("audit")
    assert (info.source, info.message_count) == (SOURCE, 1)
    archived = store.load_conversation("audit", include_inactive=True).messages
    assert all(m["archived_at"] for m in archived if m.get("active") is False)


@pytest.mark.usefixtures("backend")
async def test_an_item_json_cannot_hold_is_refused_before_anything_is_written(
    store: StateStore,
) -> None:
    session = HermesSession("refused", store)
    with pytest.raises(IntegrityViolation, match="item 1 cannot be stored as JSON"):
        await session.add_items([ITEMS[0], {"role": "user", "content": object()}])
    with pytest.raises(IntegrityViolation, match="item 0 cannot be stored as JSON"):
        await session.add_items([{"role": "user", "content": float("nan")}])
    with pytest.raises(IntegrityViolation, match="list of items"):
        await session.add_items({"role": "user", "content": "a dict, not a list"})  # type: ignore[arg-type]
    assert await session.get_items() == []
    await session.add_items([ITEMS[0]])  # still usable
    assert await session.get_items() == [ITEMS[0]]


async def test_a_closed_session_refuses_every_call_and_closes_only_its_own_store(
    store: StateStore, tmp_path: Path
) -> None:
    borrowed = HermesSession("closed", store)
    borrowed.close()
    borrowed.close()  # idempotent
    for call in (borrowed.add_items([]), borrowed.get_items(), borrowed.pop_item()):
        with pytest.raises(StoreClosedError, match="create a new HermesSession"):
            await call
    assert store.list_sessions() is not None  # the caller's store is still open

    owned = HermesSession("closed", home=tmp_path / "own")
    await owned.add_items([ITEMS[0]])
    owned.close()
    with pytest.raises(StoreClosedError):
        owned.store.list_sessions()


@pytest.mark.usefixtures("backend")
async def test_any_session_id_gets_its_own_session_titled_with_it(store: StateStore) -> None:
    odd = ["user@example.com thread #1", "聊天 🚀", "x" * 300, "-leading-dash", "a..b"]
    for n, sid in enumerate(odd):
        await HermesSession(sid, store).add_items([{"role": "user", "content": f"n{n}"}])
    for n, sid in enumerate(odd):
        again = HermesSession(sid, store)  # the same id finds the same session
        assert await again.get_items() == [{"role": "user", "content": f"n{n}"}]
        info = store.get_session(session_key(sid))
        assert (info.title, info.source) == (sid, SOURCE)
        assert info.id.startswith("oa-") and len(info.id) == 43
    assert session_key("plain-id_1.2:3") == "plain-id_1.2:3"


@pytest.mark.usefixtures("backend")
async def test_a_session_of_another_door_is_refused_by_every_call_nothing_touched(
    store: StateStore,
) -> None:
    with store.unit_of_work() as uow:
        uow.sessions.create("cli", id="cli-chat")
        uow.commit()
    store.append_message("cli-chat", {"role": "user", "content": "mine"})
    session = HermesSession("cli-chat", store)  # built: nothing read yet
    for call in (
        session.get_items(),
        session.add_items([ITEMS[0]]),
        session.pop_item(),
        session.clear_session(),
    ):
        with pytest.raises(SessionTakenError, match="was written by 'cli'"):
            await call
    assert _ids_of_rows(store, "cli-chat") == [("user", True, None)]
    assert [m["content"] for m in store.load_conversation("cli-chat").messages] == ["mine"]


@pytest.mark.usefixtures("backend")
async def test_a_session_another_door_creates_after_the_object_was_built_is_refused(
    store: StateStore,
) -> None:
    # The order that slipped through a check made at construction: built first (and
    # even used while the session did not exist yet), taken by another door after.
    session = HermesSession("late", store)
    assert await session.get_items() == []
    with store.unit_of_work() as uow:
        uow.sessions.create("pydantic-ai", id="late")
        uow.messages.append("late", {"role": "user", "content": "theirs"})
        uow.commit()
    for call in (
        session.get_items(),
        session.add_items([ITEMS[0]]),
        session.pop_item(),
        session.clear_session(),
    ):
        with pytest.raises(SessionTakenError, match="was written by 'pydantic-ai'"):
            await call
    assert _ids_of_rows(store, "late") == [("user", True, None)]


async def test_a_locked_database_spools_the_items_and_the_session_still_has_them(
    home: Path, tmp_path: Path
) -> None:
    with StateStore.open(home) as store:
        session = HermesSession("spooled", store, write_budget_s=0.3)
        await session.add_items([ITEMS[0]])
        with write_lock_held_by_another_process(home / "state.db", tmp_path):
            await session.add_items(ITEMS[1:3])  # locked past the budget: spooled
            assert session._pending.exists()
            assert await session.get_items() == ITEMS[:3]
            assert await session.get_items(limit=2) == ITEMS[1:3]
        # The lock is gone: the next call replays the spool, exactly once.
        await session.add_items([ITEMS[3]])
        assert not session._pending.exists()
        assert await session.get_items() == ITEMS[:4]
        assert len(_ids_of_rows(store, "spooled")) == 4

    # A process that died with items in the spool: the next open replays them.
    with StateStore.open(home) as store:
        session = HermesSession("spooled", store, write_budget_s=0.3)
        with write_lock_held_by_another_process(home / "state.db", tmp_path / "again"):
            await session.add_items([ITEMS[4]])
    with StateStore.open(home) as store:
        assert await HermesSession("spooled", store).get_items() == ITEMS[:5]


async def test_every_session_object_of_one_session_sees_the_spooled_items(
    home: Path, tmp_path: Path
) -> None:
    # A gateway builds a HermesSession per request: what one spooled, the next returns.
    with StateStore.open(home) as store:
        first = HermesSession("shared", store, write_budget_s=0.3)
        await first.add_items([ITEMS[0]])
        with write_lock_held_by_another_process(home / "state.db", tmp_path):
            await first.add_items([ITEMS[1]])
            first.close()
            second = HermesSession("shared", store, write_budget_s=0.3)
            assert await second.get_items() == ITEMS[:2]
        assert await HermesSession("shared", store).pop_item() == ITEMS[1]
        assert await second.get_items() == ITEMS[:1]
        assert len(_ids_of_rows(store, "shared")) == 2


async def test_a_write_waiting_on_a_lock_never_blocks_the_event_loop(
    home: Path, tmp_path: Path
) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    with StateStore.open(home) as store:
        session = HermesSession("loop", store, write_budget_s=1.0)
        beat = asyncio.create_task(ticker())
        with write_lock_held_by_another_process(home / "state.db", tmp_path):
            await session.add_items([ITEMS[0]])  # waits the whole budget in a thread
        beat.cancel()
        assert ticks >= 20  # the loop ran on while the write waited
        assert await session.get_items() == [ITEMS[0]]


async def test_a_cancelled_write_is_reported_once_its_outcome_is_known(
    home: Path, tmp_path: Path
) -> None:
    with StateStore.open(home) as store:
        session = HermesSession("cancel", store, write_budget_s=30)
        with write_lock_held_by_another_process(home / "state.db", tmp_path) as held:
            task = asyncio.create_task(session.add_items([ITEMS[0]]))
            await asyncio.sleep(0.3)  # the write is waiting on the lock
            task.cancel()
            await asyncio.sleep(0)
            task.cancel()
            assert not task.done()  # still waiting for the write's outcome
            held.release()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert await session.get_items() == [ITEMS[0]]  # committed, once
        assert len(_ids_of_rows(store, "cancel")) == 1


@pytest.mark.usefixtures("backend")
async def test_runner_turns_are_kept_and_replayed_from_the_store(store: StateStore) -> None:
    model = ScriptedModel()
    agent = Agent(name="helper", model=model)
    session = HermesSession("runner", store)
    model.enqueue([_text("東京です。")])
    first = await Runner.run(agent, "日本の首都は？", session=session)
    model.enqueue([_text("它在本州。")])
    await Runner.run(agent, "它在哪个岛？", session=session)
    assert first.final_output == "東京です。"
    sent = model.calls[-1].input
    assert [item.get("content") for item in sent][:1] == ["日本の首都は？"]
    assert len(await session.get_items()) == 4
    assert [hit.session_id for hit in store.search("本州")] == ["runner"]


def _text(text: str) -> Any:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    return ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
    )


async def test_the_operator_tools_see_and_keep_the_sessions(home: Path) -> None:
    with StateStore.open(home) as store:
        session = HermesSession("ops", store)
        await session.add_items(ITEMS)
        await session.pop_item()
        before = await session.get_items()

    listing = run_cli("--home", home, "sessions", "list", "--json", cwd=home)
    assert listing.code == 0, listing.stderr
    assert [(s["id"], s["source"]) for s in json.loads(listing.stdout)] == [("ops", SOURCE)]
    for query in ("首都", "東京", "晴れ"):  # Chinese, Japanese, a tool's output
        found = run_cli("--home", home, "search", query, "--json", cwd=home)
        assert found.code == 0, found.stderr
        assert {hit["session_id"] for hit in json.loads(found.stdout)["hits"]} == {"ops"}, query
    for args in (
        ("doctor",),
        ("sessions", "repair"),
    ):
        done = run_cli("--home", home, *args, cwd=home)
        assert done.code == 0, (args, done.stdout, done.stderr)

    snap = run_cli("--home", home, "snapshot", "create", "--label", "agents", "--json", cwd=home)
    assert snap.code == 0, snap.stderr
    with StateStore.open(home) as store:
        session = HermesSession("ops", store)
        assert await session.get_items() == before  # the repair changed nothing
        await session.clear_session()
    snap_id = json.loads(snap.stdout)["id"]
    restored = run_cli("--home", home, "snapshot", "restore", snap_id, "--yes", cwd=home)
    assert restored.code == 0, restored.stderr
    with StateStore.open(home) as store:
        assert await HermesSession("ops", store).get_items() == before


def test_the_rows_are_display_only_so_a_transcript_repair_leaves_them_alone(home: Path) -> None:
    # Seen through sqlite3, not the store: the session's rows are display-only, so a
    # transcript repair never merges an output message with the function call after it.
    async def run() -> None:
        with StateStore.open(home) as store:
            await HermesSession("shape", store).add_items(ITEMS[1:3])

    asyncio.run(run())
    with sqlite3.connect(home / "state.db") as con:
        rows = con.execute(
            "SELECT role, display_only FROM messages WHERE session_id = 'shape' ORDER BY id"
        ).fetchall()
    assert rows == [("assistant", 1), ("assistant", 1)]


async def test_a_damaged_file_quarantines_and_the_items_are_kept_for_recovery(
    home: Path, forget_quarantine: Any
) -> None:
    with StateStore.open(home) as store:
        await HermesSession("damaged", store).add_items(ITEMS[:2])
    db = forget_quarantine(home / "state.db")
    damage.checkpoint_and_close(db)
    damage.overwrite_page(db, damage.btree_pages(db, "messages")[-1])
    store = StateStore.open(home)
    try:
        session = HermesSession("damaged", store)
        with pytest.raises(StateDbCorruptError, match="sessions salvage"):
            await session.add_items([ITEMS[2]])
        assert store.quarantined
        kept = list((home / "sessions").glob("damaged*.jsonl"))
        assert len(kept) == 1 and "東京" in kept[0].read_text(encoding="utf-8")
    finally:
        store.close()


async def test_a_first_turn_spooled_and_replayed_stays_the_sdks_session(
    home: Path, tmp_path: Path
) -> None:
    # The replay creates the session: with the source its writer recorded, so the door
    # finds its own session again (it was created as 'cli' and refused for good).
    with StateStore.open(home) as store:
        session = HermesSession("user@example.com", store, write_budget_s=0.3)
        with write_lock_held_by_another_process(home / "state.db", tmp_path):
            await session.add_items(ITEMS[:2])
        assert await session.get_items() == ITEMS[:2]  # replayed here
        await session.add_items([ITEMS[2]])
        info = store.get_session(session.key)
        assert (info.source, info.title) == (SOURCE, "user@example.com")
    # The same across a restart: the open replays what a dead process spooled.
    with StateStore.open(home) as store:
        session = HermesSession("second", store, write_budget_s=0.3)
        with write_lock_held_by_another_process(home / "state.db", tmp_path / "again"):
            await session.add_items([ITEMS[3]])
    with StateStore.open(home) as store:
        again = HermesSession("second", store)
        await again.add_items([ITEMS[4]])
        assert await again.get_items() == ITEMS[3:5]
        assert store.get_session("second").source == SOURCE


@pytest.mark.usefixtures("backend")
def test_pops_racing_on_one_session_never_take_the_same_item(store: StateStore) -> None:
    items = [{"role": "user", "content": f"m{i}"} for i in range(40)]
    asyncio.run(HermesSession("race", store).add_items(items))

    def popper() -> list[Any]:
        async def run() -> list[Any]:
            session = HermesSession("race", store)
            return [await session.pop_item() for _ in range(10)]

        return asyncio.run(run())

    with ThreadPoolExecutor(4) as pool:
        popped = [item for got in pool.map(lambda _: popper(), range(4)) for item in got]
    assert sorted(i["content"] for i in popped) == sorted(i["content"] for i in items)
    assert asyncio.run(HermesSession("race", store).get_items()) == []


WAIT_S = 60.0
_PAUSED: contextvars.ContextVar[bool] = contextvars.ContextVar("paused", default=False)


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
def test_a_pop_from_another_store_waits_for_the_session_row_lock(
    backend: str,
    store: StateStore,
    pg_server: PgServer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Two stores of one database in two homes (as two gateways have): no in-process
    lock is shared, so only the server keeps their pops apart. Pop A stops after reading
    the newest item, inside its unit; pop B must then queue on the session row's lock,
    not take that item too."""
    items = [{"role": "user", "content": f"m{i}"} for i in range(4)]
    asyncio.run(HermesSession("race", store).add_items(items))
    read = threading.Event()
    resume = threading.Event()
    real_list = MessageRepository.list

    def pausing_list(self: MessageRepository, *args: Any, **kwargs: Any) -> Any:
        found = real_list(self, *args, **kwargs)
        if _PAUSED.get() and not read.is_set():
            read.set()
            resume.wait(WAIT_S)
        return found

    monkeypatch.setattr(MessageRepository, "list", pausing_list)
    popped: dict[str, Any] = {}

    def pop(name: str, pause: bool) -> None:
        with StateStore.open(tmp_path / name) as own:

            async def run() -> Any:
                session = HermesSession("race", own)
                await session.get_items(1)  # opened (and replayed) before the race
                _PAUSED.set(pause)
                return await session.pop_item()

            popped[name] = asyncio.run(run())

    a = threading.Thread(target=pop, args=("a", True))
    a.start()
    assert read.wait(WAIT_S), "pop A never read the newest item"
    b = threading.Thread(target=pop, args=("b", False))
    b.start()
    database = make_url(os.environ["HERMES_REPO_URL"]).database
    # Event-driven: B shows up waiting on a lock in the server (or, without the row
    # lock, B simply finishes, having taken A's item).
    with pg_server.admin() as admin:
        for _ in range(int(WAIT_S / 0.01)):
            waiting = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s "
                "AND wait_event_type = 'Lock'",
                (database,),
            ).fetchone()
            if (waiting and waiting[0]) or not b.is_alive():
                break
            threading.Event().wait(0.01)
    resume.set()
    a.join(WAIT_S)
    b.join(WAIT_S)
    assert popped["a"] == items[3]
    assert popped["b"] == items[2], "two pops took the same item"
    assert asyncio.run(HermesSession("race", store).get_items()) == items[:2]


@pytest.mark.usefixtures("backend")
async def test_a_nul_in_a_tool_output_is_stored_whole_on_every_backend(
    store: StateStore,
) -> None:
    turn = [
        {"role": "user", "content": "cat the file"},
        {"type": "function_call", "call_id": "c1", "name": "cat", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ELF\x00\x01binary"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"text": "a\x00b"}]},
    ]
    session = HermesSession("nul", store)
    await session.add_items(turn)
    assert await session.get_items() == turn
    assert [h.session_id for h in store.search("binary")] == ["nul"]


@pytest.mark.usefixtures("backend")
async def test_a_hashed_id_given_literally_is_another_session(store: StateStore) -> None:
    alice = HermesSession("alice@example.com", store)
    await alice.add_items([ITEMS[0]])
    intruder = HermesSession(alice.key, store)  # "oa-<hash of alice's id>", verbatim
    assert intruder.key != alice.key
    assert await intruder.get_items() == []
    await intruder.clear_session()
    assert await alice.get_items() == [ITEMS[0]]


async def test_odd_arguments_are_refused_with_a_library_error(store: StateStore) -> None:
    session = HermesSession("odd", store)
    await session.add_items(ITEMS[:3])
    for bad in (True, "3", 2.5):
        with pytest.raises(IntegrityViolation, match="limit must be a whole number"):
            await session.get_items(bad)  # type: ignore[arg-type]
    assert await session.get_items(2**63) == ITEMS[:3]  # beyond any length: all
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(IntegrityViolation, match="nested too deeply"):
        await session.add_items([{"role": "user", "content": deep}])
    for budget in (-1, float("nan"), float("inf")):
        with pytest.raises(ConfigurationError, match="write_budget_s"):
            HermesSession("odd", store, write_budget_s=budget)
    assert await session.get_items() == ITEMS[:3]


async def test_items_returned_while_spooled_are_the_callers_to_change(
    home: Path, tmp_path: Path
) -> None:
    with StateStore.open(home) as store:
        session = HermesSession("copies", store, write_budget_s=0.3)
        with write_lock_held_by_another_process(home / "state.db", tmp_path):
            await session.add_items([dict(ITEMS[1])])
            got = await session.get_items()
            got[0].pop("id")  # an input filter editing the history it was given
            assert await session.get_items() == [ITEMS[1]]


async def test_closing_every_session_object_forgets_the_shared_tail(store: StateStore) -> None:
    # A gateway's per-request sessions must not pile up state for ever.
    before = len(openai_agents._tails)
    sessions = [HermesSession("gateway", store) for _ in range(3)]
    for session in sessions:
        await session.get_items()
    assert len(openai_agents._tails) == before + 1
    for session in sessions:
        session.close()
    assert len(openai_agents._tails) == before
