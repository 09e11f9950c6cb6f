"""CPU time of starting the ``hermes-repo`` command, against ``import sqlalchemy``.

Each case is a fresh process of the installed console script (the one next to this
Python), timed by the CPU it used (user + system, ``resource.getrusage`` of the
children): wall time on a shared machine measures the neighbours. The cases:

* ``--version``, ``--help`` and ``search --help``: should load neither SQLAlchemy nor
  the store (target: at most 0.15 s of CPU each);
* ``sessions list``, ``sessions show``, ``sessions export``, ``search checkpoint`` and
  ``doctor`` on a small store (the sample file's 4 sessions and 50 messages): a read
  command (target: at most 1.5 times ``python -c "import sqlalchemy"``; ``doctor`` runs
  every check, the read-only ``quick_check`` and full-text integrity included);
* ``python -c "import sqlalchemy"`` itself, the yardstick, measured in the same run;
* the libraries a read command cannot do without, imported alone (SQLAlchemy Core and
  its SQLite dialect, click, rich's table; the read commands load no ORM): the floor
  under any read, shown for scale.

Modules are byte-compiled once before timing (into a private cache folder), as an
installed wheel's are: a process that compiles the package's sources on every start
(``PYTHONDONTWRITEBYTECODE``) measures the compiler. Each case runs ``--repeats`` times,
interleaved with the others; the median is printed, with the ratio to the yardstick.

    python benchmarks/bench_cli_start.py --repeats 9
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "samples" / "sample_sessions.jsonl"
HELP_BUDGET_S = 0.15
READ_RATIO = 1.5
_FLOOR = "import sqlalchemy, sqlalchemy.dialects.sqlite, click, rich.table, rich.console"


def _cpu_of(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds (user + system) of one run of ``argv``; a failed run stops the bench."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode(errors='replace')}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=7, help="runs per case (median shown)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args()

    script = Path(sys.executable).with_name("hermes-repo")
    if not script.exists():
        raise SystemExit(f"no hermes-repo script next to {sys.executable}; pip install the package")
    with tempfile.TemporaryDirectory(prefix="hermes-cli-start-") as tmp:
        home = Path(tmp) / "home"
        env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        env["HERMES_HOME"] = str(home)
        cmd = [str(script), "--home", str(home)]
        subprocess.run([*cmd, "import", str(SAMPLE)], env=env, check=True, capture_output=True)
        cases: dict[str, list[str]] = {
            "hermes-repo --version": [str(script), "--version"],
            "hermes-repo --help": [str(script), "--help"],
            "hermes-repo search --help": [str(script), "search", "--help"],
            "hermes-repo sessions list": [*cmd, "sessions", "list"],
            "hermes-repo sessions show": [*cmd, "sessions", "show", "sample-kyoto-trip"],
            "hermes-repo sessions export": [*cmd, "sessions", "export", "sample-kyoto-trip"],
            "hermes-repo search checkpoint": [*cmd, "search", "checkpoint"],
            "hermes-repo doctor": [*cmd, "doctor"],
            'python -c "import sqlalchemy"': [sys.executable, "-c", "import sqlalchemy"],
            "floor: Core, click, rich": [sys.executable, "-c", _FLOOR],
        }
        for argv in cases.values():  # warm-up: byte-compile, fill the page cache
            _cpu_of(argv, env)
        samples: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeats):
            for name, argv in cases.items():
                samples[name].append(_cpu_of(argv, env))

    median = {name: statistics.median(s) for name, s in samples.items()}
    base = median['python -c "import sqlalchemy"']
    rows = []
    for name, cpu in median.items():
        if name.endswith("--help") or name.endswith("--version"):
            target, ok = f"<= {HELP_BUDGET_S:.2f} s", cpu <= HELP_BUDGET_S
        elif name.startswith("hermes-repo"):
            target, ok = f"<= {READ_RATIO:.1f}x", cpu <= READ_RATIO * base
        elif name.startswith("floor"):
            target, ok = "for scale", True
        else:
            target, ok = "yardstick", True
        rows.append({"case": name, "cpu_s": cpu, "ratio": cpu / base, "target": target, "ok": ok})
    if args.json:
        print(json.dumps({"repeats": args.repeats, "python": sys.version.split()[0], "rows": rows}))
        return
    print(f"CPU seconds per process, median of {args.repeats} (Python {sys.version.split()[0]})")
    print(f"{'case':32} {'CPU s':>7} {'x sqlalchemy':>13}  target")
    for r in rows:
        mark = "" if r["ok"] else "  (over)"
        print(f"{r['case']:32} {r['cpu_s']:7.3f} {r['ratio']:13.2f}  {r['target']}{mark}")


if __name__ == "__main__":
    main()
