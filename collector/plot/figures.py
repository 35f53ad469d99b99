"""The pictures themselves (matplotlib's object API, no pyplot): a worker's GPU utilisation
and memory over time with the job/DAG phases shaded and named, and the cluster page with
what ran on each worker. Simulated GPUs are marked on the picture itself, so that a copied
PNG cannot pass for a real run."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from dask_metrics.collector.charts.layout import (
    break_gaps,
    envelope,
    job_colours,
    label_forms,
    place_labels,
    time_unit,
)
from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.model.jobs import JobNames
from dask_metrics.collector.output.provenance import UNKNOWN, Provenance
from dask_metrics.collector.output.traces import (
    Phase,
    WorkerTrace,
)
from dask_metrics.collector.plot.overviews import MEMORY, UTIL, Overview, Spread

SIZE = (12.0, 6.5)  # inches; at DPI: 1200 x 650 pixels


DPI = 100


BUCKETS = round(SIZE[0] * DPI)  # envelope buckets across a time axis: one per pixel or less


GIB = 2**30


MIB = 2**20


MAX_LEGEND = 16


LEGEND_ROWS = 20  # entries a panel's legend holds beside it without squeezing the panels


MAX_ROWS = 40  # workers named on the "ran on" rows of the cluster page; more: rows only


MAX_LINES = 40  # workers drawn a line each on the cluster page; more: their spread


CHARS_PER_AXIS = 150  # 7-point characters across an axes of the figure (a little under)


LABEL_ROW = 0.07  # height of a row of phase labels above an axes, in axes fractions


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


def _line(ax: Any, times: Sequence[float], values: Sequence[float | None], span: float,
          scale: float = 1.0, unit: float = 1.0, marked: bool = False, **style: Any) -> None:
    """A line that breaks where a value is missing or samples stop for a while (``marked``:
    the stops are already values missing), drawn as the envelope of its samples over
    buckets no wider than a pixel column of the figure (every spike stays); ``span``:
    seconds the time axis shows, ``unit``: seconds per unit of the time axis."""
    t, v = [x / unit for x in times], _nan(values, scale)
    if not marked:
        t, v = break_gaps(t, v)
    t, v = envelope(t, v, 0.0, span / unit, BUCKETS)
    ax.plot(t, v, **style)


def _shade(axes: Sequence[Any], found: Sequence[Phase], names: JobNames, unit: float,
           colours: dict[str, str], top: Any = None) -> None:
    """One colour per job, a line where each DAG starts; every phase labelled by name above
    ``top`` (the first of ``axes`` by default), narrow ones on staggered rows rather than
    left out; each job once in the legend of the first axes."""
    if not found:
        return
    from matplotlib.collections import LineCollection

    top = axes[0] if top is None else top
    left, right = top.get_xlim()
    per_char = (right - left) / CHARS_PER_AXIS
    ordered = sorted(found, key=lambda p: (p.start + p.end) / 2)
    forms = [label_forms(names, p) for p in ordered]
    centres = [(p.start + p.end) / 2 / unit for p in ordered]
    placed = place_labels([(c, [(len(f) + 1) * per_char for f in texts])
                           for c, texts in zip(centres, forms, strict=True)])
    for ax in axes:  # a line where each DAG starts: a job's DAGs share its colour
        _bands(ax, [(p, 0.0, 1.0) for p in ordered], names, colours, unit,
               ax.get_xaxis_transform(), legend=ax is axes[0], alpha=0.15, linewidth=0)
        ax.add_collection(LineCollection(
            [[(p.start / unit, 0), (p.start / unit, 1)] for p in ordered],
            colors=[colours[p.job] for p in ordered], alpha=0.6, linewidth=0.8,
            transform=ax.get_xaxis_transform()), autolim=False)
    labels = [(p, texts[form], centre, row)
              for p, texts, centre, (row, form) in zip(ordered, forms, centres, placed,
                                                       strict=True)]
    half = [(len(text) + 1) * per_char / 2 for _, text, _, _ in labels]
    outer = {min(range(len(labels)), key=lambda i: labels[i][2] - half[i]),
             max(range(len(labels)), key=lambda i: labels[i][2] + half[i]),
             max(range(len(labels)), key=lambda i: labels[i][3])}
    for i, (p, text, centre, row) in enumerate(labels):  # the layout needs only the outer ones
        top.text(centre, 1.01 + LABEL_ROW * row, text, transform=top.get_xaxis_transform(),
                 ha="center", va="bottom", fontsize=7, color=colours[p.job], clip_on=False,
                 in_layout=i in outer)


def _bands(ax: Any, boxes: Iterable[tuple[Phase, float, float]], names: JobNames,
           colours: dict[str, str], unit: float, transform: Any, legend: bool, **style: Any
           ) -> None:
    """Phases as bands, each (phase, low, high) in ``transform``'s y, one collection per
    job (a patch per phase costs a millisecond or more to add and draw: thousands on the
    cluster page), each job once in the legend when ``legend``, as many as it has rows
    left (a week of jobs would push the panels off the picture; the rest are counted)."""
    from matplotlib.collections import PolyCollection

    by_job: dict[str, list[list[tuple[float, float]]]] = {}
    for p, low, high in boxes:
        start, end = p.start / unit, p.end / unit
        by_job.setdefault(p.job, []).append([(start, low), (start, high), (end, high),
                                             (end, low)])
    rows = LEGEND_ROWS - len(ax.get_legend_handles_labels()[1])
    named = len(by_job) if len(by_job) <= rows else max(rows - 1, 1)
    for i, (job, verts) in enumerate(by_job.items()):
        ax.add_collection(PolyCollection(verts, color=colours[job], transform=transform,
                                         label=names.job(job) if legend and i < named
                                         else None, **style), autolim=False)
    if legend and len(by_job) > named:
        ax.plot([], [], " ", label=f"and {len(by_job) - named} more jobs")


def _capacity(ax: Any, capacities: Sequence[tuple[float | None, str]], what: str) -> None:
    """Capacity lines on a memory panel: one grey line when all are equal to the MiB (they
    are read back from used bytes and %, so equal ones differ in their last digits), else a
    dashed line per GPU or worker in its colour."""
    known = [(c, colour) for c, colour in capacities if c]
    if len({round(c / MIB) for c, _ in known}) == 1:
        value = known[0][0] / GIB
        ax.axhline(value, color="0.4", linestyle="--", linewidth=1,
                   label=f"capacity{what} ({value:.4g} GiB)")
        return
    for i, (c, colour) in enumerate(known):
        ax.axhline(c / GIB, color=colour, linestyle=(0, (4, 2)), linewidth=1,
                   label=f"capacity{what} (dashed)" if i == 0 else None)


def _finish(fig: Any, util: Any, mem: Any, title: str, unit: tuple[float, str], start: str,
            legend: bool = True, simulated: str = "") -> None:
    util.set_ylim(0, 105)
    util.set_ylabel("GPU utilisation (%)")
    mem.set_ylabel("GPU memory (GiB)")
    mem.set_ylim(bottom=0)
    mem.set_xlabel(f"{unit[1]} since the start" + (f" ({start})" if start else ""))
    for ax in (util, mem):
        ax.grid(alpha=0.3)
        if legend and ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False)
    if simulated:
        title = f"{simulated}: {title}"
        fig.text(0.5, 0.45, "SIMULATED GPUs", fontsize=56, color="red", alpha=0.12,
                 rotation=20, ha="center", va="center", in_layout=False)
    fig.suptitle(title, fontsize=11, color="red" if simulated else "black")


def _span(traces: Sequence[WorkerTrace]) -> float:
    return max((g.times[-1] for t in traces for g in t.gpus if g.times), default=0.0)


def worker_figure(trace: WorkerTrace, provenance: Provenance = UNKNOWN) -> Any:
    fig = _figure()
    util, mem = fig.subplots(2, 1, sharex=True)
    span = _span([trace])
    unit = time_unit(span)
    marked = trace.gaps_marked
    for i, gpu in enumerate(trace.gpus):
        colour, name = f"C{i % 10}", f"GPU {gpu.gpu}"
        if "compute-util" in gpu.values:
            _line(util, gpu.times, gpu.values["compute-util"], span, unit=unit[0],
                  marked=marked, color=colour, label=f"{name} compute")
        if "mem-bw-util" in gpu.values:
            _line(util, gpu.times, gpu.values["mem-bw-util"], span, unit=unit[0],
                  marked=marked, color=colour, linestyle="--", label=f"{name} memory bandwidth")
        if "total-mem" in gpu.values:
            _line(mem, gpu.times, gpu.values["total-mem"], span, 1 / GIB, unit[0],
                  marked=marked, color=colour, label=f"{name} used")
        if "peak-mem" in gpu.values:
            _line(mem, gpu.times, gpu.values["peak-mem"], span, 1 / GIB, unit[0],
                  marked=marked, color=colour, linestyle=":", drawstyle="steps-post",
                  label=f"{name} peak (between scrapes too)")
    _capacity(mem, [(g.capacity(), f"C{i % 10}") for i, g in enumerate(trace.gpus)], "")
    _shade((util, mem), trace.phases, provenance.names, unit[0], job_colours(trace.phases))
    simulated = "SIMULATED GPUs" if trace.worker in provenance.simulated else ""
    _finish(fig, util, mem, f"{trace.worker}: {len(trace.gpus)} GPU(s)\nshaded: the job/DAG "
            "running on this worker", unit, trace.start, simulated=simulated)
    return fig


def _where(ax: Any, workers: Sequence[Overview], names: JobNames, unit: float,
           colours: dict[str, str]) -> None:
    """What ran on each worker: a row per worker (the first on top), a bar per phase in its
    job's colour, each job once in the legend."""
    boxes = [(p, row - 0.4, row + 0.4) for row, w in enumerate(workers) for p in w.phases]
    _bands(ax, boxes, names, colours, unit, ax.transData, legend=True, linewidth=0.8)
    ax.set_ylim(len(workers) - 0.5, -0.5)
    if len(workers) <= MAX_ROWS:
        ax.set_yticks(range(len(workers)), [w.worker for w in workers], fontsize=7)
    else:
        ax.set_yticks([])
    ax.set_ylabel("ran on", fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    if boxes:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7, frameon=False,
                  title="job", title_fontsize=7)


