"""Operations on a live store file that opening it may need too.

Above the file and schema facts (:mod:`hermes_repo.schema`), the holder registry and
the journal checks (:mod:`hermes_repo.holders`, :mod:`hermes_repo.walcheck`); below the
store, which runs them at open, and the operator tools (:mod:`hermes_repo.ops`), which
run them on request:

- :mod:`.fts_rebuild`: the guarded rebuild of a detached full-text index (holder check,
  backup, bounded attempts).

The package imports nothing at package level, so each module costs only what it uses.
"""
