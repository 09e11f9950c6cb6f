"""Operations on a live store file that opening it may need too.

Above the file and schema facts (:mod:`hermes_repo.schema`), the holder registry and
the journal checks (:mod:`hermes_repo.holders`, :mod:`hermes_repo.walcheck`); below the
store, which runs them at open, and the operator tools (:mod:`hermes_repo.ops`), which
run them on request:

- :mod:`.fts_rebuild`: the guarded rebuild of a detached full-text index (holder check,
  backup, bounded attempts);
- :mod:`.upgrade`: the one upgrade of a store file (refusals, a restore point first,
  the migrations in one transaction), run by ``hermes-repo db upgrade`` and by
  ``StateStore.open(upgrade=True)``, and the reports of where a file stands;
- :mod:`.snapshots`: verified, restorable copies of the store (the upgrade's restore
  point, ``snapshot create/restore``);
- :mod:`.sqlite_only`: the refusal of a file-only operation on a server, and the
  server's own tools to name instead.

The package imports nothing at package level, so each module costs only what it uses.
"""