def _spread(ax: Any, spread: Spread, metric: str, workers: int, unit: float,
            scale: float = 1.0) -> None:
    """The workers' spread of ``metric``: a band from the lowest to the highest and a line
    for the mean, per pixel column."""
    found = spread.of(metric)
    if found is None:
        return
    middle, low, mean, high = found
    ax.fill_between(middle / unit, low * scale, high * scale, color="C0", alpha=0.25,
                    linewidth=0, label=f"lowest to highest of {workers} workers")
    ax.plot(middle / unit, mean * scale, color="C0", linewidth=1, label="mean of the workers")


def cluster_figure(workers: Sequence[Overview], provenance: Provenance = UNKNOWN,
                   spread: Spread | None = None) -> Any:
    """The cluster page from each worker's ``Overview``: a line per worker, or with
    ``spread`` the workers' spread."""
    fig = _figure()
    rows = min(0.3 + 0.12 * len(workers), 1.6)
    where, util, mem = fig.subplots(3, 1, sharex=True, height_ratios=[rows, 2, 2])
    span = max((w.last for w in workers), default=0.0)
    unit = time_unit(span)
    if spread is not None:
        _spread(util, spread, UTIL, len(workers), unit[0])
        _spread(mem, spread, MEMORY, len(workers), unit[0], 1 / GIB)
    for i, w in enumerate(workers):
        style = {"color": f"C{i % 10}", "label": w.worker, "linewidth": 1}
        if w.util is not None:
            _line(util, w.util[0].tolist(), w.util[1].tolist(), span, unit=unit[0],
                  marked=True, **style)
        if w.memory is not None:
            _line(mem, w.memory[0].tolist(), w.memory[1].tolist(), span, 1 / GIB, unit[0],
                  marked=True, **style)
    capacities = [(w.capacity, f"C{i % 10}") for i, w in enumerate(workers)]
    if spread is not None:  # a line per capacity (to the MiB), not one per worker again
        capacities = [(c, "0.4") for c in {round(w.capacity / MIB): w.capacity
                                           for w in workers if w.capacity}.values()]
    _capacity(mem, capacities, " of a worker")
    busiest = max(workers, key=lambda w: w.samples)
    colours = job_colours([p for w in workers for p in (*w.phases, *w.cluster_phases)])
    _where(where, workers, provenance.names, unit[0], colours)
    _shade((util, mem), busiest.cluster_phases, provenance.names, unit[0], colours, top=where)
    # a GPU that several workers see (one UUID) is one GPU
    gpus = len({u or (w.worker, i) for w in workers for i, u in enumerate(w.devices)})
    fake = [w.worker for w in workers if w.worker in provenance.simulated]
    simulated = (f"SIMULATED GPUs on {len(fake)} of {len(workers)} worker(s)" if fake else "")
    below = ("the workers' lowest to highest and mean"
             if spread is not None else "mean utilisation and memory used per worker")
    _finish(fig, util, mem, f"cluster: {len(workers)} worker(s), {gpus} GPU(s)\ntop: what ran "
            f"on each worker; below: {below}, shaded: the cluster's oldest unfinished job/DAG",
            unit, busiest.start, legend=len(workers) <= MAX_LEGEND or spread is not None,
            simulated=simulated)
    return fig
