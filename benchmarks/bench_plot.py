"""The collector's pictures of one session: per-worker picture and cluster overview times.

    python benchmarks/bench_plot.py --workers 32 --gpus 4 --hours 1 --rounds 5 --before REF

The data is bench_collector.py's fixture (the same cached TSDB blocks), exported once with
the real CLI the way ``collector plot`` exports it (``--metrics`` its PLOT_METRICS); the
pictures are then drawn from that folder. Each round runs in a fresh subprocess, which
reads the export (a piece at a time, as ``plot_export`` does; older code: ``read_export``),
draws every worker's picture (``worker_figure`` + PNG into memory), the cluster
overview of all workers and of the first 4 (what the session report drew with its default
``--plots 4`` until its charts became SVG of its own), and one worker and the overview as
SVG. ``--before REF`` alternates rounds with the code of git revision REF (its
``dask_metrics`` built from ``git archive`` into a temporary folder and put first on
PYTHONPATH), so both run under the same load.

Prints a markdown table of medians over the rounds (each round's per-worker figure is the
median of its workers), and the 1-minute load average before and after each round.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_collector import (  # a sibling script
    ROOT,
    before_tree,
    run_child,
    served_fixture,
)

SMALL = 4  # workers on a small overview (the session report's DEFAULT_PLOTS)
PARTS = {"import": "import the plot module (matplotlib)",
         "read": "read the export (32 worker files, jobs.csv, workers.csv)",
         "worker": "one worker's picture, PNG (median of the workers)",
         "workers": "every worker's picture, PNG (sum)",
         "cluster": "cluster overview of all workers, PNG",
         "cluster-small": f"overview of {SMALL} workers, PNG",
         "worker-svg": "one worker's picture, SVG",
         "cluster-svg": "cluster overview of all workers, SVG",
         "plot": "all of `collector plot --csv` in PNG (import + read + workers + cluster)"}


def draw(folder: Path) -> dict[str, list[float]]:
    """One round, in this process: [wall, CPU] seconds per part (see PARTS)."""
    clock = (time.perf_counter, time.process_time)
    began = [c() for c in clock]
    from dask_metrics.collector.output import traces as worker_traces
    from dask_metrics.collector.output.provenance import read_provenance
    from dask_metrics.collector.plot import figures, pages

    def since(began: list[float]) -> list[float]:
        return [c() - b for c, b in zip(clock, began, strict=True)]

    out = {"import": since(began)}

    def timed(fig_of, fmt: str = "png") -> list[float]:  # as plot_export saves them
        began = [c() for c in clock]
        fig_of().savefig(io.BytesIO(), format=fmt, **getattr(pages, "SAVE", {}).get(fmt, {}))
        return since(began)

    began = [c() for c in clock]
    provenance = read_provenance(folder)
    if hasattr(worker_traces, "open_worker_file"):  # a piece at a time, as plot_export reads
        opened = list(map(worker_traces.open_worker_file, worker_traces.export_files(folder)))
        span = max(f.last or 0 for f in opened) / 1000
        read = [pages._read(f, span) for f in opened]
        traces, overviews = [t for t, _ in read], [fold.overview(t) for t, fold in read]
    else:  # the cluster page draws each worker's overview (older code: the traces themselves)
        traces = worker_traces.read_export(folder)
        overviews = list(map(getattr(worker_traces, "overview_of", lambda t: t), traces))
    out["read"] = since(began)
    each = [timed(lambda t=t: figures.worker_figure(t, provenance)) for t in traces]
    out["worker"] = [statistics.median(x) for x in zip(*each, strict=True)]
    out["workers"] = [sum(x) for x in zip(*each, strict=True)]
    out["cluster"] = timed(lambda: figures.cluster_figure(overviews, provenance))
    out["cluster-small"] = timed(lambda: figures.cluster_figure(overviews[:SMALL], provenance))
    out["worker-svg"] = timed(lambda: figures.worker_figure(traces[0], provenance), "svg")
    out["cluster-svg"] = timed(lambda: figures.cluster_figure(overviews, provenance), "svg")
    out["plot"] = [sum(x) for x in zip(*(out[k] for k in ("import", "read", "workers",
                                                           "cluster")), strict=True)]
    return out


def export_folder(args: argparse.Namespace, work: Path) -> Path:
    """The fixture exported as ``collector plot`` exports it."""
    out = work / "export"
    with served_fixture(args.workers, args.gpus, args.hours, args.cache, work) as (fix, prom):
        from dask_metrics.collector.plot.pages import PLOT_METRICS

        run_child([sys.executable, "-m", "dask_metrics.collector", "export", "--prometheus",
                   prom.url, "--since", str(fix.t0), "--until", str(fix.t1), "--out",
                   str(out), "--metrics", *PLOT_METRICS, "--quiet"], work / "export.log")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_draw"]:
        print(json.dumps(draw(Path(argv[1]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=32)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", metavar="REF",
                        help="alternate rounds with the plots of this git revision")
    parser.add_argument("--cache", help="where the backfilled TSDB is kept between runs")
    args = parser.parse_args(argv)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    work = Path(tempfile.mkdtemp(prefix="bench-plot-"))
    try:
        folder = export_folder(args, work)
        trees = {"now": os.environ.get("PYTHONPATH", "")}
        if args.before:
            trees = {f"before ({args.before})": str(before_tree(args.before, work / "before")),
                     **trees}
        results: dict[str, list[dict[str, list[float]]]] = {name: [] for name in trees}
        loads = [os.getloadavg()[0]]
        for r in range(args.rounds):
            for name in list(trees)[r % len(trees):] + list(trees)[:r % len(trees)]:
                env = {**os.environ, "PYTHONPATH": trees[name]}
                done = subprocess.run([sys.executable, __file__, "_draw", str(folder)],
                                      capture_output=True, text=True, env=env, cwd=work,
                                      check=False)
                if done.returncode != 0:
                    raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
                results[name].append(json.loads(done.stdout.splitlines()[-1]))
                print(f"round {r + 1}/{args.rounds} {name}: " + ", ".join(
                    f"{k} {v[0]:.2f}" for k, v in results[name][-1].items()), file=sys.stderr)
            loads.append(os.getloadavg()[0])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"Data: bench_collector.py's fixture, {args.workers} workers x {args.gpus} GPUs, "
          f"{args.hours:g} h at 1 s, exported with PLOT_METRICS. Seconds, median of "
          f"{args.rounds} rounds, wall (CPU of the process). 1-minute load average before and "
          f"after each round: {', '.join(f'{x:.1f}' for x in loads)}.\n")
    names = list(trees)
    ratio = len(names) == 2
    print(f"| part | {' | '.join(names)} |{' wall before / now |' if ratio else ''}\n"
          f"|---|{'---:|' * (len(names) + ratio)}")
    for part, what in PARTS.items():
        wall = [statistics.median(r[part][0] for r in results[n]) for n in names]
        cpu = [statistics.median(r[part][1] for r in results[n]) for n in names]
        cells = " | ".join(f"{w:.3f} ({c:.3f})" for w, c in zip(wall, cpu, strict=True))
        extra = f" {wall[0] / wall[1]:.1f} |" if ratio and wall[1] else ""
        print(f"| {what} | {cells} |{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
