"""A short mutation check: plant one bug at a time in a copy of the project and run the
tests that claim to catch it.

Each mutation replaces one exact piece of source text (it must occur exactly once, or
the mutation is reported "stale": the code moved and the mutation needs updating). The
project is copied to a scratch folder (without ``.venv`` and ``.git``), the bug is
planted in the copy, and the named tests run there with the current interpreter and
``PYTHONPATH`` pointing at the copy, so the working tree is never modified. A mutation
is *killed* when the named tests fail, *survived* when they pass.

Not part of the default pytest run (the file is not named ``test_*``). Rerun::

    .venv/bin/python tests/mutation/run_mutations.py            # all
    .venv/bin/python tests/mutation/run_mutations.py quarantine  # names containing a word
    .venv/bin/python tests/mutation/run_mutations.py --rotate 5  # today's 5 (what CI runs)
    .venv/bin/python tests/mutation/run_mutations.py --list

The named tests run on one worker (``-n 0``): under xdist a failing test with ``-x``
ends the session as "interrupted" (exit 2), which would hide every kill. Mutations whose
tests need PostgreSQL run when ``HERMES_TEST_PG_URL`` names a server, and are reported
"skipped" otherwise (a failure under ``HERMES_TEST_REQUIRE_PG=1``, as in CI).

The exit status is 0 only when every selected mutation was killed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutation:
    """One planted bug: ``old`` becomes ``new`` in ``file``; ``tests`` must kill it."""

    name: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str
    needs_pg: bool = False
    """The tests need the PostgreSQL test server (``HERMES_TEST_PG_URL``)."""


QP = "tests/faults/test_quarantine_paths.py"
RS = "tests/integration/test_recovery_spool.py"
FD = "tests/faults/test_fts_damage.py"
RP = "tests/unit/test_repair.py"
SD = "tests/faults/test_spool_durability.py"
FM = "tests/faults/test_fts_multiprocess.py"
OA = "tests/integrations/test_openai_agents_session.py"
LR = "tests/faults/test_pg_lost_commit_reply.py"
SO = "tests/integration/test_spool_ownership.py"
SE = "tests/integration/test_search.py"
FF = "tests/faults/test_flush_faults.py"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "quarantine-handle-error",
        "hermes_repo/core/verdict.py",
        "        elif structural:\n            error = StateDbCorruptError(\n",
        "        elif False:\n            error = StateDbCorruptError(\n",
        (f"{QP}::test_structural_damage_met_on_any_path_quarantines_and_nothing_reaches_the_file",),
        "a structural verdict no longer quarantines the file",
    ),
    Mutation(
        "quarantine-statement-guard",
        "hermes_repo/quarantine.py",
        "        if guard.active and (\n",
        "        if False and guard.active and (\n",
        (f"{QP}::test_structural_damage_met_on_any_path_quarantines_and_nothing_reaches_the_file",),
        "a statement that writes is no longer refused on a quarantined store",
    ),
    Mutation(
        "quarantine-begin-hook",
        "hermes_repo/quarantine.py",
        "        if conn.get_execution_options().get(WRITE_OPTION):\n            refuse()",
        "        if conn.get_execution_options().get(WRITE_OPTION):\n            pass",
        (f"{QP}::test_the_begin_hook_alone_refuses_a_write_transaction",),
        "a write transaction is no longer refused at BEGIN",
    ),
    Mutation(
        "quarantine-close-checkpoint",
        "hermes_repo/quarantine.py",
        "        if guard.active and not disable_checkpoint_on_close(",
        "        if False and guard.active and not disable_checkpoint_on_close(",
        (f"{QP}::test_close_of_a_quarantined_store_does_no_checkpoint",),
        "close checkpoints a quarantined store (no C switch, no sentinel)",
    ),
    Mutation(
        "quarantine-close-sentinel",
        "hermes_repo/quarantine.py",
        "def _hold_sentinel(driver: Driver, db_path: Path) -> None:\n",
        "def _hold_sentinel(driver: Driver, db_path: Path) -> None:\n    return\n",
        (f"{QP}::test_close_of_a_quarantined_store_does_no_checkpoint",),
        "the read-only sentinel (fallback without the C switch) is never opened",
    ),
    Mutation(
        "replay-ignores-stored-uids",
        "hermes_repo/transcript/replay_plan.py",
        "if c.uid not in stored and c.uid not in skip]",
        "if c.uid not in skip]",
        (f"{RS}::test_records_with_uid_are_inserted_once_in_file_order",),
        "spool replay no longer skips records whose uid is already stored",
    ),
    Mutation(
        "degrade-keeps-triggers",
        "hermes_repo/schema/fts/stale.py",
        '    for name in TRIGGER_NAMES:\n        conn.execute(text(f"DROP TRIGGER IF EXISTS',
        '    for name in ():\n        conn.execute(text(f"DROP TRIGGER IF EXISTS',
        (f"{FD}::test_write_through_a_damaged_index_succeeds_with_the_index_detached",),
        "degrading the index marks it stale but leaves the sync triggers in place",
    ),
    Mutation(
        "degrade-not-recognised",
        "hermes_repo/core/verdict.py",
        "        elif kind is ErrorKind.FTS:\n            fts_damage = True",
        "        elif kind is ErrorKind.FTS:\n            fts_damage = False",
        (f"{FD}::test_write_through_a_damaged_index_succeeds_with_the_index_detached",),
        "an FTS error is no longer taken for index damage: the write fails instead",
    ),
    Mutation(
        "repair-duplicate-tool-calls",
        "hermes_repo/transcript/repair.py",
        "                if cid in seen:\n                    continue",
        "                if False:\n                    continue",
        (f"{RP}::test_consecutive_assistants_unite_tool_calls_without_duplicate_ids",),
        "merging assistant turns keeps a tool call re-sent with the same id twice",
    ),
    Mutation(
        "repair-user-separator",
        "hermes_repo/transcript/repair.py",
        '_TEXT_SEPARATORS: Final = {"user": "\\n\\n", "assistant": "\\n"}',
        '_TEXT_SEPARATORS: Final = {"user": "\\n", "assistant": "\\n"}',
        (f"{RP}::test_consecutive_users_merge_into_the_first_with_blank_line",),
        "merged user turns are joined without the blank line",
    ),
    Mutation(
        "escape-fts-quotes",
        "hermes_repo/repositories/search/query.py",
        """    return '"' + term.replace('"', '""') + '"'""",
        """    return '"' + term + '"'""",
        (f"{SE}::test_operator_characters_are_plain_text",),
        "a double quote in a search term is no longer doubled inside the FTS5 string",
    ),
    Mutation(
        "escape-fts-single-quotes",
        "hermes_repo/repositories/search/query.py",
        """    return '"' + term.replace('"', '""') + '"'""",
        '    return "\'" + term.replace("\'", "\'\'") + "\'"',
        (f"{SE}::test_operator_characters_are_plain_text",),
        "terms quoted the SQL way, which FTS5 reads as syntax: every search detaches the index",
    ),
    Mutation(
        "escape-like-wildcards",
        "hermes_repo/repositories/search/query.py",
        """    escaped = term.replace("\\\\", "\\\\\\\\").replace("%", "\\\\%")""",
        '    escaped = term.replace("%", "%")',
        (f"{SE}::test_operator_characters_are_plain_text",),
        "% and \\ in a search term are no longer escaped for LIKE",
    ),
    Mutation(
        "search-rank-cutoff-ignored",
        "hermes_repo/repositories/search/router.py",
        "            if probe.common:",
        "            if False:",
        (f"{SE}::test_a_term_with_more_hits_than_the_rank_cutoff_comes_newest_first_and_complete",),
        "a term past RANK_CUTOFF hits goes through the capped bm25 path",
    ),
    Mutation(
        "retry-transient-not-replayed",
        "hermes_repo/retry.py",
        "            if exc.kind is not ErrorKind.TRANSIENT:\n                raise",
        "            if True:\n                raise",
        (f"{FF}::test_lock_released_within_the_budget_never_spools",),
        "a locked database is not waited out: the first BUSY gives up",
    ),
    Mutation(
        "retry-budget-ignored",
        "hermes_repo/retry.py",
        "            remaining = policy.budget_s - elapsed",
        "            remaining = 0.0",
        (f"{FF}::test_lock_released_within_the_budget_never_spools",),
        "the retry budget is treated as spent after the first attempt",
    ),
    Mutation(
        "spool-append-not-fsynced",
        "hermes_repo/transcript/spool/files.py",
        '                data = b"\\n" + data\n            _write_all(fd, data)\n'
        "            os.fsync(fd)\n",
        '                data = b"\\n" + data\n            _write_all(fd, data)\n',
        (f"{SD}::test_a_spool_append_fsyncs_the_file_and_its_folder_before_it_returns",),
        "a spooled record may still be only in the page cache when the append returns",
    ),
    Mutation(
        "replay-without-spool-lock",
        "hermes_repo/transcript/replay.py",
        "    with spool.spool_lock(home, name):\n        contents = spool.read_spool(home, name, "
        "session_id=session_id)",
        "    if True:\n        contents = spool.read_spool(home, name, session_id=session_id)",
        (f"{SD}::test_recovery_waits_for_a_writer_mid_append_and_replays_its_whole_records",),
        "recovery reads (and deletes) a spool file a writer is appending to",
    ),
    Mutation(
        "verdict-skips-sessions-table",
        "hermes_repo/quarantine.py",
        '            for t in ("sessions", "messages")',
        '            for t in ("messages",)',
        (f"{QP}::test_damage_in_the_sessions_table_is_structural_and_quarantines",),
        "damage in the sessions table is taken for index damage: the file is not quarantined",
    ),
    Mutation(
        "quarantine-lets-insert-through",
        "hermes_repo/quarantine.py",
        '    r"\\b(INSERT|UPDATE|DELETE',
        '    r"\\b(UPDATE|DELETE',
        (
            f"{QP}::test_structural_damage_met_on_any_path_quarantines_and_nothing_reaches_the_"
            "file[core-leaf]",
        ),
        "an INSERT reaches a quarantined file",
    ),
    Mutation(
        "index-state-never-read-again",
        "hermes_repo/repositories/search/liveness.py",
        "        if cookie != self._seen_at:",
        "        if self._seen_at is None:",
        (f"{FM}::test_a_process_that_searched_before_the_index_was_detached_notices_it_next_time",),
        "a process that searched once never notices another process detaching the index",
    ),
    Mutation(
        "pop-without-row-lock",
        "hermes_repo/repositories/sessions.py",
        "        row = self._db.execute(stmt.with_for_update() if lock else stmt).first()",
        "        row = self._db.execute(stmt).first()",
        (f"{OA}::test_a_pop_from_another_store_waits_for_the_session_row_lock",),
        "two pops on a server take the same item",
        needs_pg=True,
    ),
    Mutation(
        "backup-world-readable",
        "hermes_repo/schema/backup.py",
        "os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600)",
        "os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)",
        ("tests/faults/test_file_modes.py",),
        "a backup (and a replaced store) is readable by every user",
    ),
    Mutation(
        "lost-reply-xid-ignored",
        "hermes_repo/core/units.py",
        '            if status == "committed":\n                return True',
        '            if status == "committed":\n                return False',
        (f"{LR}::test_a_unit_that_writes_no_identity_is_settled_by_its_transaction_id",),
        "a unit without identities whose commit landed but whose reply was lost runs twice",
        needs_pg=True,
    ),
    Mutation(
        "spool-replayed-into-any-store",
        "hermes_repo/transcript/placement.py",
        "        if owner.store_id == here.store_id or owner.store_id in adopt:",
        "        if True:",
        (f"{SO}::test_records_of_a_copied_store_are_replayed_only_when_adopted",),
        "a spool of one store is replayed into another (a copy, a new file in its home)",
    ),
)

#: Where the PostgreSQL test server is named (see tests/support/pg.py).
PG_URL_ENV = "HERMES_TEST_PG_URL"
REQUIRE_PG_ENV = "HERMES_TEST_REQUIRE_PG"


def _copy(dest: Path) -> None:
    shutil.copytree(
        ROOT,
        dest,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"
        ),
        symlinks=True,
    )


def run(m: Mutation | None, tests: tuple[str, ...] = (), *, verbose: bool = False) -> str:
    """Plant ``m`` in a fresh copy, run its tests there; "killed", "survived" or "stale".

    ``m=None`` is the control: ``tests`` on an unmutated copy (must be "survived").
    """
    if m is not None:
        source = (ROOT / m.file).read_text()
        if source.count(m.old) != 1:
            return "stale"
        if m.needs_pg and not os.environ.get(PG_URL_ENV):
            return "skipped"
        tests = m.tests
    with tempfile.TemporaryDirectory(prefix="hermes-mutation-") as scratch:
        copy = Path(scratch) / "repo"
        _copy(copy)
        if m is not None:
            (copy / m.file).write_text(source.replace(m.old, m.new))
        env = {**os.environ, "PYTHONPATH": str(copy)}
        where = subprocess.run(
            [sys.executable, "-c", "import hermes_repo; print(hermes_repo.__file__)"],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not where.startswith(str(copy)):
            raise SystemExit(f"the copy's package is not the one imported ({where})")
        proc = subprocess.run(
            # One worker: see the module docstring (xdist turns a kill into exit 2).
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-x",
                "-n",
                "0",
                "-p",
                "no:cacheprovider",
                *tests,
            ],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if verbose:
            print(proc.stdout[-3000:], proc.stderr[-2000:], sep="\n")
        if proc.returncode == 1:
            return "killed"
        if proc.returncode == 0:
            return "survived"
        return f"error (pytest exit {proc.returncode})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("words", nargs="*", help="run only mutations whose name has a word")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pytest's output")
    parser.add_argument(
        "--rotate",
        type=int,
        metavar="N",
        help="run N mutations, a different set each day (every one within a few days)",
    )
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.words or any(w in m.name for w in args.words)]
    if args.rotate:
        day = int(time.time() // 86400)
        start = (day * args.rotate) % len(chosen)
        chosen = [chosen[(start + i) % len(chosen)] for i in range(min(args.rotate, len(chosen)))]
    if args.list:
        for m in chosen:
            print(f"{m.name:32} {m.file:40} {m.what}")
        return 0
    # The control: the same tests on the unmutated code must pass, or a "kill" means
    # nothing.
    have_pg = bool(os.environ.get(PG_URL_ENV))
    control = tuple(dict.fromkeys(t for m in chosen if have_pg or not m.needs_pg for t in m.tests))
    outcome = run(None, control, verbose=args.verbose) if control else "survived"
    if outcome != "survived":
        print(f"control run failed ({outcome}): fix the tests before judging mutations")
        return 2
    results = {}
    for m in chosen:
        results[m.name] = outcome = run(m, verbose=args.verbose)
        print(f"{m.name:32} {outcome:10} {' '.join(t.split('::')[-1] for t in m.tests)}")
    killed = sum(r == "killed" for r in results.values())
    skipped = sum(r == "skipped" for r in results.values())
    print(f"\n{killed}/{len(results)} killed" + (f", {skipped} skipped" if skipped else ""))
    if skipped and os.environ.get(REQUIRE_PG_ENV) == "1":
        print(f"{REQUIRE_PG_ENV}=1 but {PG_URL_ENV} names no server: a mutation was skipped")
        return 1
    return 0 if killed + skipped == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
