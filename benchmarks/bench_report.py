"""The session report against the export of the same session (the target: a report of a
one-hour session of 32 workers x 4 GPUs takes no longer than its export).

    python benchmarks/bench_report.py --workers 32 --gpus 4 --hours 1 --rounds 3

The fixture and Prometheus are bench_collector.py's (the same cached TSDB blocks). Each
contender runs in a fresh subprocess (the real CLI, ``--quiet``), in rotating order over
``--rounds``:

- ``export``: ``collector export`` with its default columns, what a user runs;
- ``export, 6 columns``: bench_collector.py's ``--metrics`` (its "ours");
- ``report``: ``collector report --out`` (report.html with its charts, and report.json);
- ``report --format text``: the same numbers, no page and no plots;
- ``report --baseline DIR``: the report against an earlier report.json (the same session's,
  written once before the rounds): what a CI job comparing runs does.

Prints a markdown table: median and min wall time, max RSS, ratio to the default export.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import (  # a sibling script, not a package
    METRICS,
    mib,
    run_child,
    served_fixture,
    versions,
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cache", help="where the backfilled TSDB is kept between runs")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    walls: dict[str, list[float]] = {}
    rss: dict[str, list[int]] = {}
    loads = [os.getloadavg()[0]]
    try:
        with served_fixture(args.workers, args.gpus, args.hours, args.cache,
                            work) as (fix, prom):
            base = [sys.executable, "-m", "dask_metrics.collector"]
            span = ["--prometheus", prom.url, "--since", str(fix.t0), "--until", str(fix.t1),
                    "--quiet"]
            out = work / "out"
            contenders = {
                "export": [*base, "export", *span, "--out", str(out)],
                "export, 6 columns": [*base, "export", *span, "--out", str(out), "--metrics",
                                      *METRICS],
                "report": [*base, "report", *span, "--out", str(out)],
                "report --format text": [*base, "report", *span, "--format", "text"],
                "report --baseline DIR": [*base, "report", *span, "--out", str(out),
                                          "--baseline", str(work / "baseline")],
            }
            names = list(contenders)
            run_child(contenders["export"], work / "child.log")  # warm-up: page cache
            run_child([*base, "report", *span, "--out", str(work / "baseline"), "--plots", "0"],
                      work / "child.log")
            shutil.rmtree(out, ignore_errors=True)
            for r in range(args.rounds):
                print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
                for name in names[r % len(names):] + names[:r % len(names)]:
                    wall, peak, _ = run_child(contenders[name], work / "child.log")
                    shutil.rmtree(out, ignore_errors=True)
                    walls.setdefault(name, []).append(wall)
                    rss.setdefault(name, []).append(peak)
                    print(f"  {name}: {wall:.2f} s, {mib(peak)} MiB", file=sys.stderr)
                loads.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    from tests.prometheus_helpers import PROMETHEUS

    ver = versions(str(PROMETHEUS))
    export = statistics.median(walls["export"])
    print(f"Data: bench_collector.py's fixture, {args.workers} workers x {args.gpus} GPUs, "
          f"{args.hours:g} h at 1 s, {fix.samples:,} samples; median of {args.rounds} rounds. "
          f"Versions: {', '.join(f'{k} {v}' for k, v in ver.items())}. Load: "
          f"{', '.join(f'{x:.1f}' for x in loads)}.\n")
    print("| contender | wall s (median) | min | x export | max RSS MiB |\n"
          "|---|---:|---:|---:|---:|")
    for name in names:
        wall = statistics.median(walls[name])
        print(f"| {name} | {wall:.2f} | {min(walls[name]):.2f} | {wall / export:.2f} | "
              f"{mib(max(rss[name]))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
