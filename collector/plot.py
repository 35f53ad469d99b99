"""Pictures of an export: per worker, GPU utilisation and memory over time with the job/DAG
phases shaded, and a cluster overview. Needs the optional extra ``dask-metrics[plot]``
(matplotlib), imported only here so that the rest of the collector does without it.
"""

from __future__ import annotations

import fnmatch
import math
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dask_metrics.atomicfile import atomic_open
from dask_metrics.collector.errors import CollectorError, UsageError
from dask_metrics.collector.plotdata import Phase, WorkerTrace, break_gaps, read_export

FORMATS = ("png", "svg")
SIZE = (12.0, 6.5)  # inches; at DPI: 1200 x 650 pixels
DPI = 100
GIB = 2**30
CLUSTER = "cluster"  # the overview's file name; a worker of that name is "worker-cluster"
MAX_LEGEND = 16
PLOT_METRICS = ("total-mem", "mem-util", "compute-util", "peak-mem", "mem-bw-util")


def require_matplotlib() -> Any:
    """matplotlib's Figure, or a CollectorError saying how to get it: asked first, before
    any export or folder is made for pictures that cannot be drawn."""
    try:
        from matplotlib.figure import Figure  # the object API: no pyplot, no global state
    except ImportError:
        raise CollectorError("plots need matplotlib: pip install matplotlib, or the "
                             "dask-metrics wheel with its [plot] extra") from None
    return Figure


def _figure() -> Any:
    return require_matplotlib()(figsize=SIZE, dpi=DPI, layout="constrained")


def _nan(values: Sequence[float | None], scale: float = 1.0) -> list[float]:
    return [math.nan if v is None else v * scale for v in values]


def _line(ax: Any, times: Sequence[float], values: Sequence[float | None], scale: float = 1.0,
          **style: Any) -> None:
    """A line that breaks where a value is missing or samples stop for a while."""
    t, v = break_gaps(times, _nan(values, scale))
    ax.plot(t, v, **style)


def _shade(axes: Sequence[Any], found: Sequence[Phase]) -> None:
    """One colour per job, a label per DAG where there is room for it."""
    if not found:
        return
    colours = {job: f"C{i % 10}" for i, job in enumerate(dict.fromkeys(p.job for p in found))}
    top = axes[0]
    left, right = top.get_xlim()
    for p in found:
        for ax in axes:  # a line where each DAG starts: a job's DAGs share its colour
            ax.axvspan(p.start, p.end, color=colours[p.job], alpha=0.15, linewidth=0)
            ax.axvline(p.start, color=colours[p.job], alpha=0.6, linewidth=0.8)
        if (p.end - p.start) >= 0.04 * (right - left):
            top.text((p.start + p.end) / 2, 1.01, f"job {p.job}\nDAG {p.dag}",
                     transform=top.get_xaxis_transform(), ha="center", va="bottom", fontsize=7)
    top.set_xlim(left, right)


def _finish(fig: Any, util: Any, mem: Any, title: str, legend: bool = True) -> None:
    util.set_ylim(0, 105)
    util.set_ylabel("GPU utilisation (%)")
    mem.set_ylabel("GPU memory (GiB)")
    mem.set_ylim(bottom=0)
    mem.set_xlabel("seconds since the start")
    for ax in (util, mem):
        ax.grid(alpha=0.3)
        if legend and ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=11)


def worker_figure(trace: WorkerTrace) -> Any:
    fig = _figure()
    util, mem = fig.subplots(2, 1, sharex=True)
    capacity = None
    for i, gpu in enumerate(trace.gpus):
        colour, name = f"C{i % 10}", f"GPU {gpu.gpu}"
        if "compute-util" in gpu.values:
            _line(util, gpu.times, gpu.values["compute-util"], color=colour,
                  label=f"{name} compute")
        if "mem-bw-util" in gpu.values:
            _line(util, gpu.times, gpu.values["mem-bw-util"], color=colour, linestyle="--",
                  label=f"{name} memory bandwidth")
        if "total-mem" in gpu.values:
            _line(mem, gpu.times, gpu.values["total-mem"], 1 / GIB, color=colour,
                  label=f"{name} used")
        if "peak-mem" in gpu.values:
            _line(mem, gpu.times, gpu.values["peak-mem"], 1 / GIB, color=colour, linestyle=":",
                  drawstyle="steps-post", label=f"{name} peak (between scrapes too)")
        capacity = capacity or gpu.capacity()
    if capacity:
        mem.axhline(capacity / GIB, color="0.4", linestyle="--", linewidth=1, label="capacity")
    _shade((util, mem), trace.phases)
    since = f" from {trace.start}" if trace.start else ""
    _finish(fig, util, mem, f"{trace.worker}: {len(trace.gpus)} GPU(s){since}, "
            "shaded: the job/DAG running on this worker")
    return fig


def cluster_figure(traces: Sequence[WorkerTrace]) -> Any:
    fig = _figure()
    util, mem = fig.subplots(2, 1, sharex=True)
    for i, trace in enumerate(traces):
        style = {"color": f"C{i % 10}", "label": trace.worker, "linewidth": 1}
        if "compute-util" in trace.metrics:
            _line(util, *trace.mean("compute-util"), **style)
        if "total-mem" in trace.metrics:
            _line(mem, *trace.total("total-mem"), 1 / GIB, **style)
    busiest = max(traces, key=lambda t: sum(len(g.times) for g in t.gpus))
    _shade((util, mem), busiest.cluster_phases)
    gpus = sum(len(t.gpus) for t in traces)
    since = f" from {busiest.start}" if busiest.start else ""
    _finish(fig, util, mem, f"cluster: {len(traces)} worker(s), {gpus} GPU(s){since}; mean "
            "utilisation and memory used per worker, shaded: the cluster's job/DAG",
            legend=len(traces) <= MAX_LEGEND)
    return fig


def _save(fig: Any, stem: Path, formats: Sequence[str]) -> list[Path]:
    written = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        with atomic_open(path, binary=True) as fh:
            fig.savefig(fh, format=fmt)
        written.append(path)
    return written


def plot_export(folder: str | os.PathLike[str], out: str | os.PathLike[str],
                formats: Sequence[str] = ("png",),
                workers: Sequence[str] | None = None) -> list[Path]:
    """Plot a tidy export folder into ``out``: one picture per worker and format, and the
    cluster overview. Each file is written atomically; returns their paths."""
    unknown = [f for f in formats if f not in FORMATS]
    if unknown or not formats:
        raise UsageError(f"--format: {', '.join(unknown) or 'none given'} (known: "
                         f"{', '.join(FORMATS)})")
    require_matplotlib()
    traces = read_export(folder)
    if workers:
        traces = [t for t in traces if any(fnmatch.fnmatchcase(t.worker, w) for w in workers)]
        if not traces:
            raise CollectorError(f"no worker in {folder} matches {', '.join(workers)}")
    target = Path(out)
    created = not target.exists()
    target.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    try:
        for trace in traces:
            stem = f"worker-{CLUSTER}" if trace.stem == CLUSTER else trace.stem
            written += _save(worker_figure(trace), target / stem, formats)
        written += _save(cluster_figure(traces), target / CLUSTER, formats)
    except BaseException:  # a folder made for pictures that could not all be drawn goes
        if created:
            shutil.rmtree(target, ignore_errors=True)
        raise
    return written
