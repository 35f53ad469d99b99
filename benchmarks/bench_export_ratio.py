"""``collector export`` against the plain fetch floor, on fixtures with and without the
series of where the time went, side by side (the target: at most 1.2x the floor of the
default columns' queries).

    python benchmarks/bench_export_ratio.py --rounds 5 --pythonpath /tmp/base/pkg

For each fixture of ``bench_collector.py`` (``with``: the busy counter, prefix tasks and
activity counters; ``without``: an older scheduler preload's data, none of them), on its own
Prometheus, the arms alternate in rotating order, each a fresh process:

- ``floor, columns``: requests + resp.json() of the queries that fetch the columns' data
  (discovery, the cluster's job/DAG, per worker its six series and its tasks);
- ``floor, all``: every query the export sends (where the time went and jobs.csv too);
- ``this``: this checkout's ``collector export`` with bench_collector.py's ``--metrics``;
- ``before`` (with ``--pythonpath``): the same CLI from another tree laid out as an
  importable ``dask_metrics/`` (e.g. ``git archive`` of an older commit, with collector/ and
  exporter/ copied inside it, as bench_collector.before_tree lays it out), run from outside
  the checkout so that the checkout's ``dask_metrics/`` does not shadow it; its output files
  must be byte-identical to this one's.

Prints a markdown table: median wall time per arm and the ratios, the load average.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import (  # a sibling script, not a package
    DEFAULT_CACHE,
    METRICS,
    identical,
    imports_from,
    run_child,
    served_fixture,
    worker_name,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--pythonpath", help="another tree's importable dask_metrics, to compare")
    parser.add_argument("--fixtures", nargs="+", default=["with", "without"],
                        choices=["with", "without"])
    parser.add_argument("--cache", default=str(DEFAULT_CACHE))
    args = parser.parse_args()
    names = [worker_name(i) for i in range(args.workers)]
    me = [sys.executable, str(Path(__file__).resolve().parent / "bench_collector.py")]
    rows = []
    for which in args.fixtures:
        work = Path(tempfile.mkdtemp(prefix="bench-export-ratio-"))
        walls: dict[str, list[float]] = {}
        loads = [os.getloadavg()[0]]
        same = "-"
        try:
            with served_fixture(args.workers, args.gpus, args.hours, args.cache, work,
                                fine=which == "with") as (fix, prom):
                floor = [*me, "_floor", prom.url, str(fix.t0), str(fix.t1)]
                export = ["-m", "dask_metrics.collector", "export", "--prometheus", prom.url,
                          "--since", str(fix.t0), "--until", str(fix.t1), "--quiet",
                          "--metrics", *METRICS, "--out"]
                arms = {"floor, columns": [*floor, "gzip:columns", *names],
                        "floor, all": [*floor, "gzip:all", *names],
                        "this": [sys.executable, *export, str(work / "this")]}
                if args.pythonpath:
                    imports_from(args.pythonpath, work)
                    arms["before"] = [sys.executable, *export, str(work / "before")]
                order = list(arms)
                run_child(arms["floor, all"], work / "child.log")  # warm-up: page cache
                for r in range(args.rounds):
                    for name in order[r % len(order):] + order[:r % len(order)]:
                        shutil.rmtree(work / name, ignore_errors=True)  # a new folder each time
                        wall, _, _ = run_child(arms[name], work / "child.log",
                                               args.pythonpath if name == "before" else None)
                        walls.setdefault(name, []).append(wall)
                        print(f"{which} round {r + 1} {name}: {wall:.2f} s", file=sys.stderr)
                    loads.append(os.getloadavg()[0])
                if args.pythonpath:
                    count, bad = identical(work / "this", work / "before")
                    same = f"{count} files, " + (f"differ: {', '.join(bad)}" if bad
                                                 else "identical")
        finally:
            shutil.rmtree(work, ignore_errors=True)
        med = {k: statistics.median(v) for k, v in walls.items()}
        rows.append((which, med, same, loads))
    arms = list(rows[0][1])
    print("| fixture | " + " | ".join(f"{a} s" for a in arms)
          + " | this / floor, columns | this / floor, all"
          + (" | before / floor, columns | this / before | files |" if args.pythonpath else " |")
          + " load |")
    print("|---" * (len(arms) + 3 + (3 if args.pythonpath else 0)) + "|")
    for which, med, same, loads in rows:
        cells = [f"{med[a]:.2f}" for a in arms]
        cells += [f"{med['this'] / med['floor, columns']:.2f}",
                  f"{med['this'] / med['floor, all']:.2f}"]
        if args.pythonpath:
            cells += [f"{med['before'] / med['floor, columns']:.2f}",
                      f"{med['this'] / med['before']:.2f}", same]
        cells.append("-".join(f"{x:.1f}" for x in (min(loads), max(loads))))
        print(f"| {which} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
