"""The report's SVG charts (pure): well-formed, labelled, broken at gaps, marked simulated."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from dask_metrics.collector.model.jobs import JobNames
from dask_metrics.collector.output.traces import GpuTrace, Phase, WorkerTrace
from dask_metrics.collector.report.chart import RIGHT, WIDTH, nice_ticks, worker_chart

GIB = 2**30
SVG = "{http://www.w3.org/2000/svg}"


def trace(times: list[float], used: list[float | None]) -> WorkerTrace:
    gpu = GpuTrace("0", "GPU-0", times, {
        "total-mem": [None if u is None else u * GIB for u in used],
        "mem-util": [None if u is None else u / 16 * 100 for u in used],
        "compute-util": [50.0] * len(times),
        "peak-mem": [None if u is None else u * GIB for u in used]})
    return WorkerTrace("w-<0>", "w-_0_", "2026-11-24T00:00:00.000Z", list(gpu.values), [gpu],
                       [Phase(10, 40, "1", "0"), Phase(40, 60, "1", "1")], [])


NAMES = JobNames.of([("1", "train & test", "0"), ("1", "train & test", "1")])


@pytest.mark.parametrize(("lo", "hi", "expected"), [
    (0, 1, [0, 0.2, 0.4, 0.6, 0.8, 1.0]), (0, 105, [0, 20, 40, 60, 80, 100]),
    (0, 60, [0, 10, 20, 30, 40, 50, 60]), (0, 0, [0])])
def test_nice_ticks(lo, hi, expected):
    assert nice_ticks(lo, hi) == pytest.approx(expected)


@pytest.mark.parametrize("top", [1.9, 4.0, 79.65, 0.3])
def test_the_memory_axis_holds_the_highest_line(top):
    """The memory panel's top tick is at or above the highest memory drawn."""
    lines = trace([0.0, 1.0, 2.0], [top / 2, top, top / 3])
    lines.gpus[0].values["mem-util"] = [None] * 3  # no capacity line: the data decides
    root = ET.fromstring(worker_chart(lines, NAMES))
    mem = max((r for r in root.iter(f"{SVG}rect") if r.get("stroke") == "#444"),
              key=lambda r: float(r.get("y")))
    y0, y1 = float(mem.get("y")), float(mem.get("y")) + float(mem.get("height"))
    labels = [float(t.text) for t in root.iter(f"{SVG}text")
              if t.get("text-anchor") == "end" and y0 - 1 <= float(t.get("y")) - 4 <= y1 + 1]
    assert max(labels) >= top


def test_a_chart_is_well_formed_svg_with_its_labels():
    svg = worker_chart(trace([float(t) for t in range(61)], [2.0] * 61), NAMES)
    root = ET.fromstring(svg)  # also proves every name is escaped
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert root.findtext(f"{SVG}title").startswith("w-<0>: 1 GPU(s)")
    for label in ("train & test · DAG 0", "train & test · DAG 1", "GPU 0 used",
                  "GPU 0 compute", "capacity (16 GiB)", "train & test",
                  "seconds since the start (2026-11-24T00:00:00.000Z)"):
        assert label in texts, label
    assert "SIMULATED GPUs" not in svg


def test_a_gap_in_the_samples_breaks_the_lines():
    times = [float(t) for t in range(10)] + [float(t) for t in range(100, 110)]
    svg = worker_chart(trace(times, [1.0] * 20), NAMES)
    used = [p for p in ET.fromstring(svg).iter(f"{SVG}path")]
    assert used and all(p.get("d").count("M") == 2 for p in used)
    missing = worker_chart(trace([float(t) for t in range(20)], [1.0] * 9 + [None] + [1.0] * 10),
                           NAMES)
    assert any(p.get("d").count("M") == 2 for p in ET.fromstring(missing).iter(f"{SVG}path"))


def test_a_long_legend_fits_the_chart_and_long_names_are_cut():
    eight = trace([0.0, 1.0], [1.0, 2.0])
    eight.gpus = [GpuTrace(str(i), f"GPU-{i}", [0.0, 1.0], dict(eight.gpus[0].values))
                  for i in range(8)]
    eight.phases = [Phase(0.1 * j, 0.1 * j + 0.05, str(j), "0") for j in range(1, 11)]
    names = JobNames.of([(str(j), "x" * 80, "0") for j in range(1, 11)])
    root = ET.fromstring(worker_chart(eight, names))
    column = str(WIDTH - RIGHT + 14 + 28)  # the legend's labels
    legend = [t for t in root.iter(f"{SVG}text") if t.get("x") == column]
    assert len(legend) == 8 * 3 + 1 + 10  # compute, used, peak per GPU; capacity; 10 jobs
    assert max(float(t.get("y")) for t in legend) < float(root.get("height"))
    assert any(t.text.endswith("…") and len(t.text) < 40 for t in legend)


def test_simulated_gpus_are_marked_and_empty_traces_draw():
    svg = worker_chart(trace([], []), NAMES, simulated=True)
    root = ET.fromstring(svg)
    assert root.findtext(f"{SVG}title").startswith("SIMULATED GPUs: ")
    assert [t.text for t in root.iter(f"{SVG}text")].count("SIMULATED GPUs") == 1
    assert not math.isnan(float(root.get("height")))
