"""``hermes-repo search``: full-text search over the stored messages."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import click
from rich import box
from rich.table import Table
from rich.text import Text

from ..models import ROLES
from ._options import include_inactive_option, json_option, limit_option, session_option
from ._output import echo_json, format_time, snippet_text, stdout_console

if TYPE_CHECKING:
    from ._state import CliState

__all__ = ["search_command"]


@click.command("search")
@click.argument("query")
@limit_option(20, "Hits at most.")
@session_option("Only messages of this session.")
@click.option("--role", type=click.Choice(ROLES), help="Only messages with this role.")
@include_inactive_option("Also search archived audit rows (taken out by repair).")
@json_option()
@click.pass_obj
def search_command(
    state: CliState,
    query: str,
    limit: int,
    session_id: str | None,
    role: str | None,
    include_inactive: bool,
    as_json: bool,
) -> None:
    """Search message text; every word of QUERY must match.

    Any text is a valid query: quotes group words into a phrase ("write lock"), and
    nothing else is an operator (*, -, NEAR, %, _ are plain characters). Chinese,
    Japanese and Korean text and substrings are matched too. Word queries are ranked by
    relevance among the most recent matches; the hit is marked >>> like this <<< in
    --json snippets and highlighted in the table. If the full-text index is damaged the
    search still answers, from the messages themselves. Put `--` before a query
    that starts with "-".

    \b
    Example:
      hermes-repo search "journal_mode" --role assistant --limit 5
      hermes-repo search 京都 --json
      hermes-repo search -- "-fsync"
    """
    hits = state.store.search(
        query,
        limit=limit,
        session_id=session_id,
        role=role,
        include_inactive=include_inactive,
    )
    if as_json:
        echo_json([dataclasses.asdict(hit) for hit in hits])
        return
    console = stdout_console()
    if not hits:
        console.print(Text(f"no messages match {query!r}"))
        return
    # NO_COLOR keeps rich's styles but drops the colours: keep the markers then too.
    color = console.color_system is not None and not console.no_color
    table = Table(
        title=Text(f"{len(hits)} hit(s) for {query!r}"), title_justify="left", box=box.SIMPLE_HEAD
    )
    table.add_column("session", no_wrap=True, style="cyan")
    table.add_column("role", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("snippet", overflow="fold", ratio=1)
    for hit in hits:
        table.add_row(
            Text(hit.session_id),
            Text(hit.role),
            format_time(hit.timestamp, seconds=False),
            snippet_text(hit.snippet, color=color),
        )
    console.print(table)
