"""A worker's chart for the report page, as inline SVG (pure: text in, text out).

GPU utilisation and memory over time, one colour per GPU, the capacity line, and the job/DAG
phases that ran on the worker shaded in their job's colour and named above the chart. The
same picture as ``collector plot``'s worker PNG, from the same points (``charts.layout``: the
per-pixel envelope, the breaks at gaps, the phases' label rows), but written as SVG
text: a matplotlib figure costs about half a second to lay out and rasterise and the library
as much to import, which made the report slower than its export; this costs milliseconds,
needs no plotting library, and the browser sets the text.
"""

from __future__ import annotations

import html
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
from dask_metrics.collector.model.jobs import JobNames
from dask_metrics.collector.output.traces import Phase, WorkerTrace

# matplotlib's default cycle, so that a GPU or job has the colour it has in `collector plot`
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
WIDTH, LEFT, RIGHT = 1200, 64, 250  # px; RIGHT: the legend's column
PANEL, GAP, BOTTOM = 210, 34, 46  # px: each panel's height, between them, below them
TITLE, ROW = 40, 15  # px: the title's band, a row of phase labels
CHAR = 6.2  # px: the mean width of a character at the 11 px labels (for label rows)
LEGEND_CHARS = (RIGHT - 50) // 6  # characters of a legend label that fit its column
LEVELS = 3  # rows of phase labels at most (place_labels' default)
GIB = 2**30
DASH = {"solid": "", "dashed": "6 3", "dotted": "1.5 3"}


def _colour(name: str) -> str:
    """``C3`` -> the palette's colour."""
    return PALETTE[int(name[1:]) % len(PALETTE)]


def nice_ticks(lo: float, hi: float, most: int = 6, cover: bool = False) -> list[float]:
    """Round tick values in [lo, hi]: steps of 1, 2 or 5 times a power of ten; ``cover``:
    up to the first tick at or above ``hi`` (an axis whose top is its last tick)."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / most
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9)
    last = math.ceil(hi / step - 1e-9) if cover else math.floor(hi / step + 1e-9)
    return [round(k * step, 10) for k in range(first, last + 1)]


def _number(value: float) -> str:
    return f"{value:.10g}"


def _path(xs: Any, ys: Any) -> str:
    """An SVG path through the points (float arrays), lifted at NaN (a gap in the samples)."""
    import numpy as np

    hole = np.isnan(ys)
    cuts = np.flatnonzero(hole)
    out = []
    for lo, hi in zip(np.r_[0, cuts + 1], np.r_[cuts, len(ys)], strict=True):
        if hi > lo:
            out.append("M" + "L".join(map("{:.1f} {:.1f}".format, xs[lo:hi].tolist(),
                                          ys[lo:hi].tolist())))
    return "".join(out)


def _steps(times: Any, values: Any) -> tuple[Any, Any]:
    """A step line (float arrays): each value held until the next sample (the peak
    series); a NaN still breaks it."""
    import numpy as np

    if len(times) < 2:
        return times, values
    t = np.repeat(times, 2)[1:]  # t0 t1 t1 t2 t2 ...
    v = np.repeat(values, 2)[:-1]  # v0 v0 v1 v1 v2 ...
    return t, v


class _Panel:
    """One panel's pixel box and the data ranges it maps (numbers or numpy arrays)."""

    def __init__(self, top: float, span: float, ymax: float) -> None:
        self.top, self.span, self.ymax = top, span, ymax
        self.width = WIDTH - LEFT - RIGHT

    def x(self, t: float) -> float:
        return LEFT + self.width * t / self.span if self.span else LEFT

    def y(self, v: float) -> float:
        return self.top + PANEL * (1 - v / self.ymax) if self.ymax else self.top + PANEL


def _line(panel: _Panel, times: Sequence[float], values: Sequence[float | None], scale: float,
          colour: str, dash: str, steps: bool = False, marked: bool = False) -> str:
    """The envelope of a series per pixel column (every spike stays), broken at gaps (found
    here, or ``marked`` by a row without a value)."""
    t, v = times, [math.nan if x is None else x * scale for x in values]
    if not marked:
        t, v = break_gaps(t, v)
    t, v = envelope(t, v, 0.0, panel.span, int(panel.width))
    if steps:
        t, v = _steps(t, v)
    d = _path(panel.x(t), panel.y(v))
    if not d:
        return ""
    extra = f' stroke-dasharray="{DASH[dash]}"' if DASH[dash] else ""
    return (f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="1.3"{extra} '
            'stroke-linejoin="round"/>')


