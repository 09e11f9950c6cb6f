"""``hermes-repo search``: full-text search over the stored messages."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import click
from rich import box
from rich.table import Table

from ..roles import ROLES
from ._numbers import MAX_SEARCH_LIMIT
from ._options import include_inactive_option, json_option, limit_option, session_option
from ._output import Text, echo_json, format_time, snippet_text, stdout_console

if TYPE_CHECKING:
    from ..repositories.search.paging import SearchPage
    from ._state import CliState

__all__ = ["search_command"]


# Pages of --page: 1,000,000 pages of --limit 1,000 are more hits than any store holds.
MAX_PAGE = 1_000_000


@click.command("search")
@click.argument("query")
@limit_option(
    20,
    f"Hits at most, 1 to {MAX_SEARCH_LIMIT:,} (the library's maximum per call); page "
    "with --page or --cursor for more.",
    maximum=MAX_SEARCH_LIMIT,
)
@session_option("Only messages of this session.")
@click.option("--role", type=click.Choice(ROLES), help="Only messages with this role.")
@include_inactive_option("Also search archived audit rows (taken out by repair).")
@click.option(
    "--cursor",
    metavar="C",
    help="Page through every hit, newest first: the page after cursor C (printed with each page).",
)
@click.option(
    "--page",
    # A page past the last hit is empty; the bound keeps the walk to it finite.
    type=click.IntRange(min=1, max=MAX_PAGE),
    metavar="N",
    help="Page through every hit, newest first: the N-th page of --limit hits "
    f"(at most {MAX_PAGE:,}; --cursor goes on from any page).",
)
@json_option()
@click.pass_obj
def search_command(
    state: CliState,
    query: str,
    limit: int,
    session_id: str | None,
    role: str | None,
    include_inactive: bool,
    cursor: str | None,
    page: int | None,
    as_json: bool,
) -> None:
    """Search message text; every word of QUERY must match.

    Any text is a valid query: quotes group words into a phrase ("write lock"), and
    nothing else is an operator (*, -, NEAR, %, _ are plain characters). Chinese,
    Japanese and Korean text and substrings are matched too. Word queries are ranked by
    relevance among the most recent matches; the hit is marked >>> like this <<< in
    --json snippets and highlighted in the table. If the full-text index is damaged the
    search still answers, from the messages themselves. Put `--` before a query
    that starts with "-". --limit is at most 1000: every hit is reachable by paging
    (--page N, or --cursor C with the cursor the previous page printed), newest first.
    --json prints one shape, {"hits": [...], "cursor": C or null}: the cursor of the
    next page when paging, null on the last page and without --page / --cursor (a
    ranked search is one answer; page with --page 1 to walk every hit).

    \b
    Example:
      hermes-repo search "journal_mode" --role assistant --limit 5
      hermes-repo search 京都 --json
      hermes-repo search -- "-fsync"
      hermes-repo search sqlite --limit 50 --page 3
      hermes-repo search sqlite --limit 50 --cursor czEuMTIzNDUuYWJj...
    """
    if cursor is not None and page is not None:
        raise click.UsageError("give one of --cursor and --page: a cursor already names a page")
    paged = cursor is not None or page is not None

    from ..repositories.search.paging import SearchPage
    from ..repositories.search.request import SearchQuery

    def checked() -> SearchQuery:
        # Checked where the store would check it: after "no store" is said.
        return SearchQuery.checked(
            query, limit=limit, session_id=session_id, role=role, include_inactive=include_inactive
        )

    def page_after(after: str | None) -> SearchPage:
        return state.read(
            lambda quick: quick.search_page(checked(), after),
            lambda store: store.search_page(
                query,
                limit=limit,
                cursor=after,
                session_id=session_id,
                role=role,
                include_inactive=include_inactive,
            ),
        )

    next_cursor: str | None = None
    if paged:
        found = page_after(cursor)
        for _ in range((page or 1) - 1):  # --page N: walked by cursor, one cheap query each
            if found.cursor is None:  # past the last hit: every later page is empty
                found = SearchPage([], None)
                break
            found = page_after(found.cursor)
        hits, next_cursor = found.hits, found.cursor
    else:
        hits = state.read(
            lambda quick: quick.search(checked()),
            lambda store: store.search(
                query,
                limit=limit,
                session_id=session_id,
                role=role,
                include_inactive=include_inactive,
            ),
        )
    if as_json:
        rows = [dataclasses.asdict(hit) for hit in hits]
        # One shape with and without paging: a script reads hits the same way.
        echo_json({"hits": rows, "cursor": next_cursor})
        return
    console = stdout_console()
    if not hits:
        console.print(Text(f"no messages match {query!r}" + (" on this page" if paged else "")))
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
    if paged:
        console.print(Text(f"next page: --cursor {next_cursor}" if next_cursor else "last page"))
