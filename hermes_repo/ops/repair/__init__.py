"""``repair_store(home)``: the operator's explicit repair, ``hermes-repo sessions repair``.

Every log line and doctor finding about a detached or damaged search index names this
command. It runs with every other process stopped (seed 003: "stop every process that
may have the database open, and keep them stopped through repair and verification"),
and in this order:

1. **Refuse at once while the store is held.** The holder lock is taken exclusive,
   without waiting; if any other process has the store open the repair stops with
   :class:`RepairStoreHeldError`, naming the pids, before reading or writing anything.
   The lock is held to the end, so nobody opens the store halfway through.
2. **Diagnose** with :func:`~hermes_repo.ops.doctor.diagnose` (read-only): the SQLite
   header and a ``quick_check`` of the canonical tables tell *structural* damage (the
   file: b-trees, schema, header) from *index* damage (the derived FTS tables, a stale
   marker, missing triggers). A schema the repair cannot work on (missing, behind or
   ahead of the code, foreign) is refused with the doctor's command.
3. **Record the canonical counts, take a backup** through SQLite's backup API from a
   read-only connection (``state.db.pre-repair-<time>.bak``; never a file copy), and,
   when the whole file passes ``integrity_check``, a verified snapshot
   (:func:`~hermes_repo.maintenance.snapshots.snapshot_before`, label ``pre-repair``) that
   ``snapshot restore`` can put back.
4. **Structural damage is not repaired in place**: a rebuild or any write on a damaged
   b-tree can turn a readable file into an unopenable one. The live file and the backup
   are left as they are and the report names the next commands, ``sessions salvage
   --inspect-only`` and then ``--output NEW.db`` (or a snapshot restore).
5. **Index damage** (a stale marker, missing triggers, an index that fails its checks
   or misses messages it should find, see :func:`~hermes_repo.schema.fts.coverage_check`;
   with ``rebuild_search``, always) is rebuilt by
   :func:`~hermes_repo.maintenance.fts_rebuild.guarded_rebuild` with ``automatic=False``
   (the operator asked: the attempt ledger does not stop it) and ``force=True``
   (triggers can be missing, or an index damaged, without a marker).
6. **Transcripts** that break role alternation or tool pairing are repaired
   (:func:`~hermes_repo.ops.transcript_check.repair_transcripts`: archived, never
   deleted).
7. **Verify**, as the seed does by hand: ``PRAGMA integrity_check`` is ok, FTS5's
   ``'integrity-check'`` (with rank 1, which compares each index with its rows) passes
   for both indexes, each index finds the messages it covers (the coverage check), no
   ``fts_stale`` row, the six sync triggers present, and the canonical counts not lower
   than in step 3 (invariant 3: lower would be a bug).

On any failure the live file and the backup are both kept and the report says which
command comes next. ``check_only=True`` runs the same diagnosis and writes nothing (no
lock, no backup, no rebuild): the doctor's findings plus the transcript invariants.

The repair never goes through :meth:`StateStore.open`: an open registers a shared hold
on the store (which would block our own exclusive lock, or, taken after it, wait for it
forever) and may start the automatic rebuild. It opens its own engine with
:func:`~hermes_repo.engine.create_store_engine` and the quarantine listeners, and passes
its one :class:`~hermes_repo.holders.HolderLock` (re-entrant) to the rebuild.
"""

from __future__ import annotations

from .run import RepairError, RepairStoreHeldError, repair_store
from .verdict import BACKUP_LABEL, Damage, RepairReport, VerifyItem
from .verify import verify

__all__ = [
    "BACKUP_LABEL",
    "Damage",
    "RepairError",
    "RepairReport",
    "RepairStoreHeldError",
    "VerifyItem",
    "repair_store",
    "verify",
]
