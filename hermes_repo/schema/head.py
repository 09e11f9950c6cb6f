"""The schema revision this code expects, in a module that imports nothing.

Read by the store's open (:mod:`hermes_repo.schema.migrate`) and by the CLI's quick
reader, which must not load the ORM models that ``migrate`` brings; a new migration
changes :data:`HEAD_REVISION` here (a test compares it with Alembic's head).
"""

HEAD_REVISION = "0007_tool_call_search"
