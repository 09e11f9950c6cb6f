"""Facts about the store's file and schema, shared by the store and the operator tools.

One home for what used to be restated module by module:

- :mod:`.tables`: the canonical tables (the store's data; everything else is derived)
  and how rows are counted;
- :mod:`.files`: the side files SQLite keeps beside ``state.db``, read-only opens,
  ``fsync`` of files and folders, free space;
- :mod:`.sidefiles`: the store's own side files (0600, ``O_NOFOLLOW``, flock on the fd);
- :mod:`.fts`: the full-text indexes' DDL as data, detach and rebuild statements
  (the guarded rebuild of a live store is :mod:`hermes_repo.maintenance.fts_rebuild`);
- :mod:`.migrate`: the Alembic runner and the schema status of a file;
- :mod:`.backup`: raw backups beside the store.

The package imports nothing at package level, so each module costs only what it uses.
"""
