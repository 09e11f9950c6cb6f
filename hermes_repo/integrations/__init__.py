"""Conversation memory for agent frameworks, built on the public API only.

Each module is one framework's door into the same store: what it saves is an ordinary
session (listed, searched, checked, snapshotted and repaired like any other).

* :mod:`hermes_repo.integrations.openai_agents`: ``HermesSession``, a ``Session`` for
  the OpenAI Agents SDK (extra ``hermes_repo[openai-agents]``).
* :mod:`hermes_repo.integrations.pydantic_ai`: ``HermesConversationStore``, a
  ``ConversationStore`` for pydantic-ai (extra ``hermes_repo[pydantic-ai]``).
* :mod:`hermes_repo.integrations.langgraph`: ``HermesSaver``, a checkpointer
  (``BaseCheckpointSaver``) for LangGraph (extra ``hermes_repo[langgraph]``).

None is imported by ``import hermes_repo``: the frameworks are optional.
"""
