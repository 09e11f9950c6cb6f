"""`snapshot create` (and `snapshot restore`) on 50k, 100k and 200k-message stores vs raw DB-API.

The library side is :func:`hermes_repo.maintenance.snapshots.create_snapshot`: backup API copy
from a read-only connection, switch of the copy to a rollback journal,
``PRAGMA integrity_check``, counts, fsync, sha256, manifest, retention. The raw side does
the same work by hand with the same DB-API module (backup, ``journal_mode=DELETE``,
``integrity_check``, the three counts, fsync, sha256), so the ratio is what the layer
adds. The breakdown shows where the time goes (backup alone, integrity_check alone), and
the restore line times :func:`restore_snapshot` of the same snapshot (which verifies the
sha256 and integrity_check of the snapshot, takes a pre-restore snapshot of the current
store, then copies).

    python benchmarks/bench_snapshot.py [--quick] [--runs N] [--json FILE]
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

from _common import (
    SESSIONS,
    Corpus,
    Result,
    checkpoint,
    driver,
    fill,
    interleave,
    new_store,
    parser,
    payload,
    print_table,
    run_main,
    session_ids,
    store_db,
    timed,
    workspace,
    write_json,
)

from hermes_repo.maintenance.snapshots import SNAPSHOT_DIR, create_snapshot, restore_snapshot

NAME = "snapshot"


def raw_snapshot(src: Path, dest: Path) -> dict[str, Any]:
    """What a careful hand-written sqlite3 program does for a verified snapshot."""
    mod = driver().module
    source = mod.connect(src.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        target = mod.connect(str(dest), isolation_level=None)
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode = DELETE").fetchall()
            assert target.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            counts = {
                "sessions": target.execute("SELECT count(*) FROM sessions").fetchone()[0],
                "messages": target.execute("SELECT count(*) FROM messages").fetchone()[0],
                "active": target.execute(
                    "SELECT count(*) FROM messages WHERE active = 1"
                ).fetchone()[0],
            }
        finally:
            target.close()
    finally:
        source.close()
    fd = os.open(dest, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    digest = hashlib.sha256()
    with open(dest, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return {"counts": counts, "sha256": digest.hexdigest()}


def backup_only(src: Path, dest: Path) -> None:
    mod = driver().module
    source = mod.connect(src.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        target = mod.connect(str(dest))
        try:
            source.backup(target)
        finally:
            target.close()
    finally:
        source.close()


def integrity_only(path: Path) -> None:
    mod = driver().module
    con = mod.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        con.close()


def median_ms(fn: Any, runs: int) -> float:
    samples = sorted(timed(fn)[0].wall for _ in range(runs))
    return samples[len(samples) // 2] * 1000.0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--sizes", type=int, nargs="*", default=None, help="store sizes in messages (ascending)"
    )
    args = p.parse_args(argv)
    sizes = sorted(
        args.sizes or ([5_000, 10_000, 20_000] if args.quick else [50_000, 100_000, 200_000])
    )
    runs = args.runs or (3 if args.quick else 5)

    results: list[Result] = []
    notes: dict[str, str] = {}
    with workspace() as ws:
        home = ws.home("lib")
        sids = session_ids(SESSIONS)
        store = new_store(home, sids)
        corpus = Corpus()
        have = 0
        for size in sizes:
            t0 = time.perf_counter()
            fill(store, corpus, size - have, sids, seed_offset=have)
            have = size
            checkpoint(store_db(store))
            build_s = time.perf_counter() - t0
            db = store_db(store)
            mib = db.stat().st_size / 2**20
            raw_dir = ws.root / f"raw-{size}"
            raw_dir.mkdir()

            def lib(i: int) -> Any:
                return create_snapshot(home, keep=runs + 2)

            def raw(i: int, db: Path = db, raw_dir: Path = raw_dir) -> Any:
                return raw_snapshot(db, raw_dir / f"{i}.db")

            result = Result(
                f"snapshot create, {size // 1000}k msgs",
                "ms",
                work=1,
                extra={"messages": size, "db_mib": round(mib, 1), "build_s": round(build_s, 1)},
            )
            interleave(result, runs, lib, raw)
            scratch = ws.root / f"scratch-{size}"
            scratch.mkdir()
            counter = iter(range(10_000))
            backup_ms = median_ms(
                lambda db=db, scratch=scratch, counter=counter: backup_only(
                    db, scratch / f"b{next(counter)}.db"
                ),
                runs,
            )
            check_ms = median_ms(lambda db=db: integrity_only(db), runs)
            result.extra.update({"backup_only_ms": backup_ms, "integrity_check_ms": check_ms})
            notes[result.name] = (
                f"{mib:,.0f} MiB; backup alone {backup_ms:,.0f} ms, "
                f"integrity_check alone {check_ms:,.0f} ms"
            )
            results.append(result)
            shutil.rmtree(raw_dir)
            shutil.rmtree(scratch)

        # Restore of the newest snapshot of the largest store (the store is closed first:
        # a restore refuses while any StateStore has it open).
        snap = create_snapshot(home, keep=runs + 2)
        store.close()
        restore = Result(f"snapshot restore, {sizes[-1] // 1000}k msgs", "ms", work=1)
        raw_dir = ws.root / "raw-restore"
        raw_dir.mkdir()

        def raw_restore(i: int) -> None:
            target = home / "state.db"
            verify = hashlib.sha256(snap.path.read_bytes()).hexdigest()
            assert verify == snap.sha256
            integrity_only(snap.path)
            raw_snapshot(target, raw_dir / f"pre-{i}.db")
            temp = home / f"raw-restore-{i}.tmp"
            backup_only(snap.path, temp)
            fd = os.open(temp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(temp, target)

        interleave(restore, runs, lambda i: restore_snapshot(home, snap.id), raw_restore)
        notes[restore.name] = (
            "verify snapshot (sha256, integrity_check) + pre-restore snapshot + copy"
        )
        results.append(restore)
        kept = len(list((home / SNAPSHOT_DIR).glob("*.json")))
        notes[restore.name] += f"; {kept} snapshots on disk at the end"

    print_table(f"snapshots, {runs} runs per size (medians)", results, notes)
    data = payload(NAME, {"sizes": sizes, "runs": runs}, results)
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
