"""``hermes-repo sessions``: list sessions, show one transcript, check and repair the store.

``sessions repair`` is the operator's repair of the whole store (search index and
transcripts); the work is :func:`hermes_repo.ops.repair.repair_store`.

``sessions`` is the click group; two of its commands live in other modules (``export``
in :mod:`.transfer`, ``recover`` in :mod:`.recover`) and are named in its table of lazy
subcommands, imported when used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from rich import box
from rich.table import Table

from ..codec import scrub
from ._findings import print_findings, repair_failure_line
from ._lazy import LazyCommand, LazyGroup
from ._numbers import LIMIT
from ._options import include_inactive_option, json_option, limit_option
from ._output import CliError, Text, echo_json, format_time, stdout_console, terminal_text

if TYPE_CHECKING:
    from ..ops.repair import RepairReport
    from ..ops.transcript_check import SessionRepair, TranscriptReport
    from ..store import StateStore
    from ._reads import QuickReader
    from ._state import CliState

__all__ = ["sessions"]

_PREVIEW_CHARS = 160


def _tool_calls_text(message: dict[str, Any]) -> str:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return ""
    names = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        names.append(str(fn.get("name")) if isinstance(fn, dict) else "?")
    return "calls " + ", ".join(names)


def _field(name: str, value: str) -> Text:
    # Text, not markup: titles and ids are user data and may contain [brackets].
    return Text().append(f"{name}: ", "bold").append(value)


def _preview(message: dict[str, Any]) -> str:
    from ..codec.display import content_text

    text = " ".join(content_text(message.get("content")).split())
    calls = _tool_calls_text(message)
    if calls:
        text = f"{text} [{calls}]" if text else f"[{calls}]"
    if len(text) > _PREVIEW_CHARS:
        text = text[: _PREVIEW_CHARS - 1] + "…"
    return text


@click.group(
    "sessions",
    cls=LazyGroup,
    lazy_subcommands={
        "export": LazyCommand(
            "hermes_repo.cli.transfer:export_command",
            "Export one session's transcript as JSONL or Markdown.",
        ),
        "salvage": LazyCommand(
            "hermes_repo.cli.salvage:salvage_command",
            "Salvage sessions and messages from a damaged state.db.",
        ),
        "recover": LazyCommand(
            "hermes_repo.cli.salvage:recover_alias",
            "Deprecated: use `hermes-repo sessions salvage`.",
            hidden=True,
        ),
    },
)
def sessions() -> None:
    """List, show and export the sessions in the store.

    \b
    Example:
      hermes-repo sessions list --source telegram
      hermes-repo sessions show SESSION_ID
    """


@sessions.command("list")
@limit_option(50, "Rows at most.")
@click.option("--source", metavar="S", help="Only sessions from this source (cli, telegram...).")
@json_option()
@click.pass_obj
def list_sessions(state: CliState, limit: int, source: str | None, as_json: bool) -> None:
    """List sessions, most recently started first.

    Shows id, source, start time, message count and title; --json adds every
    column (user, model, parent session, end time and reason, counters).

    \b
    Example:
      hermes-repo sessions list --limit 10 --json
    """
    rows = state.read(
        lambda quick: quick.list_sessions(limit=limit, source=source),
        lambda store: [i.as_dict() for i in store.list_sessions(limit=limit, source=source)],
    )
    if as_json:
        echo_json(rows)
        return
    console = stdout_console()
    if not rows:
        console.print(Text("no sessions" + (f" from source {source!r}" if source else "")))
        return
    id_width = max(len(r["id"]) for r in rows)
    source_width = min(_SOURCE_WIDTH, max(len(scrub(r["source"])) for r in rows))
    count_width = max(4, *(len(str(r["message_count"])) for r in rows))
    # Five columns of two cells' padding each, the started time, and a title column
    # wide enough to wrap words: narrower than that, rich would crop cells without an
    # ellipsis (or drop whole columns), so each session gets lines of its own instead.
    needed = id_width + source_width + _STARTED_WIDTH + count_width + 5 * 2 + _TITLE_MIN
    if console.width < needed:
        _print_sessions_stacked(rows)
        return
    table = Table(title=f"{len(rows)} session(s)", title_justify="left", box=box.SIMPLE_HEAD)
    # Ids are what people copy into the next command: never cut them short.
    table.add_column("id", no_wrap=True, style="cyan", min_width=id_width)
    # A long source ends in an ellipsis (never cut silently); --json has it whole.
    table.add_column("source", no_wrap=True, max_width=_SOURCE_WIDTH, overflow="ellipsis")
    table.add_column("started", no_wrap=True, min_width=_STARTED_WIDTH)
    table.add_column("msgs", justify="right", no_wrap=True, min_width=count_width)
    table.add_column("title", overflow="fold", min_width=_TITLE_MIN, ratio=1)
    for r in rows:
        table.add_row(
            Text(r["id"]),
            Text(scrub(r["source"])),
            format_time(r["started_at"], seconds=False),
            str(r["message_count"]),
            Text(scrub(r["title"] or "")),
        )
    console.print(table)


_SOURCE_WIDTH = 12
_STARTED_WIDTH = len("2026-01-01 09:30")
_TITLE_MIN = 20


def _print_sessions_stacked(rows: list[dict[str, Any]]) -> None:
    """Sessions as blocks of lines, for a terminal too narrow for the table: every
    character is printed (lines wrap, nothing is cropped)."""
    console = stdout_console()
    console.print(Text(f"{len(rows)} session(s)"))
    for r in rows:
        console.print()
        console.print(Text(r["id"], style="cyan"))
        started = format_time(r["started_at"], seconds=False)
        facts = f"  {scrub(r['source'])} · {started} · {r['message_count']} message(s)"
        console.print(Text(facts))
        if r["title"]:
            console.print(Text("  " + scrub(r["title"])))


@sessions.command("show")
@click.argument("session_id", metavar="SID")
@include_inactive_option(
    "Also show archived audit rows (messages a repair took out of the replay)."
)
@click.option(
    "--repair",
    is_flag=True,
    help="First repair the transcript in the store (merge, archive) and report the changes.",
)
@click.option(
    "--last",
    type=LIMIT,
    metavar="N",
    help="Only the newest N messages (the tail of a long session, read without its head).",
)
@json_option()
@click.pass_obj
def show(
    state: CliState,
    session_id: str,
    include_inactive: bool,
    repair: bool,
    last: int | None,
    as_json: bool,
) -> None:
    """Show one session: its details and its messages in replay order.

    Without --repair nothing is repaired or written: this is an inspection load. With
    --repair the transcript's alternation and tool-pairing violations are repaired in
    the store first (removed rows are archived, see --include-inactive). With --json the
    output is {"session": {...}, "messages": [...]} (plus "repair": {...} with --repair),
    messages as the library returns them.

    Messages are printed a line each as they are formatted (a long session streams
    like `sessions export`): # (its place in the replay), role, time and the first
    160 characters of its content; a long line wraps, nothing is cut but the preview.

    \b
    Example:
      hermes-repo sessions show 20260101_093000_5f2a --last 20
      hermes-repo sessions show 20260101_093000_5f2a --include-inactive
      hermes-repo sessions show 20260101_093000_5f2a --repair
    """
    repaired: SessionRepair | None = None
    if repair:
        from ..ops.transcript_check import repair_session

        # Repair before reading the session row, so its counters are the repaired ones.
        repaired = repair_session(state.existing_store, session_id)

    def full(store: StateStore) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        info = store.get_session(session_id).as_dict()
        loaded = store.load_conversation(session_id, include_inactive=include_inactive, last=last)
        return info, loaded.messages

    def quick(reader: QuickReader) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        info = reader.get_session(session_id).as_dict()
        return info, reader.load_messages(session_id, include_inactive=include_inactive, last=last)

    info, messages = state.read(quick, full)
    if as_json:
        payload: dict[str, Any] = {"session": info, "messages": messages}
        if repaired is not None:
            payload["repair"] = repaired.as_dict()
        echo_json(payload)
        return
    console = stdout_console()
    if repaired is not None:
        console.print(
            _field(
                "repair",
                f"{repaired.repairs} row(s) archived, {len(repaired.updated_ids)} row(s) updated",
            )
        )
        for row in repaired.archived:
            console.print(Text(f"  #{row.id}: {row.reason}"))
    for key in ("id", "title", "source", "model", "user_id", "parent_session_id"):
        if info[key] is not None:
            console.print(_field(key, scrub(str(info[key]))))
    console.print(_field("started", format_time(info["started_at"])))
    if info["ended_at"] is not None:
        reason = f" ({scrub(info['end_reason'])})" if info["end_reason"] else ""
        console.print(_field("ended", format_time(info["ended_at"]) + reason))
    # The place of the first one shown: a tail of the active replay starts after the
    # rows it leaves out (an audit view counts archived rows too: numbered from 1).
    skipped = 0
    if last is not None and not include_inactive:
        skipped = max(0, int(info["message_count"] or 0) - len(messages))
    _stream_messages(messages, skipped, whole=last is None or skipped == 0)


def _stream_messages(messages: list[dict[str, Any]], skipped: int, *, whole: bool) -> None:
    """One line per message, written as it is formatted.

    A rich table lays out every row before it prints the first (minutes for 100,000
    messages) and crops cells to the terminal; a line each costs what the export's
    does, and a line longer than the terminal wraps there with nothing lost.
    """
    count = f"{len(messages)} message(s)" if whole else f"last {len(messages)} message(s)"
    click.echo()
    click.echo(terminal_text(count))
    if not messages:
        return
    roles = [_role(m) for m in messages]
    number_width = len(str(skipped + len(messages)))
    role_width = min(_ROLE_WIDTH, max(len(r) for r in roles))
    click.echo(f"{'#':>{number_width}}  {'role':<{role_width}}  {'time':<19}  content")
    for i, (message, role) in enumerate(zip(messages, roles, strict=True), skipped + 1):
        text = _preview(message)
        if message.get("active") is False:
            text = f"[archived: {message.get('archive_reason', '?')}] {text}"
        when = format_time(message.get("timestamp"))
        # Lone surrogates (stored exactly) show as U+FFFD; controls are escaped.
        click.echo(terminal_text(f"{i:>{number_width}}  {role:<{role_width}}  {when:<19}  {text}"))


_ROLE_WIDTH = 24


def _role(message: dict[str, Any]) -> str:
    role = str(message["role"])
    if message.get("tool_name"):
        role += f" ({message['tool_name']})"
    return role


@sessions.command("repair")
@click.option(
    "--check-only",
    is_flag=True,
    help="Only report what a repair would fix (file, search index, transcripts); write nothing.",
)
@click.option(
    "--rebuild-search",
    is_flag=True,
    help="Also rebuild the full-text indexes (guarded, verified) even if no check finds "
    "them damaged.",
)
@json_option()
@click.pass_obj
def repair_command(state: CliState, check_only: bool, rebuild_search: bool, as_json: bool) -> None:
    """Check, or repair, the store: its search index and every session's transcript.

    Stop every process using the store first (e.g. the gateway): the repair refuses to
    run while another process has it open. It then takes an online backup
    (state.db.pre-repair-<UTC time>.bak, SQLite's backup API) and, when the file passes
    integrity_check, a snapshot, then rebuilds a detached or damaged search index,
    rewrites the stored values the store cannot read (another tool's text timestamps,
    malformed JSON, bad bytes: each message row is first kept as it was as an archived
    row), repairs the transcripts that break role alternation or tool pairing (merged turns
    keep the first row's id, removed rows are archived, never deleted), and verifies:
    integrity_check, the indexes' integrity-check, every probed message found by the
    index, no fts_stale row, the six triggers, and canonical row counts not lower than
    before. A file whose canonical tables are
    damaged is not repaired in place: both it and the backup are kept and the command
    exits 1 naming `sessions salvage`. Any failure keeps both and exits 1.

    --check-only reports the same diagnosis and the transcript violations without
    writing anything (safe while the gateway runs). --rebuild-search rebuilds the search
    indexes from the messages even when every check passes, and verifies that each
    finds what the table holds.

    On a PostgreSQL store (--url) only the transcript repair runs (no backup, snapshot
    or integrity_check: take a pg_dump -Fc first); --rebuild-search is refused and the
    REINDEX commands for the search indexes are named instead.

    \b
    Example:
      hermes-repo sessions repair --check-only
      hermes-repo sessions repair --json
      hermes-repo sessions repair --rebuild-search
    """
    if check_only and rebuild_search:
        raise CliError(
            "--check-only writes nothing and --rebuild-search rewrites the index; "
            "run `hermes-repo sessions repair --rebuild-search` without --check-only"
        )
    from ..ops.repair import repair_store

    report = repair_store(
        state.home, check_only=check_only, rebuild_search=rebuild_search, url=state.url
    )
    if as_json:
        echo_json(report.as_dict())
    elif check_only:
        _print_check(report)
    else:
        _print_repair(report)
    if not check_only and not report.ok:
        raise CliError(repair_failure_line(report))
    if check_only and not report.ok:
        # The report above says a repair is needed: the exit code says it too (as the
        # doctor's does), so `sessions repair --check-only || ...` works in a script.
        raise click.exceptions.Exit(1)


def _print_check(report: RepairReport) -> None:
    console = stdout_console()
    transcripts = report.transcript_check
    if transcripts is not None and transcripts.ok:
        console.print(
            Text(
                f"ok: {transcripts.sessions_checked} session(s), {transcripts.rows_checked} "
                "active row(s), no violations"
            )
        )
    elif transcripts is not None:
        _print_violations(transcripts)
    for note in report.notes:  # e.g. why the transcripts could not be checked
        console.print(Text(f"note: {note}"))
    if report.findings:
        console.print(Text(f"store: {len(report.findings)} finding(s):", style="bold"))
        print_findings(console, report.findings)
    else:
        checked = (
            "server, schema, indexes, counts"
            if report.backend == "postgresql"
            else "file header, canonical tables, search index, triggers"
        )
        console.print(Text(f"store: no findings ({checked})"))
    if not report.ok and report.next_steps:
        console.print(Text(f"{report.summary}; next:"))
        for step in report.next_steps:
            console.print(Text(f"  {step}"), soft_wrap=True)


def _print_violations(report: TranscriptReport) -> None:
    console = stdout_console()
    table = Table(
        title=f"{report.sessions_violating} of {report.sessions_checked} session(s) violate",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("session", no_wrap=True, style="cyan")
    table.add_column("rows", justify="right", no_wrap=True)
    # One column per rule, with short headers so an 80-column terminal fits the ids
    # (one header per rule: a missing one shifted every count under the wrong header).
    from ..ops.transcript_check import ALTERNATION_RULES, TOOL_PAIRING_RULES

    rules = (*ALTERNATION_RULES, *TOOL_PAIRING_RULES)
    headers = ("user", "asst", "unmerg", "orphan", "dup")
    assert len(headers) == len(rules)
    for header in headers:
        table.add_column(header, justify="right", no_wrap=True)
    for s in report.sessions:
        counts = [str(s.by_rule.get(rule, 0)) for rule in rules]
        table.add_row(Text(s.session_id), str(s.active_rows), *counts)
    console.print(table)
    (alt_s, alt_r), (pair_s, pair_r) = report.alternation, report.tool_pairing
    console.print(
        Text(f"alternation (user, asst, unmerg turns): {alt_s} session(s), {alt_r} row(s)")
    )
    console.print(Text(f"tool pairing (orphan, dup results): {pair_s} session(s), {pair_r} row(s)"))
    console.print(Text("repair them with `hermes-repo sessions repair`"))


def _print_repair(report: RepairReport) -> None:
    console = stdout_console()
    if report.backup is not None:
        console.print(Text(f"backup: {report.backup}"), soft_wrap=True)
    if report.snapshot is not None:
        console.print(Text(f"snapshot: {report.snapshot} (label pre-repair)"))
    for note in report.notes:
        console.print(Text(f"note: {note}"), soft_wrap=True)
    if report.damage == "structural":
        return  # the error line says the rest
    if report.rebuild is not None:
        rebuild = report.rebuild
        verdict = "rebuilt" if rebuild.ok else "NOT rebuilt"
        console.print(Text(f"search index: {verdict} ({rebuild.reason}, {rebuild.seconds:.1f} s)"))
    elif report.backend == "postgresql":
        pass  # the server keeps its search columns; the doctor names any REINDEX
    elif report.verification or report.transcripts is not None:
        console.print(Text("search index: live and sound, nothing to rebuild"))
    if report.values is not None and (report.values.fixes or report.values.archived_kept):
        values = report.values
        console.print(
            Text(
                f"values: {len(values.fixes)} unreadable value(s) rewritten in "
                f"{values.rows_rewritten} row(s), each message row kept as it was as an "
                f"archived row; {values.archived_kept} in archived rows kept as stored"
            ),
            soft_wrap=True,
        )
    summary = report.transcripts
    if summary is not None:
        console.print(
            Text(
                f"repaired {summary.sessions_repaired} session(s): {summary.repairs} row(s) "
                f"archived, {summary.rows_updated} row(s) updated"
            )
        )
    for item in report.verification:
        result = item.detail if item.ok else f"FAILED ({item.detail})"
        console.print(Text(f"verify {item.name}: {result}"), soft_wrap=True)
    if report.ok:
        console.print(
            Text(f"repaired and verified: {report.summary}", style="green"), soft_wrap=True
        )
