"""`collector plot --csv` on a fleet's export: wall time and peak RSS by the number of
workers and by the range, now and before.

    python benchmarks/bench_plot_fleet.py --workers 100 300 1000 --hours 1 --before REF
    python benchmarks/bench_plot_fleet.py --workers 10 --hours 24 168 --before REF

The exports are synthetic tidy folders, written here the way ``collector export`` writes
them for ``collector plot`` (its PLOT_METRICS columns; every worker of ``--gpus`` GPUs
sampled every ``--interval`` s, a job every 20 minutes of four DAGs, a worker in ten
stopping for a tenth of the range), so that no store is needed: `plot --csv` reads files
only. Each size runs the real CLI (PNG, ``--quiet``) in a fresh process (bench_collector's
run_child: wall time and the process' own peak RSS), now and with ``--before REF`` the code
of git revision REF (bench_collector's before_tree), in rotating order over ``--rounds``.
Prints a markdown table: medians by size.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import before_tree, mib, run_child  # a sibling script, not a package

START = 1_767_225_600  # 2026-01-01T00:00:00Z
GIB = 2**30


def write_worker(path: Path, name: str, gpus: int, hours: float, interval: float,
                 rng: random.Random, stops: bool) -> int:
    """One worker's tidy file; returns its rows."""
    from dask_metrics.collector.model.timespec import format_rfc3339
    from dask_metrics.collector.output.traces import FIXED
    from dask_metrics.collector.plot.pages import PLOT_METRICS

    span = hours * 3600
    quiet = (0.4 * span, 0.5 * span) if stops else (span, span)
    rows = 0
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(",".join([*FIXED, *PLOT_METRICS]) + "\n")
        used = [rng.uniform(2, 30) * GIB for _ in range(gpus)]
        t = 0.0
        while t < span:
            if not quiet[0] <= t < quiet[1]:
                job, dag = str(int(t // 1200)), str(int(t % 1200 // 300))
                stamp = f"{t:.3f},{format_rfc3339(round((START + t) * 1000))},{name}"
                for g in range(gpus):
                    used[g] = min(max(used[g] + rng.uniform(-1, 1) * GIB, 0.0), 40 * GIB)
                    util = rng.uniform(0, 100)
                    values = {"total-mem": used[g], "mem-util": used[g] / (40 * GIB) * 100,
                              "compute-util": util, "peak-mem": used[g] * 1.1,
                              "mem-bw-util": util / 2}
                    fh.write(f"{stamp},{g},GPU-{name}-{g},{job},{dag},{job},{dag},"
                             + ",".join(f"{values[m]:.6g}" for m in PLOT_METRICS) + "\n")
                    rows += 1
            t += interval
    return rows


def export(folder: Path, workers: int, gpus: int, hours: float, interval: float) -> int:
    folder.mkdir(parents=True)
    rng = random.Random(workers * 1000 + int(hours))
    return sum(write_worker(folder / f"w{i:04d}.csv", f"w{i:04d}", gpus, hours, interval, rng,
                            stops=i % 10 == 0) for i in range(workers))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[100])
    parser.add_argument("--hours", type=float, nargs="+", default=[1.0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", metavar="REF", help="also run git revision REF's plot")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-plot-fleet-"))
    lines = ["| workers x GPUs | range | rows | contender | wall s | peak RSS MiB |",
             "|---|---|---:|---|---:|---:|"]
    try:
        trees: dict[str, Path | None] = {"now": None}
        if args.before:
            trees = {f"before ({args.before})": before_tree(args.before, work / "before"),
                     **trees}
        for workers in args.workers:
            for hours in args.hours:
                folder = work / f"export-{workers}-{hours:g}"
                rows = export(folder, workers, args.gpus, hours, args.interval)
                found: dict[str, list[tuple[float, int]]] = {name: [] for name in trees}
                for r in range(args.rounds):
                    for name in list(trees)[r % len(trees):] + list(trees)[:r % len(trees)]:
                        out = work / "plots"
                        shutil.rmtree(out, ignore_errors=True)
                        wall, rss, _ = run_child(
                            [sys.executable, "-m", "dask_metrics.collector", "plot", "--csv",
                             str(folder),
                             "--out", str(out), "--quiet"], work / "plot.log", trees[name])
                        found[name].append((wall, rss))
                        print(f"{workers} workers, {hours:g} h, {name}: {wall:.1f} s, "
                              f"{mib(rss)} MiB", file=sys.stderr)
                for name, runs in found.items():
                    lines.append(f"| {workers} x {args.gpus} | {hours:g} h at "
                                 f"{args.interval:g} s | {rows:,} | {name} | "
                                 f"{statistics.median(w for w, _ in runs):.1f} | "
                                 f"{mib(statistics.median(r for _, r in runs))} |")
                shutil.rmtree(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