def _axes(panel: _Panel, label: str, ticks: Iterable[float], fmt: str,
          xticks: Sequence[tuple[float, str]], xlabels: bool) -> list[str]:
    """Frame, grid, tick labels and the y label of one panel."""
    out = [f'<rect x="{LEFT}" y="{panel.top}" width="{panel.width}" height="{PANEL}" '
           'fill="none" stroke="#444" stroke-width="0.8"/>']
    for v in ticks:
        y = panel.y(v)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + panel.width}" y1="{y:.1f}" y2="{y:.1f}" '
                   'stroke="#000" stroke-opacity="0.1"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
                   f"{format(v, fmt)}</text>")
    for t, text in xticks:
        x = panel.x(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{panel.top}" y2="{panel.top + PANEL}" '
                   'stroke="#000" stroke-opacity="0.1"/>')
        if xlabels:
            out.append(f'<text x="{x:.1f}" y="{panel.top + PANEL + 16}" text-anchor="middle">'
                       f"{text}</text>")
    middle = panel.top + PANEL / 2
    out.append(f'<text x="16" y="{middle}" text-anchor="middle" '
               f'transform="rotate(-90 16 {middle})">{html.escape(label)}</text>')
    return out


def _phases(panels: Sequence[_Panel], found: Sequence[Phase], names: JobNames, unit: float,
            colours: dict[str, str]) -> tuple[list[str], int]:
    """Bands in both panels, a line where each phase starts, and every phase named above the
    first panel on the lowest free row (shorter forms for narrow phases, never dropped);
    returns the SVG and the rows used."""
    if not found:
        return [], 0
    first = panels[0]
    per_char = CHAR * first.span / first.width / unit if first.width else 0.0
    ordered = sorted(found, key=lambda p: (p.start + p.end) / 2)
    forms = [label_forms(names, p) for p in ordered]
    centres = [(p.start + p.end) / 2 / unit for p in ordered]
    placed = place_labels([(c, [(len(f) + 1) * per_char for f in texts])
                           for c, texts in zip(centres, forms, strict=True)], LEVELS)
    out = []
    for panel in panels:
        for p in ordered:
            x0, x1 = panel.x(p.start), panel.x(p.end)
            colour = _colour(colours[p.job])
            out.append(f'<rect x="{x0:.1f}" y="{panel.top}" width="{max(x1 - x0, 0.5):.1f}" '
                       f'height="{PANEL}" fill="{colour}" fill-opacity="0.15"/>')
            out.append(f'<line x1="{x0:.1f}" x2="{x0:.1f}" y1="{panel.top}" '
                       f'y2="{panel.top + PANEL}" stroke="{colour}" stroke-opacity="0.6"/>')
    for p, texts, centre, (row, form) in zip(ordered, forms, centres, placed, strict=True):
        y = first.top - 4 - ROW * row
        out.append(f'<text x="{first.x(centre * unit):.1f}" y="{y}" text-anchor="middle" '
                   f'fill="{_colour(colours[p.job])}">{html.escape(texts[form])}</text>')
    return out, 1 + max(row for row, _ in placed)


def _legend(entries: Sequence[tuple[str, str, str]], top: float) -> list[str]:
    """(label, colour, dash or "band") per entry, in the right-hand column; a label longer
    than the column is cut with an ellipsis (the full name is in the tables above)."""
    out, x = [], WIDTH - RIGHT + 14
    for i, (label, colour, dash) in enumerate(entries):
        y = top + 6 + 16 * i
        if dash == "band":
            out.append(f'<rect x="{x}" y="{y - 5}" width="22" height="10" fill="{colour}" '
                       'fill-opacity="0.3"/>')
        else:
            extra = f' stroke-dasharray="{DASH[dash]}"' if DASH[dash] else ""
            out.append(f'<line x1="{x}" x2="{x + 22}" y1="{y}" y2="{y}" stroke="{colour}" '
                       f'stroke-width="1.5"{extra}/>')
        text = label if len(label) <= LEGEND_CHARS else label[:LEGEND_CHARS - 1] + "…"
        out.append(f'<text x="{x + 28}" y="{y + 4}">{html.escape(text)}</text>')
    return out


