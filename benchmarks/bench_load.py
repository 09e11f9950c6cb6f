"""Load a 20k-message conversation (``store.load_conversation``) vs raw DB-API.

The raw side runs ``BEGIN``, the same ``SELECT ... WHERE session_id = ? AND active = ?
ORDER BY id`` and ``COMMIT``, and turns the rows into dicts with the same keys and values
(JSON columns decoded, NULL columns left out) with a hand-written loop. The two outputs
are compared once before timing.

    python benchmarks/bench_load.py [--quick] [--runs N] [--json FILE] [--dataset realistic]
"""

from __future__ import annotations

import json
from operator import itemgetter
from typing import Any

from _common import (
    Result,
    capture_raw_sql,
    capture_sql,
    check_same_sql,
    checkpoint,
    copy_db,
    dataset_label,
    fill,
    interleave,
    make_corpus,
    new_store,
    parser,
    payload,
    print_table,
    raw_connect,
    run_main,
    scale_of,
    store_db,
    workspace,
    write_json,
)

from hermes_repo.codec import MESSAGE_COLUMNS

NAME = "load"
SESSION = "long-conversation"
RAW_LOAD = (
    "SELECT "
    + ", ".join(f"messages.{c}" for c in MESSAGE_COLUMNS)
    + " FROM messages WHERE messages.session_id = ? AND messages.active = ? "
    "ORDER BY messages.id"
)
_FIELDS = (
    "role",
    "content",
    "content_parts",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "timestamp",
    "token_count",
    "finish_reason",
    "reasoning",
    "reasoning_details",
    "api_content",
    "extra",
    "display_only",
    "uid",
)
# One C call picks the fields out of a row, whatever MESSAGE_COLUMNS' order is.
_pick = itemgetter(*(MESSAGE_COLUMNS.index(c) for c in _FIELDS))


def raw_message(r: tuple[Any, ...]) -> dict[str, Any]:
    """A plain sqlite3 program's row-to-dict (same keys as the library's messages)."""
    (
        role,
        content,
        parts,
        calls,
        call_id,
        tool,
        ts,
        tokens,
        finish,
        reasoning,
        details,
        api,
        extra,
        display,
        uid,
    ) = _pick(r)
    d: dict[str, Any] = {"role": role}
    if parts is not None:
        d["content"] = json.loads(parts)
    elif content is not None:
        d["content"] = content
    if calls is not None:
        d["tool_calls"] = json.loads(calls)
    if call_id is not None:
        d["tool_call_id"] = call_id
    ex = json.loads(extra) if extra is not None else None
    if tool is not None and not (ex and ex.get("name") == tool):
        d["tool_name"] = tool
    if tokens is not None:
        d["token_count"] = tokens
    if finish is not None:
        d["finish_reason"] = finish
    if reasoning is not None:
        d["reasoning"] = reasoning
    if details is not None:
        d["reasoning_details"] = json.loads(details)
    if api is not None:
        d["api_content"] = api
    if ex:
        d.update(ex)
    if display:
        d["display_only"] = True
    d["timestamp"] = ts
    d["uid"] = uid
    return d


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=None, help="messages in the conversation")
    p.add_argument("--reps", type=int, default=None, help="loads per timed sample")
    args = p.parse_args(argv)
    if args.dataset == "realistic":
        size = args.size or max(100, int(20_000 * scale_of(args)))
    else:
        size = args.size or (2_000 if args.quick else 20_000)
    runs = args.runs or (7 if args.quick else 15)
    reps = args.reps or (5 if args.quick else 3)

    with workspace() as ws:
        store = new_store(ws.home("lib"), [SESSION, "other"])
        corpus = make_corpus(args)
        fill(store, corpus, size, [SESSION])
        fill(store, corpus, size // 4, ["other"], seed_offset=3)  # a neighbour session
        checkpoint(store_db(store))
        raw_path = ws.root / "raw" / "state.db"
        copy_db(store_db(store), raw_path)
        con = raw_connect(raw_path)
        cur = con.cursor()

        def raw_load() -> list[dict[str, Any]]:
            cur.execute("BEGIN")
            try:
                rows = cur.execute(RAW_LOAD, (SESSION, 1)).fetchall()
            finally:
                cur.execute("COMMIT")
            return [raw_message(r) for r in rows]

        with capture_sql(store) as seen:
            lib_msgs = store.load_conversation(SESSION).messages
        with capture_raw_sql(con) as raw_seen:
            raw_msgs = raw_load()
        same = check_same_sql(NAME, seen, raw_seen)
        assert len(lib_msgs) == size, len(lib_msgs)
        assert lib_msgs == raw_msgs, "raw dicts differ from the library's"

        result = Result(
            f"load_conversation, {size:,} msgs ({dataset_label(args)})",
            "msg/s",
            work=size * reps,
            extra={"same_sql": same},
        )
        interleave(
            result,
            runs,
            lambda i: [store.load_conversation(SESSION) for _ in range(reps)],
            lambda i: [raw_load() for _ in range(reps)],
        )
        con.close()
        store.close()

    print_table(
        f"load_conversation of {size} messages, {runs} interleaved runs of {reps} loads",
        [result],
        {result.name: "target >= 0.9x"},
    )
    params = {"size": size, "runs": runs, "reps": reps, "dataset": dataset_label(args)}
    data = payload(NAME, params, [result])
    write_json(args.json, data)
    return data


if __name__ == "__main__":
    run_main(main)
