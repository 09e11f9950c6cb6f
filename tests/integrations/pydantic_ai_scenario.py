"""One scripted life of pydantic-ai conversations, run on any ConversationStore.

Every call's observable result (returned conversations, entries, records, errors) is
recorded as JSON, so two stores can be compared exactly. Ids and revisions are minted
afresh by each run, so :func:`normalized` names each one by its first appearance: two
stores agree when their results have the same structure (which entries are shared,
which revision is which) and are equal in everything else.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
from pydantic_ai.conversation import Conversation
from pydantic_ai.conversation_store import ConversationEntry, ConversationRecord, ConversationStore
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.models.test import TestModel

agent = Agent(TestModel())


@agent.tool_plain
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: 晴れ、気温は二十度 ☀️ 天气很好"


# A run of this agent pauses for approval: the record carries the deferred requests.
approving_agent = Agent(TestModel(), output_type=[str, DeferredToolRequests])


@approving_agent.tool_plain(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file (needs approval)."""
    return f"削除しました {path} 🗑️"


PROMPTS = {
    "first": "你好，世界！今日は良い天気ですね 🎉 东京的天气怎么样？",
    "second": "続けてください 🍣 请继续",
    "stale": "この保存は古い 📜",
    "branch": "分岐したあとの質問 🌿 分支",
    "fork": "フォークした会話 🍴 分叉对话",
    "again": "削除のあとで新しく 🆕 重新开始",
    "rewrite": "書き直し ✏️ 重写",
    "approve": "このファイルを消してください 🗑️ 删除文件",
}

_RECORD = TypeAdapter(ConversationRecord)
_DEFERRED = TypeAdapter(DeferredToolRequests)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?")


def messages_json(messages: list[ModelMessage]) -> Any:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def conversation_json(conversation: Conversation | None) -> Any:
    if conversation is None:
        return None
    return {
        "conversation_id": conversation.conversation_id,
        "messages": messages_json(conversation.messages),
        "usage": TypeAdapter(type(conversation.usage)).dump_python(conversation.usage, mode="json"),
        "deferred": (
            None
            if conversation.deferred_tool_requests is None
            else _DEFERRED.dump_python(conversation.deferred_tool_requests, mode="json")
        ),
        "revision": conversation.revision,
        "new_message_index": conversation.new_message_index,
    }


def entries_json(entries: list[ConversationEntry] | None) -> Any:
    if entries is None:
        return None
    return [
        {
            "id": e.id,
            "parent_id": e.parent_id,
            "kind": e.kind,
            "message": messages_json([e.message])[0],
        }
        for e in entries
    ]


def records_json(records: list[ConversationRecord]) -> Any:
    return [_RECORD.dump_python(r, mode="json") for r in records]