def worker_chart(trace: WorkerTrace, names: JobNames, simulated: bool = False) -> str:
    """The worker's chart: an ``<svg>`` element with a title and a text alternative."""
    span = max((g.times[-1] for g in trace.gpus if g.times), default=0.0)
    unit, unit_name = time_unit(span)
    colours = job_colours(trace.phases)
    capacities = [g.capacity() for g in trace.gpus]
    top_mem = max([*(c or 0 for c in capacities),
                   *(v or 0 for g in trace.gpus for m in ("total-mem", "peak-mem")
                     for v in g.values.get(m, ()))], default=0) / GIB
    mem_ticks = nice_ticks(0, top_mem * 1.05 or 1, cover=True)
    probe = _Panel(0, span, 1)
    _, rows = _phases([probe], trace.phases, names, unit, colours)
    util = _Panel(TITLE + ROW * rows + 8, span, 105)
    mem = _Panel(util.top + PANEL + GAP, span, mem_ticks[-1] if mem_ticks[-1] > 0 else 1)
    xticks = [(t * unit, _number(t)) for t in nice_ticks(0, span / unit, 10)] if span else []
    body: list[str] = []
    shaded, _ = _phases([util, mem], trace.phases, names, unit, colours)
    body += shaded
    body += _axes(util, "GPU utilisation (%)", range(0, 101, 20), "g", xticks, False)
    body += _axes(mem, "GPU memory (GiB)", mem_ticks, ".3g", xticks, True)
    legend: list[tuple[str, str, str]] = []
    _gpu_lines(trace, util, mem, body, legend)
    _capacity_lines(capacities, mem, body, legend)
    legend += [(names.job(job), _colour(colour), "band") for job, colour in colours.items()]
    body += _legend(legend, util.top)
    # as tall as the panels or the legend, whichever is longer (8 GPUs: 32 lines and jobs)
    height = max(mem.top + PANEL + BOTTOM, util.top + 16 * len(legend) + 12)
    body.append(f'<text x="{LEFT + mem.width / 2}" y="{mem.top + PANEL + 36}" '
                'text-anchor="middle">'
                f"{unit_name} since the start{f' ({trace.start})' if trace.start else ''}"
                "</text>")
    title = f"{trace.worker}: {len(trace.gpus)} GPU(s); shaded: the job/DAG running on it"
    if simulated:
        title = f"SIMULATED GPUs: {title}"
        body.append(f'<text x="{WIDTH / 2}" y="{height / 2}" font-size="64" fill="red" '
                    f'fill-opacity="0.12" text-anchor="middle" '
                    f'transform="rotate(-20 {WIDTH / 2} {height / 2})">SIMULATED GPUs</text>')
    return _svg(title, height, simulated) + "".join(body) + "</svg>"


def _gpu_lines(trace: WorkerTrace, util: _Panel, mem: _Panel, body: list[str],
               legend: list[tuple[str, str, str]]) -> None:
    """Each GPU's utilisation and memory lines, and their legend entries."""
    for i, g in enumerate(trace.gpus):
        colour = PALETTE[i % len(PALETTE)]
        for panel, metric, scale, dash, what in (
                (util, "compute-util", 1.0, "solid", "compute"),
                (util, "mem-bw-util", 1.0, "dashed", "memory bandwidth"),
                (mem, "total-mem", 1 / GIB, "solid", "used"),
                (mem, "peak-mem", 1 / GIB, "dotted", "peak (between scrapes too)")):
            if metric in g.values:
                body.append(_line(panel, g.times, g.values[metric], scale, colour, dash,
                                  steps=metric == "peak-mem", marked=trace.gaps_marked))
                legend.append((f"GPU {g.gpu} {what}", colour, dash))


def _capacity_lines(capacities: list[float | None], mem: _Panel, body: list[str],
                    legend: list[tuple[str, str, str]]) -> None:
    """The GPUs' memory capacity: one line where they are alike, else one per GPU."""
    known = {round(c / 2**20) for c in capacities if c}
    if len(known) == 1:
        y = mem.y(next(c for c in capacities if c) / GIB)
        body.append(f'<line x1="{LEFT}" x2="{LEFT + mem.width}" y1="{y:.1f}" y2="{y:.1f}" '
                    'stroke="#666" stroke-dasharray="6 3"/>')
        legend.append((f"capacity ({next(c for c in capacities if c) / GIB:.4g} GiB)", "#666",
                       "dashed"))
        return
    for i, c in enumerate(capacities):
        if c:
            y = mem.y(c / GIB)
            body.append(f'<line x1="{LEFT}" x2="{LEFT + mem.width}" y1="{y:.1f}" '
                        f'y2="{y:.1f}" stroke="{PALETTE[i % len(PALETTE)]}" '
                        'stroke-dasharray="4 2"/>')
    if known:
        legend.append(("capacity (dashed, per GPU)", "#666", "dashed"))


def _svg(title: str, height: float, simulated: bool) -> str:
    """The chart's opening tag, its title and white background."""
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
            f'width="{WIDTH}" height="{height}" role="img" font-family="sans-serif" '
            f'font-size="11" fill="#1b1f24"><title>{html.escape(title)}</title>'
            f'<rect width="{WIDTH}" height="{height}" fill="#fff"/>'
            f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="14" '
            f'fill="{"red" if simulated else "#1b1f24"}">{html.escape(title)}</text>')
