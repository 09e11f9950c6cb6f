"""Run every benchmark, each in its own process, and print a summary.

    python benchmarks/run_all.py            # full sizes (what docs/performance.md reports)
    python benchmarks/run_all.py --quick    # small sizes, a smoke run (under ~2 minutes)
    python benchmarks/run_all.py --json results.json
    python benchmarks/run_all.py --core --dataset realistic --scale 0.25

The core comparisons, flush, recover and replay run on the synthetic and on the
realistic corpus (corpus_realistic.py); every other script runs once, on its own corpus.

Nothing here asserts anything about time: the machine may be shared and noisy. The
targets in the summary are informational.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
# The core comparisons with the library's targets (summarized below), run first; any other
# benchmarks/bench_*.py follow in name order.
CORE = ("bench_append.py", "bench_bulk.py", "bench_load.py", "bench_search.py")
# The scripts that run on each corpus asked for (--dataset); the others run once, on
# the corpus they build themselves.
BOTH_CORPORA = (*CORE, "bench_flush.py", "bench_recover.py", "bench_replay.py")


def discover() -> list[str]:
    others = sorted(p.name for p in HERE.glob("bench_*.py") if p.name not in CORE)
    return [s for s in CORE if (HERE / s).exists()] + others


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    p.add_argument("--runs", type=int, default=None, help="interleaved runs per side")
    p.add_argument("--json", metavar="FILE", help="write every result as one JSON file")
    p.add_argument("--only", nargs="*", help="run only these scripts (e.g. bench_load)")
    p.add_argument("--core", action="store_true", help="only the four core comparisons")
    p.add_argument("--markdown", metavar="FILE", help="write the summary as a Markdown table")
    p.add_argument(
        "--dataset",
        nargs="+",
        choices=("synthetic", "realistic"),
        default=["synthetic", "realistic"],
        help="the corpora the core comparisons run on (default: both)",
    )
    p.add_argument(
        "--scale", type=float, default=None, help="realistic corpus scale (see _common.py)"
    )
    args = p.parse_args(argv)

    scripts = [
        s
        for s in (CORE if args.core else discover())
        if not args.only or s.removesuffix(".py") in args.only
    ]
    results: list[dict[str, Any]] = []
    failed: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hermes-bench-json-") as tmp:
        for script in scripts:
            datasets = args.dataset if script in BOTH_CORPORA else [None]
            for dataset in datasets:
                tag = script if dataset is None else f"{script} --dataset {dataset}"
                out = Path(tmp) / (tag.replace(" ", "_") + ".json")
                cmd = [sys.executable, str(HERE / script), "--json", str(out)]
                if args.quick:
                    cmd.append("--quick")
                if args.runs:
                    cmd += ["--runs", str(args.runs)]
                if dataset is not None:
                    cmd += ["--dataset", dataset]
                if args.scale is not None:
                    cmd += ["--scale", str(args.scale)]
                t0 = time.perf_counter()
                done = subprocess.run(cmd, check=False)
                print(f"[{tag}: {time.perf_counter() - t0:.1f} s]\n", flush=True)
                if done.returncode != 0 or not out.exists():
                    failed.append(tag)
                    continue
                results.append(json.loads(out.read_text()))

    summary = summarize(results)
    print_summary(summary, quick=args.quick)
    print(f"total {time.perf_counter() - started:.1f} s")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(markdown(summary, results))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"quick": args.quick, "benchmarks": results, "summary": summary},
                indent=2,
                ensure_ascii=False,
            )
            + "\n"
        )
    return 1 if failed else 0


TARGETS = {
    "append": ("library/raw throughput", ">=", 0.85),
    "bulk": ("library/raw throughput", ">=", 0.95),
    "load": ("library/raw throughput", ">=", 0.9),
}


def summarize(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for bench in results:
        name = bench["benchmark"]
        if name in TARGETS:
            r = bench["results"][0]
            _, op, goal = TARGETS[name]
            rows.append(
                {
                    "case": r["name"],
                    "library": f"{r['library']:,.0f} msg/s",
                    "raw": f"{r['raw']:,.0f} msg/s",
                    "ratio": r["ratio_throughput"],
                    "target": f"{op} {goal}x",
                    "met": r["ratio_throughput"] >= goal,
                }
            )
        elif name == "search":
            by = {r["name"]: r for r in bench["results"]}
            sel, com = by["selective term"], by["common term"]
            t = bench["targets"]
            rows.append(
                {
                    "case": f"search selective term ({sel['hits']} hits)",
                    "library": f"{sel['ms']['library']:.3f} ms",
                    "raw": f"{sel['ms']['raw rank (bm25 all hits)']:.3f} ms",
                    "ratio": 1 / t["selective_lib_over_raw_rank"],
                    "target": "latency <= 3x raw",
                    "met": t["selective_lib_over_raw_rank"] <= 3,
                }
            )
            rows.append(
                {
                    "case": f"search common term ({com['hits']:,} hits)",
                    "library": f"{com['ms']['library']:.3f} ms",
                    "raw": f"{com['ms']['raw rank (bm25 all hits)']:.3f} ms (full bm25)",
                    "ratio": 1 / t["common_lib_over_full_bm25"],
                    "target": f"< 10x selective (is {t['common_over_selective_lib']:.1f}x)",
                    "met": (
                        t["common_over_selective_lib"] < 10 and t["common_lib_over_full_bm25"] < 1
                    ),
                }
            )
    return rows


def markdown(rows: list[dict[str, Any]], results: list[dict[str, Any]]) -> str:
    """The summary and the search detail as Markdown (for docs/performance.md)."""
    out = [
        "| case | library | raw | library/raw throughput | target | met |",
        "|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        out.append(
            f"| {r['case']} | {r['library']} | {r['raw']} | {r['ratio']:.2f}x | {r['target']} "
            f"| {'yes' if r['met'] else 'no'} |"
        )
    for bench in results:
        if bench["benchmark"] != "search":
            continue
        out += [
            "",
            "| query | hits | library ms | raw same SQL | raw rank (bm25 all hits) "
            "| raw rowid desc | raw LIKE | top-20 overlap with full bm25 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in bench["results"]:
            ms = r["ms"]

            def cell(key: str, ms: dict[str, float] = ms) -> str:
                return f"{ms[key]:.3f}" if key in ms else "–"

            overlap = r["top20_overlap_with_full_bm25"]
            out.append(
                f"| {r['name']} | {r['hits']:,} | {cell('library')} | {cell('raw same SQL')} "
                f"| {cell('raw rank (bm25 all hits)')} | {cell('raw rowid desc')} "
                f"| {cell('raw LIKE')} | "
                + ("–" if overlap is None else f"{overlap}/{min(20, r['hits'])}")
                + " |"
            )
    return "\n".join(out) + "\n"


def print_summary(rows: list[dict[str, Any]], *, quick: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title="summary" + (" (--quick: small sizes, not the documented numbers)" if quick else ""),
        title_justify="left",
    )
    for col in ("case", "library", "raw", "lib/raw thr.", "target", "met"):
        table.add_column(col, justify="left" if col in ("case", "target") else "right")
    for r in rows:
        table.add_row(
            r["case"],
            r["library"],
            r["raw"],
            f"{r['ratio']:.2f}x",
            r["target"],
            "yes" if r["met"] else "NO",
        )
    Console(width=160).print(table)


if __name__ == "__main__":
    sys.exit(main())