def normalized(observations: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The observations with each uuid named by its first appearance and times blanked."""
    labels: dict[str, str] = {}

    def label(match: re.Match[str]) -> str:
        return labels.setdefault(match.group(0), f"<id{len(labels)}>")

    text = json.dumps(observations, ensure_ascii=False)
    text = _UUID.sub(label, _TIME.sub("<time>", text))
    return [tuple(step) for step in json.loads(text)]  # type: ignore[misc]


class Recorder:
    def __init__(self) -> None:
        self.steps: list[tuple[str, Any]] = []

    async def __call__(self, name: str, call: Any) -> Any:
        """Await ``call``, record its result (or error), return the result (None on error)."""
        try:
            result = await call
        except UserError as exc:  # ConversationConflict is one too
            self.steps.append((name, {"error": type(exc).__name__, "message": str(exc)}))
            return None
        self.steps.append((name, self._json(result)))
        return result

    @staticmethod
    def _json(result: Any) -> Any:
        if result is None or isinstance(result, Conversation):
            return conversation_json(result)
        if isinstance(result, list) and all(isinstance(r, ConversationEntry) for r in result):
            return entries_json(result)
        if isinstance(result, list):
            return records_json(result)
        raise TypeError(type(result))


async def scenario(store: ConversationStore) -> tuple[list[tuple[str, Any]], dict[str, bytes]]:
    """Run the script on ``store``: the observations, and each stored conversation's
    messages as the last run left them (``dump_json``), to compare after a reopen."""
    rec = Recorder()
    final: dict[str, bytes] = {}

    async def turn(conversation: Conversation, prompt: str, scope: str | None = None) -> Any:
        result = await agent.run(PROMPTS[prompt], conversation=conversation)
        saved = await rec(f"save {prompt}", store.save(result, scope=scope))
        if saved is not None:
            final[conversation.conversation_id] = ModelMessagesTypeAdapter.dump_json(
                result.all_messages()
            )
        return result

    await rec("load missing", store.load("c1"))
    first = await turn(Conversation(conversation_id="c1"), "first", scope="alice")
    loaded = await rec("load", store.load("c1"))
    await rec("load limit", store.load("c1", limit=2))
    await rec("load other scope", store.load("c1", scope="bob"))
    await rec("load own scope", store.load("c1", scope="alice"))
    await rec("load_entries", store.load_entries("c1"))
    await rec("load_entries limit", store.load_entries("c1", limit=3))
    await turn(await store.load("c1"), "second")
    # A copy loaded before the second turn was saved: its save must conflict.
    await turn(loaded, "stale")
    await turn(await store.load("c1"), "second", scope="bob")  # saved with another scope
    # A conversation that was never loaded, under a stored id.
    await turn(Conversation(conversation_id="c1"), "stale")

    current = await store.load("c1")
    assert current is not None
    await rec(
        "branch stale", store.branch("c1", at=1, expected_revision=first.conversation.revision)
    )
    await rec("branch range", store.branch("c1", at=99, expected_revision=current.revision))
    await rec(
        "branch both", store.branch("c1", at=1, from_entry="x", expected_revision=current.revision)
    )
    await rec(
        "branch scope", store.branch("c1", at=2, expected_revision=current.revision, scope="bob")
    )
    branched = await rec("branch at", store.branch("c1", at=4, expected_revision=current.revision))
    await turn(branched, "branch")
    history = await store.load_entries("c1")
    record = (await store.list_conversations())[0]
    assert history is not None and record.branches
    left_tip = record.branches[0]
    current = await store.load("c1")
    await rec(
        "branch from_entry",
        store.branch("c1", from_entry=left_tip, expected_revision=current.revision),
    )
    current = await store.load("c1")
    await rec(
        "branch unknown entry",
        store.branch("c1", from_entry="no-such-entry", expected_revision=current.revision),
    )
    await rec("load after branch back", store.load("c1"))

    fork = await rec("fork at", store.fork("c1", at=4, new_conversation_id="c1-fork", scope="bob"))
    await turn(fork, "fork")
    await rec(
        "fork from_entry",
        store.fork("c1", from_entry=history[1].id, new_conversation_id="c1-fork-2"),
    )
    await rec("fork exists", store.fork("c1", new_conversation_id="c1-fork"))
    await rec("fork other scope", store.fork("c1", source_scope="bob", new_conversation_id="x"))
    await rec("fork missing", store.fork("nope", new_conversation_id="y"))
    await rec("fork whole, new id", store.fork("c1"))
    await rec("fork of a fork", store.fork("c1-fork", at=3, new_conversation_id="c1-fork-fork"))

    for scope in (None, "alice", "bob", "nobody"):
        for limit in (None, 0, 1, 2):
            await rec(f"list {scope} {limit}", store.list_conversations(scope=scope, limit=limit))
    await rec("list negative", store.list_conversations(limit=-1))

    stale_c1 = await store.load("c1")
    await rec("delete other scope", store.delete("c1", scope="bob"))
    await rec("load kept", store.load("c1"))
    await rec("delete", store.delete("c1", scope="alice"))
    await rec("load deleted", store.load("c1"))
    await rec("delete again", store.delete("c1"))
    await rec("fork into deleted history", store.load_entries("c1-fork"))
    await rec("fork of fork into deleted history", store.load("c1-fork-fork"))
    await rec("list after delete", store.list_conversations())
    await turn(stale_c1, "stale")  # saved over a deleted conversation: conflict
    await turn(Conversation(conversation_id="c1"), "again")  # a new life under the id
    await rec("load recreated", store.load_entries("c1"))

    # A history rewritten by hand (no stored boundary): it branches off the shared part.
    fork_now = await store.load("c1-fork")
    assert fork_now is not None
    rewritten = Conversation(
        conversation_id="c1-fork",
        messages=list(fork_now.messages[:4]),
        usage=fork_now.usage,
        revision=fork_now.revision,
    )
    await turn(rewritten, "rewrite")
    await rec("load rewritten", store.load_entries("c1-fork"))

    # A run that pauses for approval: the deferred requests travel with the record, a
    # fork of the whole conversation and its answer.
    paused = await approving_agent.run(
        PROMPTS["approve"], conversation=Conversation(conversation_id="paused")
    )
    await rec("save paused", store.save(paused))
    waiting = await rec("load paused", store.load("paused"))
    await rec("fork paused", store.fork("paused", new_conversation_id="paused-fork"))
    assert waiting is not None and waiting.deferred_tool_requests is not None
    approvals = {call.tool_call_id: True for call in waiting.deferred_tool_requests.approvals}
    answered = await approving_agent.run(
        conversation=waiting, deferred_tool_results=DeferredToolResults(approvals=approvals)
    )
    await rec("save answered", store.save(answered))
    final["paused"] = ModelMessagesTypeAdapter.dump_json(answered.all_messages())
    await rec("load answered", store.load("paused"))
    await rec("list at the end", store.list_conversations())
    for cid in ("c1", "c1-fork", "c1-fork-2", "c1-fork-fork", "paused-fork"):
        loaded_now = await store.load(cid)
        if loaded_now is not None and cid not in final:
            final[cid] = ModelMessagesTypeAdapter.dump_json(loaded_now.messages)
    return rec.steps, final
