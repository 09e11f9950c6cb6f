"""``sessions repair`` on a PostgreSQL store: the transcript repair, nothing file-level.

The transcript repair (role alternation, tool pairing; merged turns keep the first
row's id, removed rows are archived with a reason, never deleted) runs through the
write core and is the same on a server. What a SQLite repair adds around it belongs to
a file and does not apply: the backup-API copy and the ``pre-repair`` snapshot (a
server's backups are ``pg_dump``/its own; the archive keeps every removed row anyway),
``integrity_check``, and the FTS5 rebuild (PostgreSQL keeps the search columns itself;
an invalid index is rebuilt with ``REINDEX``, which the diagnosis names). So
``rebuild_search`` is refused by name and every other step is the transcripts'.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from ...driver_errors import describe
from ...engine_pg import PgTarget
from ...errors import HermesRepoError, NotOnThisBackendError
from ...maintenance.sqlite_only import server_tool
from ...schema.tables import COUNT_SQL
from ...store import StateStore
from ..doctor import diagnose_server
from ..transcript_check import check_transcripts, repair_transcripts
from .values import repair_values
from .verdict import VALUES, Damage, RepairReport, VerifyItem

__all__ = ["repair_server"]

_REACH = ("server-", "schema-")  # findings that leave nothing a repair could read
_INDEX = ("index-invalid", "search-index-missing")


_AGAIN = 'hermes-repo --url "$HERMES_REPO_URL" sessions repair'


def _counts(store: StateStore) -> dict[str, int]:
    def run(conn: Connection) -> dict[str, int]:
        return {
            name: int(conn.exec_driver_sql(sql).scalar_one()) for name, sql in COUNT_SQL.items()
        }

    return store.read(run)


def _url_text(target: PgTarget) -> str:
    return target.url.render_as_string(hide_password=False)  # handed on, never shown


def _stop(report: RepairReport, why: str, next_steps: list[str]) -> RepairReport:
    report.ok = False
    report.summary = f"repair failed: {why}; the database keeps every row it had"
    report.next_steps = next_steps
    return report


def repair_server(
    home: Path, target: PgTarget, *, check_only: bool = False, rebuild_search: bool = False
) -> RepairReport:
    """Check, or repair, the transcripts of the PostgreSQL store ``target``.

    ``rebuild_search`` raises :class:`NotOnThisBackendError` naming ``REINDEX``. Findings
    a transcript repair does not fix (an invalid index, a missing extension, counters)
    stay in the report with their fix, and make ``ok`` False.
    """
    if rebuild_search:
        raise NotOnThisBackendError(
            f"--rebuild-search rebuilds SQLite's FTS5 index, and this store is the "
            f"PostgreSQL database {target}; nothing was done; {server_tool('search-index', target)}"
        )
    doctor = diagnose_server(home, target)
    index_damage = any(f.code in _INDEX for f in doctor.findings)
    damage: Damage = "index" if index_damage else "none"
    report = RepairReport(
        path=str(target), check_only=check_only, damage=damage, doctor=doctor, backend="postgresql"
    )
    report.notes.append(
        "on PostgreSQL no backup or snapshot is taken (removed rows are archived, never "
        "deleted); take one first with `pg_dump -Fc` if you want a restore point"
    )
    unreachable = [f for f in doctor.findings if f.code.startswith(_REACH)]
    if unreachable:
        report.notes.append("transcripts not checked: the database cannot be read as a store")
        return _stop(report, unreachable[0].summary, [f.fix for f in unreachable])
    try:
        with StateStore.open(home, url=_url_text(target), replay=False) as store:
            report.counts_before = _counts(store)
            if check_only:
                report.transcript_check = check_transcripts(store)
            else:
                report.values = repair_values(store)
                report.transcripts = repair_transcripts(store)
                after = check_transcripts(store)
                report.counts_after = _counts(store)
    except (HermesRepoError, DBAPIError) as exc:
        why = describe(exc) if isinstance(exc, DBAPIError) else str(exc)
        return _stop(report, why, [f"fix the cause above, then run `{_AGAIN}`"])
    others = [f for f in doctor.findings if f.severity == "error"]
    if check_only:
        transcripts_ok = report.transcript_check is not None and report.transcript_check.ok
        values = any(f.code == VALUES for f in doctor.findings)
        report.ok = transcripts_ok and not others and not values
        if not transcripts_ok or values:
            report.summary = "the store needs a repair"
            report.next_steps = [f"run `{_AGAIN}`"]
        report.next_steps += [f.fix for f in others]
        return report
    lost = [k for k, v in report.counts_before.items() if report.counts_after.get(k, -1) < v]
    lost = [k for k in lost if k != "active_messages"]  # a repair archives rows out of replay
    report.verification = [
        VerifyItem("transcripts", after.ok, f"{after.sessions_violating} session(s) violating"),
        VerifyItem("counts", not lost, "no canonical count lower" if not lost else ", ".join(lost)),
    ]
    if not report.verified:
        failed = "; ".join(f"{v.name}: {v.detail}" for v in report.verification if not v.ok)
        return _stop(report, f"verification failed ({failed})", [f"run `{_AGAIN}` again"])
    if others:
        return _stop(
            report,
            "the transcripts are repaired, but the server has problems a transcript repair "
            "does not fix: " + "; ".join(f.summary for f in others),
            [f.fix for f in others],
        )
    report.ok = True
    assert report.transcripts is not None and report.values is not None
    done = []
    if report.values.fixes:
        done.append(f"{len(report.values.fixes)} unreadable value(s) rewritten")
    if report.transcripts.sessions_repaired:
        done.append(f"{report.transcripts.sessions_repaired} transcript(s) repaired")
    report.summary = ("; ".join(done) or "nothing needed repair") + "; verified"
    return report
