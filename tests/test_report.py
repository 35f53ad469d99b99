"""The session report: pure accounting, advice and rendering; then the report of a
scripted session (tests/report_dataset.py) in a real Prometheus, its numbers in report.json
and on the page, and the page rendered in headless Chromium."""

from __future__ import annotations

import csv
import html
import itertools
import json
import random
import re
from collections.abc import Iterator
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from dask_metrics.collector.attribution.edges import edge_usage
from dask_metrics.collector.attribution.usage import Usage, gpu_usage
from dask_metrics.collector.model.columns import select
from dask_metrics.collector.model.series import Series, WorkerInfo
from dask_metrics.collector.model.tables import GpuTable, WorkerTable
from dask_metrics.collector.model.timeline import span_timeline, worker_spans, worker_timeline
from dask_metrics.collector.model.timespec import format_rfc3339, to_ms
from dask_metrics.collector.output.export import export
from dask_metrics.collector.output.export_reads import Visiting
from dask_metrics.collector.output.traces import read_worker_file, trace_of_table
from dask_metrics.collector.peaks.peak import Peak
from dask_metrics.collector.report.advice import (
    GIB,
    GpuModel,
    GpuSummary,
    load_models,
    recommendations,
    smallest_fitting,
)
from dask_metrics.collector.report.build import REPORT_METRICS, _Kept
from dask_metrics.collector.report.figures import energy_entry
from dask_metrics.collector.report.gatherer import Gatherer
from dask_metrics.collector.report.layout import sections
from dask_metrics.collector.report.mig import mig_gpu, shipped_mig, slice_bytes, smallest_slices
from dask_metrics.collector.report.model import WorkerFacts, build
from dask_metrics.collector.report.render import CSP, render_html, render_text
from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient
from dask_metrics.contract import ACTIVITIES_CSV, GPU_BY_PREFIX_CSV
from tests.browser import Page, png_size, render, requires_chromium
from tests.helpers import collector, csv_numbers
from tests.prometheus_helpers import (
    PrometheusServer,
    backfilled_prometheus,
    requires_prometheus,
)
from tests.report_dataset import (
    AGAIN_OFFSET,
    EMPTY_OFFSET,
    EXPECTED_DAGS,
    EXPECTED_JOBS,
    SIM_OFFSET,
    ReportDataset,
    make_report_dataset,
)

COLUMNS = ["total-mem", "mem-util", "compute-util", "peak-mem", "energy"]
FIRST_SCREEN = ["At a glance", "Jobs", "What to ask for next time"]
SECTION_TITLES = [*FIRST_SCREEN, "Jobs in detail", "Per DAG", "Peak memory per GPU and job",
                  "Charts per worker", "Where the time went: activities per job and task prefix",
                  "GPU time per task prefix", "Workers and GPUs", "Warnings",
                  "How the advice is made"]


# ---- pure ------------------------------------------------------------------------------------


def session_of(seconds: float, **more: Any) -> dict[str, Any]:
    """What make_report tells build of a range of ``seconds`` (at 2026-11-26T05:00:00Z)."""
    start = 1795669200.0
    return {"cluster": "c", "since": format_rfc3339(to_ms(start)),
            "until": format_rfc3339(to_ms(start + seconds)), "since_unix": start,
            "until_unix": start + seconds, "duration_seconds": seconds, "prometheus": "p",
            "asked": {}, **more}


def table(times: list[int], util: list[float | None], energy: list[float | None],
          states: list[tuple[str, str]]) -> WorkerTable:
    n = len(times)
    columns = [[1.0] * n, [1.0] * n, util, [1.0] * n, energy]
    return WorkerTable([GpuTable("0", "GPU-x", times, columns)], times, states, states)


def test_an_interval_belongs_to_the_dag_at_its_end_and_gaps_count_nothing() -> None:
    times = [0, 5000, 10000, 15000, 200000, 205000]
    util = [50.0, 50.0, 2.0, 100.0, 100.0, 40.0]
    energy = [0.0, 500.0, 1000.0, 10.0, 20.0, 520.0]  # a counter reset at 15 s
    states = [("", ""), ("1", "0"), ("1", "0"), ("1", "1"), ("1", "1"), ("", "")]
    found = gpu_usage(table(times, util, energy, states), COLUMNS, max_age=120_000)
    dag0, dag1 = found[("1", "0", "0", "GPU-x")], found[("1", "1", "0", "GPU-x")]
    assert (dag0.seconds, dag0.busy, dag0.idle, dag0.energy) == (10, 2.5 + 0.1, 5, 1000)
    assert (dag0.first, dag0.last) == (0, 10000)
    # 10 -> 15 s: the counter went back (its exporter restarted): it counts from 0 there,
    # and the interval is said to be one (a lower bound); 15 s -> 200 s: a gap
    assert (dag1.seconds, dag1.busy, dag1.energy, dag1.energy_intervals, dag1.resets) == (
        5, 5, 10, 1, 1)
    idle = found[("", "", "0", "GPU-x")]
    assert (idle.seconds, idle.busy, idle.idle, idle.energy) == (5, 2, 0, 500)


def test_with_the_schedulers_own_times_an_interval_is_split_where_the_dag_changed() -> None:
    """Scrapes every 15 s; DAG 1/0 runs 2-7 s at 100 %, 1/1 runs 7-31 s at 50 %, then
    nothing: every part of an interval takes its share of the busy and energy counters'
    increase (even use within the interval: exact here by construction)."""
    spans = [(2000, 7000, ("1", "0")), (7000, 31000, ("1", "1"))]
    activity = span_timeline(spans, 120_000)
    times = [0, 15000, 30000, 45000]
    busy = [0.0, 5 + 4.0, 9 + 7.5, 16.5 + 0.5]
    energy = [0.0, 1300.0, 2500.0, 2700.0]
    states = activity.at_each(times, 120_000)
    n = len(times)
    gpu = GpuTable("0", "GPU-x", times, [[1.0] * n, [1.0] * n, [0.0] * n, [1.0] * n, energy,
                                         busy])
    found = gpu_usage(WorkerTable([gpu], times, states, states), [*COLUMNS, "busy-seconds"],
                      120_000, activity)
    first, second = found[("1", "0", "0", "GPU-x")], found[("1", "1", "0", "GPU-x")]
    assert first.seconds == 5 and second.seconds == 24
    assert first.busy == pytest.approx(9 * 5 / 15) and (first.first, first.last) == (2000, 7000)
    assert second.busy == pytest.approx(9 * 8 / 15 + 7.5 + 0.5 / 15)
    assert first.energy == pytest.approx(1300 * 5 / 15)
    assert second.energy == pytest.approx(1300 * 8 / 15 + 1200 + 200 / 15)
    nothing = found[("", "", "0", "GPU-x")]
    assert nothing.seconds == 2 + 14 and nothing.idle == 0
    # without the scheduler's times (an older preload), the state at each interval's end
    late = gpu_usage(WorkerTable([gpu], times, states, states), [*COLUMNS, "busy-seconds"],
                     120_000)
    assert ("1", "0", "0", "GPU-x") not in late


def test_splitting_at_the_schedulers_times_loses_and_adds_nothing() -> None:
    """Random samples and DAG spans: the parts add up to the GPU's whole time, busy
    seconds and energy, whatever the cuts."""
    rng = random.Random(5)
    for _ in range(100):
        times = sorted(rng.sample(range(0, 60_000), rng.randint(2, 12)))
        busy = list(itertools.accumulate(rng.uniform(0, 2) for _ in times))
        energy = list(itertools.accumulate(rng.uniform(0, 300) for _ in times))
        spans = []
        for job in range(rng.randint(0, 5)):
            begin = rng.randint(-5_000, 60_000)
            spans.append((begin, begin + rng.randint(1, 20_000), (str(job), "0")))
        activity = span_timeline(spans, 120_000)
        states = activity.at_each(times, 120_000)
        n = len(times)
        gpu = GpuTable("0", "GPU-x", times, [[1.0] * n, [1.0] * n, [50.0] * n, [1.0] * n,
                                             energy, busy])
        found = gpu_usage(WorkerTable([gpu], times, states, states),
                          [*COLUMNS, "busy-seconds"], 120_000, activity)
        whole = Usage()
        for u in found.values():
            whole.add(u)
        assert whole.seconds == pytest.approx((times[-1] - times[0]) / 1000)
        assert whole.busy == pytest.approx(busy[-1] - busy[0])
        assert whole.energy == pytest.approx(energy[-1] - energy[0])
        for (job, _, _, _), u in found.items():  # each part inside what ran then
            assert all(activity.at(t, 120_000)[0] == job for t in (u.first, u.last - 1))


def test_a_workers_timeline_follows_the_schedulers_times_oldest_dag_first() -> None:
    def series(metric_value: float, times: list[int], **labels: str) -> Series:
        return Series({"job_id": "1", **labels}, times, [metric_value] * len(times))

    starts = [series(10.0, [15000, 30000, 45000], dag_id="0"),
              series(12.5, [15000], dag_id="1"),  # began and ended between two scrapes
              series(40.0, [45000, 60000], dag_id="2")]  # still running at the last scrape
    ends = [series(20.0, [30000, 45000], dag_id="0"), series(13.0, [15000], dag_id="1")]
    spans = worker_spans(starts, ends, until=61000, max_age=20000)
    assert sorted(spans) == [(10000, 20000, ("1", "0")), (12500, 13000, ("1", "1")),
                             (40000, 61000, ("1", "2"))]
    timeline = worker_timeline([15000, 30000], [], starts, ends, 61000, 20000)
    assert timeline.exact
    at = dict(zip(timeline.times, timeline.states, strict=True))
    assert at[10000] == ("1", "0") and 12500 not in at  # the older DAG holds the worker
    assert at[20000] == ("", "") and at[40000] == ("1", "2") and at[61000] == ("", "")
    held = [b - a for a, b, state in zip(timeline.times, timeline.times[1:], timeline.states,
                                         strict=False) if state[0]]
    assert max(held) <= 10000  # a point every max_age / 2 while a DAG holds the worker
    assert timeline.at(19999, 20000) == ("1", "0") and timeline.at(20000, 20000) == ("", "")
    # the scheduler went away with DAG 2 running: it ends at its last scrape, whether that
    # was long before the end or a later scrape (a restarted scheduler's) no longer showed it
    assert worker_spans(starts[2:], [], until=200000, max_age=20000) == [
        (40000, 60000, ("1", "2"))]
    assert worker_spans(starts[2:], [], until=70000, max_age=20000, scrapes=[60000, 65000]
                        ) == [(40000, 60000, ("1", "2"))]
    assert worker_spans(starts[2:], [], until=70000, max_age=20000, scrapes=[60000]) == [
        (40000, 70000, ("1", "2"))]  # no scrape after it: running at the end
    # no span series: the tasks at each scrape
    tasks = [Series({"job_id": "1", "dag_id": "0"}, [15000], [2.0])]
    assert not worker_timeline([15000, 30000], tasks).exact


def test_busy_seconds_come_from_the_counter_where_it_is() -> None:
    """A 5 s interval whose utilisation was sampled at 0 % at its end but whose busy
    counter rose 4 s: the counter's 4 s (80 %, not idle); after a counter reset, the new
    value (the counter counts from 0 at its exporter's restart), not utilisation x length."""
    times = [0, 5000, 10000, 15000]
    columns = [*COLUMNS, "busy-seconds"]
    busy = [100.0, 104.0, 104.5, 1.0]  # reset between 10 and 15 s
    util = [0.0, 0.0, 10.0, 60.0]
    n = len(times)
    gpu = GpuTable("0", "GPU-x", times, [[1.0] * n, [1.0] * n, util, [1.0] * n, [None] * n,
                                         busy])
    states = [("1", "0")] * n
    found = gpu_usage(WorkerTable([gpu], times, states, states), columns, 120_000)
    u = found[("1", "0", "0", "GPU-x")]
    assert u.busy == 4.0 + 0.5 + 1.0 and u.seconds == 15 and u.resets == 1
    assert u.idle == 0  # 80 %, 10 % and 60 % in the three intervals


def test_the_intervals_across_the_edges_count_with_their_share_inside() -> None:
    """60 s scrapes of a GPU at 50 % and 100 W (busy +30 s, +6,000 J per interval), the
    range [30 s, 150 s]: the intervals (0, 60] and (120, 180] count half each, so the range
    holds 120 s, 60 busy seconds and 12,000 J as scripted; a range inside one interval gets
    its share of it; an interval longer than max_age is a gap either way."""
    times = [t * 1000 for t in (0, 60, 120, 180)]
    counters = {"busy-seconds": (times, [0.0, 30.0, 60.0, 90.0]),
                "energy": (times, [0.0, 6000.0, 12000.0, 18000.0]),
                "sm-active-seconds": (times, [0.0, 6.0, 12.0, 18.0])}
    parts = edge_usage(counters, 30_000, 150_000, 120_000)
    assert [(t, u.seconds, u.busy, u.energy, u.energy_intervals, u.sm_active, u.sm_measured)
            for t, u in parts] == [(60_000, 30.0, 15.0, 3000.0, 1, 3.0, 30.0),
                                   (150_000, 30.0, 15.0, 3000.0, 1, 3.0, 30.0)]
    (inside,) = edge_usage(counters, 70_000, 100_000, 120_000)
    assert (inside[0], inside[1].seconds, inside[1].busy, inside[1].energy) == (
        100_000, 30.0, 15.0, 3000.0)
    assert edge_usage(counters, 30_000, 150_000, 59_000) == []  # gaps
    assert edge_usage(counters, 0, 180_000, 120_000) == []  # on samples: nothing across
    idle = {"busy-seconds": (times, [0.0, 0.5, 1.0, 1.5])}  # ~1 %: idle time of a job
    assert [u.idle for _, u in edge_usage(idle, 30_000, 150_000, 120_000)] == [30.0, 30.0]


def test_no_utilisation_or_energy_column_counts_time_only() -> None:
    times = [0, 5000]
    found = gpu_usage(table(times, [None, None], [None, None], [("2", "0")] * 2), COLUMNS,
                      120_000)
    assert found[("2", "0", "0", "GPU-x")] == Usage(5.0, 0.0, 0.0, 0.0, 0, 0, 5000)


def test_one_gpu_seen_by_two_workers_is_counted_once() -> None:
    """Two sidecars see the same device (same UUID): each reports the whole device's busy
    time and energy, so the report counts it once, and says so."""
    session = session_of(8.0)
    view = Usage(seconds=8.0, busy=8.0, idle=0.0, energy=2400.0, energy_intervals=4,
                 first=0, last=8000)
    facts = [WorkerFacts(WorkerInfo(w, gpus=[("0", "GPU-shared")]),
                         {("1", "0", "0", "GPU-shared"): view}, [], [], [])
             for w in ("w-a", "w-b")]
    report = build(session, facts, {}, None, load_models(), 1.2)
    (job,) = report["jobs"]
    assert (job["gpus_used"], job["busy_seconds"], job["gpu_seconds"]) == (1, 8, 8)
    assert job["energy_joules"] == 2400 and job["energy_note"] is None
    assert job["shared_gpus"] == [{"uuid": "GPU-shared", "workers": ["w-a", "w-b"]}]
    assert report["session"]["gpu_count"] == 1
    assert "seen by 2 workers (w-a, w-b): counted once" in render_text(report)


def test_a_job_without_energy_on_metered_gpus_says_it_was_too_short() -> None:
    """Job 1 had no interval with two energy readings, on a GPU whose counter job 0 read:
    not 'these GPUs report no energy counter', which job 0's figure beside it contradicts."""
    session = session_of(30.0)
    metered = Usage(seconds=20.0, busy=10.0, idle=0.0, energy=900.0, energy_intervals=4)
    short = Usage(seconds=4.0, busy=4.0, idle=0.0)
    info = WorkerInfo("w-a", gpus=[("0", "GPU-a")])
    usage = {("0", "0", "0", "GPU-a"): metered, ("1", "0", "0", "GPU-a"): short}
    jobs = build(session, [WorkerFacts(info, usage, [], [], [], frozenset({("0", "GPU-a")}))],
                 {}, None, load_models(), 1.2)["jobs"]
    assert jobs[0]["energy_joules"] == 900
    assert jobs[1]["energy_joules"] is None and "shorter than a scrape" in jobs[1]["energy_note"]
    unmetered = build(session, [WorkerFacts(info, usage, [], [], [])], {}, None,
                      load_models(), 1.2)["jobs"]
    assert "report no energy counter" in unmetered[1]["energy_note"]


def test_a_job_no_gpu_interval_counts_for_says_why_not_that_gpus_lack_a_counter() -> None:
    """A job that lies in a gap between two GPU samples (a restarted Prometheus missed a
    scrape) has no interval at all: its energy says so, not 'no energy counter'."""
    entry = energy_entry(0.0, 0, 0, False, False)
    assert entry["energy_joules"] is None
    assert entry["energy_note"].startswith("not measured: no interval between two GPU samples")
    assert "gap longer than --max-age" in entry["energy_note"]


def test_the_shipped_gpu_table_and_the_smallest_fitting_model() -> None:
    models = {m.name: m.memory_bytes / GIB for m in load_models()}
    assert {"NVIDIA T4": 16, "NVIDIA L4": 24, "NVIDIA A10": 24, "NVIDIA A100 40GB": 40,
            "NVIDIA A100 80GB": 80, "NVIDIA L40S": 48, "NVIDIA H100 80GB": 80,
            "NVIDIA H200": 141}.items() <= models.items()
    table_ = [GpuModel("a", 16 * GIB), GpuModel("b", 24 * GIB), GpuModel("c", 24 * GIB)]
    assert [m.name for m in smallest_fitting(table_, 17 * GIB)] == ["b", "c"]
    assert smallest_fitting(table_, 25 * GIB) == []


MIB = 2**20


@pytest.mark.parametrize(("name", "total_mib", "need_gib", "slices"), [
    ("NVIDIA H200", 143_771, 9, ["1g.18gb"]),  # nvidia-smi's total on an H200
    ("NVIDIA H200", 143_771, 33, ["3g.71gb", "4g.71gb"]),  # 1g.35gb: 35 GB, 32.6 GiB
    ("NVIDIA H200", 143_771, 70, []),  # only the whole GPU holds it
    ("NVIDIA H100 80GB HBM3", 81_559, 15, ["1g.20gb", "2g.20gb"]),
    ("NVIDIA H100 NVL", 95_830, 15, ["1g.24gb", "2g.24gb"]),  # told from 80 and 96 GB
    ("NVIDIA A100-SXM4-40GB", 40_960, 4, ["1g.5gb"]),
    ("NVIDIA A100 80GB PCIe", 81_920, 9.3, ["1g.10gb"]),  # 10 GB: 9.31 GiB
    ("NVIDIA A100 80GB PCIe", 81_920, 9.4, ["1g.20gb", "2g.20gb"]),
    ("NVIDIA GH200 480GB", 97_871, 30, ["3g.48gb", "4g.48gb"]),  # not an H200
    ("NVIDIA A30", 24_576, 5, ["1g.6gb"]),
])
def test_the_smallest_mig_slice_of_the_gpu_that_holds_a_need(
        name: str, total_mib: int, need_gib: float, slices: list[str]) -> None:
    gpu_ = mig_gpu(shipped_mig(), name, total_mib * MIB)
    assert gpu_ is not None
    assert smallest_slices(gpu_, need_gib * GIB) == slices
    assert all(slice_bytes(s) >= need_gib * GIB for s in slices)


def test_gpus_without_mig_or_already_a_slice_have_no_mig_advice() -> None:
    table_ = shipped_mig()
    assert mig_gpu(table_, "NVIDIA T4", 15_360 * MIB) is None
    assert mig_gpu(table_, "NVIDIA L40S", 46_068 * MIB) is None
    assert mig_gpu(table_, "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 4_864 * MIB) is None
    assert mig_gpu(table_, "NVIDIA H200", 17_000 * MIB, "MIG-4f1e") is None  # a slice
    assert mig_gpu(table_, "NVIDIA H200", 80 * GIB) is None  # no H200 of that size
    assert mig_gpu(table_, None, 80 * GIB) is None and mig_gpu(table_, "NVIDIA H200", None) is None
    assert slice_bytes("1g.18gb") == 18 * 10**9
    for row in table_:  # the whole GPU is never a slice; sizes grow along the row
        assert all(slice_bytes(p) < row.memory_gib * GIB for p in row.profiles)
        sizes = [slice_bytes(p) for p in row.profiles]
        assert sizes == sorted(sizes)


def test_a_job_that_fits_a_mig_slice_of_its_gpu_is_told_which() -> None:
    peak = {"worker": "w-0", "gpu": "0", "uuid": "GPU-1", "peak_bytes": 7.5 * GIB,
            "capacity_bytes": 143_771 * MIB, "peak_percent": 5.3, "time": "t"}
    job = {"job": "0", "job_name": "etl", "peak": peak, "per_gpu": []}
    report = {**report_of([job], []), "session": {"workers": [
        {"worker": "w-0", "gpus": [{"gpu": "0", "uuid": "GPU-1", "model": "NVIDIA H200"}]}]}}
    found = recommendations(report, GpuSummary.of([]), load_models(), 1.2)
    memory = next(r for r in found if r["kind"] == "gpu-memory")
    assert "NVIDIA T4" in memory["text"]
    assert memory["text"].endswith("Or a MIG slice of its NVIDIA H200: 1g.18gb (about "
                                   "16.76 GiB).")
    assert memory["based_on"]["mig_fits"] == ["1g.18gb"]
    assert memory["based_on"]["gpu_model"] == "NVIDIA H200"
    # unknown model (an older exporter, no name): the whole-GPU advice alone
    bare = recommendations(report_of([job], []), GpuSummary.of([]), load_models(), 1.2)
    assert "MIG" not in next(r for r in bare if r["kind"] == "gpu-memory")["text"]


def report_of(jobs: list[dict[str, Any]], gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {"rules": {"idle_below_percent": 5.0, "headroom": 1.2}, "jobs": jobs}


def gpu(worker: str, peak: float, capacity: float, util: float, job: str | None = "0"
        ) -> dict[str, Any]:
    return {"worker": worker, "gpu": "0", "uuid": "GPU-0", "peak_bytes": peak,
            "capacity_bytes": capacity, "peak_percent": round(peak / capacity * 100, 2),
            "time": "t", "gpu_seconds": 100, "mean_utilization_percent": util, "job": job}


def advise(jobs: list[dict[str, Any]], gpus: list[dict[str, Any]],
           models: list[GpuModel] | None = None) -> list[dict[str, Any]]:
    """The recommendations for ``jobs`` on ``gpus`` (each GPU's session figures)."""
    return recommendations(report_of(jobs, gpus), GpuSummary.of(gpus), models or [], 1.2)


def test_recommendations_say_the_numbers_they_are_based_on() -> None:
    peak = {"worker": "w-0", "gpu": "0", "peak_bytes": 10 * GIB, "capacity_bytes": 80 * GIB,
            "peak_percent": 12.5, "time": "t"}
    job = {"job": "0", "job_name": "etl", "peak": peak,
           "per_gpu": [{"worker": "w-0", "gpu": "1", "gpu_seconds": 50,
                        "mean_utilization_percent": 0.4}]}
    gpus = [gpu("w-0", 10 * GIB, 80 * GIB, 30.0), gpu("w-1", 15 * GIB, 16 * GIB, 30.0)]
    found = advise([job], gpus, load_models())
    texts = "\n".join(r["text"] for r in found)
    assert "job 0 (etl) needs 12.00 GiB" in texts and "NVIDIA T4" in texts
    assert "GPU 1 of w-0 sat idle through job 0 (etl): 0.4 %" in texts
    assert "w-1 GPU 0 came close to its capacity: 93.8 %" in texts
    assert "device_memory_limit to about 12.80 GiB" in texts
    assert all(r["based_on"] for r in found)
    memory = next(r for r in found if r["kind"] == "gpu-memory")
    assert memory["based_on"]["need_bytes"] == round(12 * GIB)
    # one pool for all: 15 GiB x 1.2 = 18 GiB does not fit the 16 GiB GPU: no pool advice
    assert "rmm_pool_size" not in texts


def test_pool_and_workers_per_gpu_where_the_numbers_say_so() -> None:
    gpus = [gpu("w-0", 3 * GIB, 80 * GIB, 10.0), gpu("w-1", 2 * GIB, 80 * GIB, 20.0)]
    job = {"job": "0", "job_name": None, "peak": None, "per_gpu": []}
    texts = [r["text"] for r in advise([job], gpus)]
    assert any("RMM pool of 3.75 GiB" in t for t in texts)  # 3 GiB x 1.2, 256 MiB steps
    assert any("busy 20.0 % of its sampled time" in t and "4 workers per GPU" in t
               for t in texts)
    busy = [gpu("w-0", 3 * GIB, 80 * GIB, 60.0)]
    assert not any("workers per GPU" in r["text"]
                   for r in advise([job], busy))


def test_sm_and_tensor_means_come_from_their_counters_and_rmm_peaks_from_heartbeats() -> None:
    """SM/tensor activity: the counters' increase over the seconds they were measured (an
    interval without both samples or with a reset is left out of both); RMM: the largest
    use and pool sampled in the DAG's intervals."""
    times = [0, 5000, 10000, 15000, 20000]
    columns = [*COLUMNS, "sm-active-seconds", "tensor-active-seconds", "rmm-used", "rmm-pool"]
    sm = [10.0, 11.25, 12.5, None, 1.0]  # 25 %, 25 %, then no sample, then a restart
    tensor = [0.0, 0.0, 0.0, None, 0.0]
    used = [1.0 * GIB, 3.0 * GIB, 2.0 * GIB, None, 2.5 * GIB]
    pool = [16.0 * GIB] * 5
    n = len(times)
    gpu = GpuTable("0", "GPU-h", times, [[1.0] * n, [1.0] * n, [99.0] * n, [1.0] * n,
                                         [None] * n, sm, tensor, used, pool])
    states = [("1", "0")] * 3 + [("1", "1")] * 2
    found = gpu_usage(WorkerTable([gpu], times, states, states), columns, 120_000)
    dag0, dag1 = found[("1", "0", "0", "GPU-h")], found[("1", "1", "0", "GPU-h")]
    assert (dag0.sm_active, dag0.sm_measured, dag0.tensor_active) == (2.5, 10.0, 0.0)
    assert (dag0.rmm_used, dag0.rmm_pool) == (3 * GIB, 16 * GIB)
    assert (dag1.sm_active, dag1.sm_measured) == (0.0, 0.0)  # no two samples in a row
    assert dag1.rmm_used == 2.5 * GIB


def hopper_job(**extra: Any) -> dict[str, Any]:
    peak = {"worker": "w-0", "gpu": "0", "peak_bytes": 16.5 * GIB, "capacity_bytes": 80 * GIB,
            "peak_percent": 20.6, "time": "t"}
    return {"job": "0", "job_name": "train", "peak": peak, "per_gpu": [],
            "mean_utilization_percent": 99.0, "mean_sm_active_percent": 25.0,
            "mean_tensor_active_percent": 0.0, **extra}


def test_a_busy_gpu_with_few_sms_at_work_is_said_in_one_sentence_with_its_numbers() -> None:
    found = advise([hopper_job()], [], load_models())
    (waiting,) = [r for r in found if r["kind"] == "gpu-waiting"]
    assert waiting["text"].startswith(
        "job 0 (train) kept its GPUs 99 % busy by NVML's utilisation, but only 25.0 % of "
        "their SMs were active on average and its tensor cores 0.0 %: the GPUs mostly "
        "waited between small kernels.")
    assert waiting["based_on"] == {"mean_utilization_percent": 99.0,
                                   "mean_sm_active_percent": 25.0,
                                   "mean_tensor_active_percent": 0.0}
    assert any(r["kind"] == "tensor-idle" and "0.0 % active" in r["text"] for r in found)
    # SMs as busy as NVML says, tensor cores at work: nothing about activity
    fine = hopper_job(mean_sm_active_percent=93.0, mean_tensor_active_percent=91.0)
    kinds = {r["kind"] for r in advise([fine], [])}
    assert not kinds & {"gpu-waiting", "tensor-idle"}
    # no GPM: no such advice, whatever the utilisation
    bare = hopper_job(mean_sm_active_percent=None, mean_tensor_active_percent=None)
    assert not {r["kind"] for r in advise([bare], [])} \
        & {"gpu-waiting", "tensor-idle"}


def test_a_rapids_job_is_sized_by_what_it_held_not_by_its_pool() -> None:
    """A 16 GiB pool, 3 GiB of it in use at most, 0.5 GiB outside it: the memory advice
    asks for (3 + 0.5) x 1.2, not NVML's 16.5 GiB; a smaller pool is suggested."""
    session = session_of(10.0)
    use = Usage(seconds=10.0, busy=9.9, rmm_used=3 * GIB, rmm_pool=16 * GIB)
    info = WorkerInfo("w-0", gpus=[("0", "GPU-r")])
    peak = Peak("w-0", "0", "GPU-r", 16.5 * GIB, 80 * GIB, 1000, "0", "0")
    report = build(session, [WorkerFacts(info, {("0", "0", "0", "GPU-r"): use}, [peak], [], [])],
                   {}, None, load_models(), 1.2)
    (job,) = report["jobs"]
    assert (job["peak_rmm_used_bytes"], job["rmm_pool_bytes"]) == (3 * GIB, 16 * GIB)
    assert job["peak_held_bytes"] == 3.5 * GIB
    memory = next(r for r in report["recommendations"] if r["kind"] == "gpu-memory")
    assert memory["based_on"]["need_bytes"] == round(3.5 * GIB * 1.2)
    assert "what it held at most, 3.50 GiB" in memory["text"]
    pool = next(r for r in report["recommendations"] if r["kind"] == "rmm-pool")
    assert "held at most 3.00 GiB of its 16.00 GiB RMM pool" in pool["text"]
    assert pool["based_on"]["rmm_pool_size_bytes"] == round(3.75 * GIB)  # 3.6 GiB up to 256 MiB
    assert not any("An RMM pool of" in r["text"] for r in report["recommendations"])
    text = render_text(report)
    assert "peak RMM in use" in text and "RMM pool" in text and "16.00 GiB" in text
    # an untracked pool: Dask sees 0 in use; no "held", a note on how to measure it
    blind = replace(use, rmm_used=0.0)
    report = build(session, [WorkerFacts(info, {("0", "0", "0", "GPU-r"): blind}, [peak], [],
                                         [])], {}, None, load_models(), 1.2)
    (job,) = report["jobs"]
    assert job["peak_held_bytes"] is None and "does not track" in job["rmm_note"]
    assert any(r["kind"] == "rmm-untracked" and "--rmm-track-allocations" in r["text"]
               for r in report["recommendations"])
    # the same worker's pool showed use in another job: it tracks allocations, so this
    # job's 0 is a real 0 (seen on a real H200: PyTorch jobs beside an RMM one)
    other = Usage(seconds=5.0, rmm_used=1 * GIB, rmm_pool=16 * GIB)
    report = build(session, [WorkerFacts(info, {("0", "0", "0", "GPU-r"): blind,
                                                ("1", "0", "0", "GPU-r"): other},
                                         [peak], [], [])], {}, None, load_models(), 1.2)
    job0 = next(j for j in report["jobs"] if j["job"] == "0")
    assert "allocated nothing through RMM" in job0["rmm_note"]
    assert "does not track" not in job0["rmm_note"]
    assert job0["peak_held_bytes"] == 0.5 * GIB  # only what NVML saw outside the pool
    assert report["session"]["rmm"] == {"workers_with_pool": ["w-0"],
                                        "workers_tracked": ["w-0"]}
    assert not any(r["kind"] == "rmm-untracked" for r in report["recommendations"])


def test_no_jobs_is_advice_about_idle_gpus_only() -> None:
    gpus = [gpu("w-0", 3 * GIB, 80 * GIB, 0.0, job=None)]
    found = advise([], gpus, load_models())
    assert [r["kind"] for r in found] == ["idle-gpu"]
    assert "No job ran in this session: its 1 GPU(s) were held for 100 GPU seconds" in \
        found[0]["text"]


def minimal_report(**session: Any) -> dict[str, Any]:
    """A report of one idle GPU on cluster ``c<1>``, no job, as build makes it."""
    info = WorkerInfo("w<&>", hosts=["h"], gpus=[("0", "GPU-m")])
    idle = Usage(seconds=60.0, busy=0.0, first=0, last=60_000)
    peak = Peak("w<&>", "0", "GPU-m", 0.5 * GIB, GIB, 1000, "", "")
    report = build(session_of(60, cluster="c<1>", prometheus="http://p", warnings=[],
                              dask_metrics="0"),
                   [WorkerFacts(info, {("", "", "0", "GPU-m"): idle}, [], [], [peak])],
                   {("w<&>", "0", "GPU-m"): {"name": "M", "simulated": "false"}}, None,
                   load_models(), 1.2)
    report["session"].update(session)
    return report


def test_page_and_text_have_the_same_sections_in_order_and_escape_names() -> None:
    report = minimal_report()
    page, text = render_html(report, {}), render_text(report)
    titles = [s.title for s in sections(report)]
    assert titles == [*FIRST_SCREEN, *(t for t in SECTION_TITLES[6:] if t != "Warnings")]
    assert [page.index(f">{html.escape(t)}</h") for t in titles] == sorted(
        page.index(f">{html.escape(t)}</h") for t in titles)
    assert [text.index(f"\n{t}\n") for t in titles] == sorted(
        text.index(f"\n{t}\n") for t in titles)
    assert "w&lt;&amp;&gt;" in page and "w<&>" not in page
    assert f'content="{CSP}"' in page
    assert "No job ran in this session" in page and "No job ran in this session" in text


def test_simulated_is_stated_loudly() -> None:
    page = render_html(minimal_report(simulated="all"), {})
    assert "class=banner role=alert>SIMULATED GPUs" in page
    assert "!!! SIMULATED GPUs" in render_text(minimal_report(simulated="all"))
    assert "SIMULATED" not in render_html(minimal_report(), {})


# ---- a scripted session in a real Prometheus -----------------------------------------------


@pytest.fixture(scope="module")
def dataset() -> ReportDataset:
    return make_report_dataset()


@pytest.fixture(scope="module")
def prom(dataset: ReportDataset, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[PrometheusServer]:
    with backfilled_prometheus(dataset.openmetrics(), tmp_path_factory, "report") as server:
        yield server


def report_cmd(prom: PrometheusServer, cluster: str, *more: str) -> list[str]:
    return ["report", "--prometheus", prom.url, "--since", "monitor", "--cluster", cluster,
            *more]


@pytest.fixture(scope="module")
def rep(prom: PrometheusServer, dataset: ReportDataset,
        tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    """The rep session, whole: [R, R+600]."""
    out = tmp_path_factory.mktemp("rep") / "report"
    run = collector("report", "--prometheus", prom.url, "--since", str(dataset.base),
                    "--until", str(dataset.base + 600), "--cluster", "rep", "--out", str(out))
    assert run.code == 0, run.err
    assert run.err == "" or "wrote" in run.err
    report = json.loads((out / "report.json").read_text())
    return out, report, (out / "report.html").read_text()


def page_text(page: str) -> str:
    """The page's text, a line per element (the spans that keep a word whole are not
    elements of their own)."""
    return html.unescape(re.sub(r"<[^>]+>", "\n", re.sub(r"</?span[^>]*>", "", page)))


def at(dataset: ReportDataset, seconds: float) -> str:
    return format_rfc3339(round((dataset.base + seconds) * 1000))




@pytest.mark.integration
@requires_prometheus
def test_a_report_computed_in_processes_is_the_report_computed_in_one(
        rep: tuple[Path, dict[str, Any], str], prom: PrometheusServer, dataset: ReportDataset,
        tmp_path: Path) -> None:
    """Two workers (no pool by default) reduced by a pool of 2 processes: the same files,
    byte for byte."""
    out, _, _ = rep
    run = collector("report", "--prometheus", prom.url, "--since", str(dataset.base),
                    "--until", str(dataset.base + 600), "--cluster", "rep", "--out",
                    str(tmp_path / "pooled"), "--processes", "2")
    assert run.code == 0, run.err
    for name in ("report.json", "report.html"):
        assert (tmp_path / "pooled" / name).read_bytes() == (out / name).read_bytes(), name
    bad = collector("report", "--prometheus", prom.url, "--since", str(dataset.base),
                    "--until", str(dataset.base + 600), "--out", str(tmp_path / "no"),
                    "--processes", "-1")
    assert bad.code == 2 and bad.err.strip().endswith("--processes -1: must be 0 or more")
    assert "Traceback" not in bad.err and not (tmp_path / "no").exists()


@pytest.mark.integration
@requires_prometheus
def test_report_json_has_the_scripted_numbers(rep: tuple[Path, dict[str, Any], str],
                                              dataset: ReportDataset) -> None:
    _, report, _ = rep
    session = report["session"]
    assert (session["cluster"], session["worker_count"], session["gpu_count"]) == ("rep", 2, 3)
    assert session["simulated"] == "none" and session["jobs_source"] == "jobs.csv"
    models = {(w["worker"], g["gpu"]): (g["model"], g["capacity_bytes"])
              for w in session["workers"] for g in w["gpus"]}
    assert models == {("w-0", "0"): ("NVIDIA A100-SXM4-80GB", 80 * GIB),
                      ("w-0", "1"): ("NVIDIA A100-SXM4-80GB", 80 * GIB),
                      ("w-1", "0"): ("Tesla T4", 16 * GIB)}
    jobs = {j["job"]: j for j in report["jobs"]}
    assert set(jobs) == set(EXPECTED_JOBS)
    for job, want in EXPECTED_JOBS.items():
        got = jobs[job]
        for key in ("job_name", "status", "wall_seconds", "gpu_seconds", "busy_seconds",
                    "idle_gpu_seconds", "energy_joules"):
            assert got[key] == pytest.approx(want[key]), (job, key)
        for key in ("mean_utilization_percent", "mean_sm_active_percent",
                    "mean_tensor_active_percent"):
            assert got[key] == pytest.approx(want[key], abs=0.01), (job, key)
        for key in ("peak_rmm_used_bytes", "rmm_pool_bytes", "peak_held_bytes"):
            assert got[key] == want[key], (job, key)
        assert got["energy_kwh"] == pytest.approx(want["energy_joules"] / 3.6e6, abs=1e-6)
        assert "lower bound" in got["energy_note"]  # w-0's GPU 1 reports no energy
        peak = got["peak"]
        assert (peak["peak_bytes"], peak["worker"], peak["gpu"], peak["time"]) == (
            want["peak_bytes"], want["peak_worker"], want["peak_gpu"],
            at(dataset, want["peak_at"]))
    for (job, dag), want in EXPECTED_DAGS.items():
        got = next(d for d in jobs[job]["dags"] if d["dag"] == dag)
        for key, value in want.items():
            got_value = got["peak"]["peak_bytes"] if key == "peak_bytes" else got[key]
            assert got_value == pytest.approx(value), (job, dag, key)
    # the worker that left at R+300 ran job 0 only, and its peak was 93.75 % of its T4
    t4 = next(p for p in jobs["0"]["peaks"] if p["worker"] == "w-1")
    assert (t4["peak_bytes"], t4["peak_percent"], t4["time"]) == (15 * GIB, 93.75,
                                                                  at(dataset, 150))
    assert not any(p["worker"] == "w-1" for p in jobs["1"]["peaks"])


@pytest.mark.integration
@requires_prometheus
def test_the_reports_charts_show_the_exports_numbers(prom: PrometheusServer,
                                                     dataset: ReportDataset,
                                                     tmp_path: Path) -> None:
    """The report's export writes no worker file; its charts are drawn from the kept tables,
    which hold the very numbers and phases ``export``'s worker files hold."""
    since, until = dataset.base, dataset.base + 600
    kept = _Kept(most=2)
    gather = Gatherer(REPORT_METRICS, 30_000, to_ms(since), to_ms(until), 60_000, then=kept)
    with PrometheusClient(ConnectionSettings(prom.url)) as client:
        full = export(client, since, until, tmp_path / "full", metrics=list(REPORT_METRICS),
                      cluster="rep")
        bare = export(client, since, until, tmp_path / "bare", metrics=list(REPORT_METRICS),
                      cluster="rep", visiting=Visiting(gather, gather.expect, worker_files=False))
    assert (bare.workers, bare.files) == (full.workers, full.files) and len(full.files) == 2
    assert json.loads((tmp_path / "bare" / "export.json").read_text())["files"] == []
    assert not any((tmp_path / "bare" / name).exists() for name in full.files)
    assert list(kept.tables) == [info.name for info, _ in gather.tally.workers] == full.workers
    names = [c.name for c in select(REPORT_METRICS)]
    for worker, name in zip(full.workers, full.files, strict=True):
        mine = trace_of_table(worker, Path(name).stem, kept.tables[worker], names,
                              to_ms(since))
        theirs = read_worker_file(tmp_path / "full" / name)
        assert (mine.worker, mine.stem, mine.start, mine.metrics) == (
            theirs.worker, theirs.stem, theirs.start, theirs.metrics)
        assert (mine.phases, mine.cluster_phases) == (theirs.phases, theirs.cluster_phases)
        assert mine.phases and len(mine.gpus) == len(theirs.gpus) > 0
        for a, b in zip(mine.gpus, theirs.gpus, strict=True):
            assert (a.gpu, a.uuid, a.times) == (b.gpu, b.uuid, b.times)
            for metric in names:
                assert a.values[metric] == [None if v is None else pytest.approx(v, rel=1e-9)
                                            for v in b.values[metric]], metric


@pytest.mark.integration
@requires_prometheus
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_an_export_written_in_pieces_is_the_export_written_whole(
        prom: PrometheusServer, dataset: ReportDataset, tmp_path: Path, fmt: str) -> None:
    """A range longer than a chunk is read, joined and written a chunk at a time (its memory
    one chunk's): the files are the whole range's. Chunks of 60 s put edges on samples and
    on a DAG's edge (R+350), chunks of 37 s between samples and inside DAGs and gaps; w-1
    leaves at R+300 (a hole across pieces). This scheduler exports no DAG times: the
    scrape-based rule of gpu_by_prefix.csv (tests/test_export_pieces.py has the other)."""
    since, until = dataset.base + 40, dataset.base + 600
    results = {}
    for chunk in (3600.0, 60.0, 37.0):  # a client each: a client says a warning once
        with PrometheusClient(ConnectionSettings(prom.url)) as client:
            results[chunk] = export(client, since, until, tmp_path / str(chunk), cluster="rep",
                                    chunk=chunk, format=fmt)
    whole = tmp_path / "3600.0"
    record = json.loads((whole / "export.json").read_text())
    assert record["rows"] > 0 and any("no GPU sample of" in w for w in record["warnings"])
    for chunk in (60.0, 37.0):
        part = tmp_path / str(chunk)
        mine = json.loads((part / "export.json").read_text())
        for key in ("rows", "warnings", "files", "workers", "metrics"):
            assert mine[key] == record[key], (chunk, key)
        assert results[chunk].rows == results[3600.0].rows
        for name in [*record["files"], "workers.csv", "jobs.csv", ACTIVITIES_CSV]:
            if name.endswith(".parquet"):
                import pyarrow.parquet as pq
                assert pq.read_table(part / name).equals(pq.read_table(whole / name)), name
            else:
                assert (part / name).read_bytes() == (whole / name).read_bytes(), (chunk, name)
        assert csv_numbers(part / GPU_BY_PREFIX_CSV) == \
            csv_numbers(whole / GPU_BY_PREFIX_CSV)
        assert len(csv_numbers(whole / GPU_BY_PREFIX_CSV)) > 1


@pytest.mark.integration
@requires_prometheus
def test_where_the_time_went_is_the_exports_own_rows(rep: tuple[Path, dict[str, Any], str],
                                                     prom: PrometheusServer,
                                                     dataset: ReportDataset,
                                                     tmp_path: Path) -> None:
    _, report, page = rep
    run = collector("export", "--prometheus", prom.url, "--since", str(dataset.base),
                    "--until", str(dataset.base + 600), "--cluster", "rep", "--out",
                    str(tmp_path))
    assert run.code == 0, run.err
    where = report["where_the_time_went"]
    for key, name in (("activities", ACTIVITIES_CSV), ("gpu_by_prefix", GPU_BY_PREFIX_CSV)):
        with open(tmp_path / name, newline="") as fh:
            assert where[key] == list(csv.DictReader(fh)), key
    cpu = next(r for r in where["activities"] if r["prefix"] == "load")
    assert (cpu["job_name"], cpu["activity"], cpu["unit"], float(cpu["value"])) == (
        "etl", "thread-cpu", "seconds", pytest.approx(80.0))
    train = next(r for r in where["gpu_by_prefix"] if r["prefix"] == "train")
    assert float(train["gpu_seconds"]) == pytest.approx(100.0)  # w-0 GPU 0 busy [400, 500)
    text = page_text(page)
    assert "thread-noncpu" in text and "80.000 s" in text and "100.000 s" in text


@pytest.mark.integration
@requires_prometheus
def test_recommendations_of_the_scripted_session(rep: tuple[Path, dict[str, Any], str]
                                                 ) -> None:
    _, report, _ = rep
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for r in report["recommendations"]:
        by_kind.setdefault(r["kind"], []).append(r)
    memory = {r["job"]: r["based_on"] for r in by_kind["gpu-memory"]}
    assert memory["0"]["need_bytes"] == round(30 * GIB * 1.2)
    assert memory["0"]["fits"] == ["NVIDIA A100 40GB"]
    assert set(memory["1"]["fits"]) == {"NVIDIA A10", "NVIDIA A30", "NVIDIA L4"}
    idle = {(r["job"], r["worker"], r["gpu"]) for r in by_kind["idle-gpu"]}
    assert idle == {("0", "w-0", "1"), ("1", "w-0", "1")}
    near = by_kind["near-capacity"]
    assert [(r["worker"], r["based_on"]["peak_percent"]) for r in near] == [("w-1", 93.75)]
    limit = next(r for r in by_kind["dask-setting"] if "device_memory_limit" in r["text"])
    assert limit["based_on"]["device_memory_limit_bytes"] == round(16 * GIB * 0.8)
    # w-1's 8 GiB pool held 2 GiB at most: 2.4 GiB would do, 2.5 GiB in 256 MiB steps
    (pool,) = by_kind["rmm-pool"]
    assert (pool["job"], pool["based_on"]["rmm_pool_size_bytes"]) == ("0", round(2.5 * GIB))
    # utilisation below 50 % and SMs under 20 %: nothing said of waiting or tensor cores
    assert not {"gpu-waiting", "tensor-idle"} & set(by_kind)


@pytest.mark.integration
@requires_prometheus
def test_the_page_shows_the_numbers(rep: tuple[Path, dict[str, Any], str]) -> None:
    _, report, page = rep
    text = page_text(page)
    for needle in ("etl", "train", "finished", "erred", "47,000 J (0.0131 kWh)",
                   "30,000 J (0.0083 kWh)", "240 s (4.0 min)", "48.0 %", "33.3 %",
                   "205 s (3.4 min)", "30.00 GiB (37.5 % of 80.00 GiB) on w-0 GPU 0",
                   "93.8 %", "NVIDIA A100 40GB (40.00 GiB)", "Tesla T4", "2 of 3 GPU(s)",
                   "SM active", "17.5 %", "16.7 %", "peak RMM in use", "8.00 GiB",
                   "RMM of job 0: sampled at the workers' heartbeats"):
        assert needle in text, needle
    titles = [t for t in SECTION_TITLES if f">{html.escape(t)}</h" in page]
    assert titles == SECTION_TITLES
    assert [page.index(f">{html.escape(t)}</h") for t in titles] == sorted(
        page.index(f">{html.escape(t)}</h") for t in titles)
    # in worker order, each captioned with its worker and GPUs
    assert [p["file"] for p in report["plots"] if p["file"]] == ["w-0.svg", "w-1.svg"]
    assert [p["worker"] for p in report["plots"] if p["file"]] == ["w-0", "w-1"]
    assert "w-0: GPU 0 (NVIDIA A100-SXM4-80GB, 80.00 GiB), GPU 1 (" in text
    assert "w-1: GPU 0 (Tesla T4, 16.00 GiB)" in text
    assert page.count("<figure><svg ") == 2  # w-0, w-1: inline, no image file
    for worker in ("w-0", "w-1"):  # each chart names its worker, its GPUs and its phases
        chart = page[page.index(f"<title>{worker}: "):]
        chart = chart[:chart.index("</svg>")]
        assert "GPU 0 used" in chart and "capacity" in chart and ">etl</text>" in chart


class _Urls(HTMLParser):
    """Every URL-bearing attribute of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v or "" for k, v in attrs if k in ("src", "href", "action", "srcset")]


@pytest.mark.integration
@requires_prometheus
@requires_chromium
def test_the_page_renders_in_chromium_without_error_or_request(
        rep: tuple[Path, dict[str, Any], str], tmp_path: Path) -> None:
    out, _, page = rep
    parser = _Urls()
    parser.feed(page)
    assert parser.urls == [] and "<svg " in page  # charts inline: nothing to fetch
    assert "url(" not in page.split("<body>")[0]  # no stylesheet fetches
    seen = render(out / "report.html", tmp_path, (1280, 2400))
    assert seen.console == [] and seen.requests == []
    assert png_size(seen.screenshot) == (1280, 2400)
    from matplotlib.image import imread

    pixels = imread(seen.screenshot)
    assert pixels.std() > 0.05, "a blank screenshot"
    assert len({tuple(p) for p in pixels[::16, ::16].reshape(-1, pixels.shape[-1])}) > 20


@pytest.mark.integration
@requires_chromium
def test_the_browser_check_sees_a_request_and_a_console_error(tmp_path: Path) -> None:
    """The check above can fail: a page that fetches and logs is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><img src="http://203.0.113.7/x.png">'
                   '<script>console.error("boom")</script>')
    seen = render(bad, tmp_path, (400, 300))
    assert any("203.0.113.7" in line for line in seen.requests)
    assert any("boom" in line for line in seen.console)
    blocked = tmp_path / "blocked.html"
    blocked.write_text(render_html(minimal_report(), {}).replace(
        "</body>", '<img src="http://203.0.113.7/x.png"></body>'))
    seen = render(blocked, tmp_path / "b", (400, 300))
    assert seen.requests == [] and any("Content Security Policy" in c for c in seen.console)


@pytest.mark.integration
@requires_prometheus
def test_text_format_prints_the_same_sections(prom: PrometheusServer, tmp_path: Path) -> None:
    (tmp_path / "report.html").write_text("an earlier report's page")  # not of these numbers
    run = collector(*report_cmd(prom, "rep", "--format", "text", "--out", str(tmp_path)))
    assert run.code == 0, run.err
    positions = [run.out.index(f"\n{t}\n") for t in SECTION_TITLES]
    assert positions == sorted(positions)
    report = json.loads((tmp_path / "report.json").read_text())
    assert f"{report['jobs'][0]['energy_joules']:,.0f} J" in run.out
    assert not (tmp_path / "report.html").exists()


@pytest.mark.integration
@requires_prometheus
def test_a_session_without_jobs(prom: PrometheusServer, tmp_path: Path,
                                dataset: ReportDataset) -> None:
    run = collector(*report_cmd(prom, "empty", "--out", str(tmp_path)))
    assert run.code == 0, run.err
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["jobs"] == []
    assert report["session"]["since_unix"] == dataset.base + EMPTY_OFFSET + 10
    assert [r["kind"] for r in report["recommendations"]] == ["idle-gpu"]
    page = (tmp_path / "report.html").read_text()
    assert "No job ran in this session" in page and "Traceback" not in run.err


@pytest.mark.integration
@requires_prometheus
def test_a_simulated_session_says_so_and_reports_no_energy(prom: PrometheusServer,
                                                           tmp_path: Path,
                                                           dataset: ReportDataset) -> None:
    run = collector(*report_cmd(prom, "sim", "--out", str(tmp_path), "--plots", "0"))
    assert run.code == 0, run.err
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["session"]["simulated"] == "all"
    (job,) = report["jobs"]
    assert (job["job_name"], job["energy_joules"], job["energy_kwh"]) == ("sim-job", None, None)
    assert job["energy_note"].startswith("not reported")
    assert (job["gpu_seconds"], job["busy_seconds"]) == (100, 50)
    page = (tmp_path / "report.html").read_text()
    assert "SIMULATED GPUs" in page and "not reported" in page
    assert "<img" not in page and "no plots: none asked for (--plots 0)" in page_text(page)
    assert report["session"]["since_unix"] == dataset.base + SIM_OFFSET + 10


@pytest.mark.integration
@requires_prometheus
def test_bad_input_is_one_line(prom: PrometheusServer, tmp_path: Path) -> None:
    for args, code, words in ((report_cmd(prom, "rep"), 2, "--out DIR is required"),
                              (report_cmd(prom, "rep", "--out", str(tmp_path), "--headroom",
                                          "0.5"), 2, "--headroom 0.5"),
                              (report_cmd(prom, "rep", "--out", str(tmp_path), "--plots",
                                          "-1"), 2, "--plots -1"),
                              (report_cmd(prom, "nosuch", "--out", str(tmp_path)), 1,
                               "no monitor session of cluster 'nosuch'")):
        run = collector(*args)
        assert run.code == code and words in run.err, run.err
        assert len(run.err.strip().splitlines()) == 1 and "Traceback" not in run.err
    assert not (tmp_path / "report.html").exists()


def test_job_peaks_from_dag_peaks_are_gpu_peaks_by_job() -> None:
    """The report takes per-job peaks from its per-DAG ones: the same as peaks --by job."""
    from dask_metrics.collector.model.columns import PEAK_METRIC, TOTAL_METRIC
    from dask_metrics.collector.model.series import Series, Timeline
    from dask_metrics.collector.peaks.fold import gpu_peaks
    from dask_metrics.collector.report.gatherer import dag_timeline, job_peaks

    times = list(range(0, 100_000, 5000))
    values = [float(v) for v in (3, 9, 9, 2, 7, 8, 8, 1, 5, 5, 4, 9, 6, 0, 9, 3, 2, 8, 1, 1)]
    labels = {"gpu": "0", "uuid": "GPU-x"}
    series = {PEAK_METRIC: [Series(labels, times, values)],
              TOTAL_METRIC: [Series(labels, times, [10.0] * len(times))]}
    states = [("1", "0")] * 4 + [("1", "1")] * 4 + [("", "")] * 3 + [("2", "0")] * 5 + \
        [("1", "2")] * 4
    activity = Timeline(times, states)
    by_job = gpu_peaks("w", series, activity, 120_000, by_job=True)
    derived = job_peaks(gpu_peaks("w", series, dag_timeline(activity), 120_000, by_job=True))
    key = lambda p: (p.job, p.peak_bytes, p.time, p.dag)  # noqa: E731
    assert sorted(map(key, derived)) == sorted(map(key, by_job))
    assert {(p.job, p.time) for p in by_job} == {("1", 5000), ("2", 55000)}


def test_summary_cells_keep_small_byte_counts_readable():
    """168 bytes read is not '0.0 MiB': under a MiB the page shows bytes."""
    from dask_metrics.collector.report.layout import _cell

    assert _cell("value", {"value": "168", "unit": "bytes"}) == "168 B"
    assert _cell("value", {"value": str(3 * 2**20), "unit": "bytes"}) == "3.0 MiB"
    assert _cell("peak_mem", {"peak_mem": "93667328"}) == "89.3 MiB"
    assert _cell("value", {"value": "2.5", "unit": "seconds"}) == "2.500 s"


# ---- this run against the last, and the first screen ----------------------------------------


@pytest.fixture(scope="module")
def again(prom: PrometheusServer, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[Path, dict[str, Any]]:
    """The "again" cluster's second session against the one before: (folder, report)."""
    out = tmp_path_factory.mktemp("again") / "report"
    run = collector(*report_cmd(prom, "again", "--out", str(out), "--baseline", "previous"))
    assert run.code == 0, run.err
    return out, json.loads((out / "report.json").read_text())


@pytest.mark.integration
@requires_prometheus
def test_this_run_against_the_previous_session(again: tuple[Path, dict[str, Any]],
                                               dataset: ReportDataset) -> None:
    """etl ran 120 s instead of 100 s on the GPU, peaked at 12 GiB instead of 10, at 100 W:
    +20 % of GPU time, peak and energy; its wall time (first to last scrape showing the DAG)
    105 s -> 125 s. train ran only before, score only now."""
    _, report = again
    base = report["baseline"]
    assert base["source"] == (f"the monitor session of {at(dataset, AGAIN_OFFSET + 50)} to "
                              f"{at(dataset, AGAIN_OFFSET + 550)}")
    (etl,) = base["jobs"]
    assert (etl["job_name"], etl["job_label"], etl["baseline_job_label"]) == ("etl", "2", "0")
    assert etl["peak_bytes"] == {"now": 12 * GIB, "before": 10 * GIB, "change": 2 * GIB,
                                 "change_percent": 20.0}
    assert etl["energy_joules"] == {"now": 12000, "before": 10000, "change": 2000,
                                    "change_percent": 20.0}
    assert etl["gpu_hours"]["change_percent"] == 20.0
    assert etl["gpu_hours"]["now"] == pytest.approx(120 / 3600, abs=1e-6)
    assert etl["wall_seconds"] == {"now": 125, "before": 105, "change": 20,
                                   "change_percent": 19.0}
    assert base["only_now"] == [{"job_name": "score", "job_label": "3"}]
    assert base["only_before"] == [{"job_name": "train", "job_label": "1"}]
    assert report["session"]["title"].startswith("etl and score on again, ")

    def grown(limit: float) -> list[str]:  # docs/collector.md's jq check of a CI job
        return [j["job_name"] for j in base["jobs"]
                if (j["peak_bytes"]["change_percent"] or 0) > limit]

    assert grown(20) == [] and grown(19) == ["etl"]


@pytest.mark.integration
@requires_prometheus
def test_a_baseline_folder_file_or_time_compares_the_same(
        prom: PrometheusServer, dataset: ReportDataset, again: tuple[Path, dict[str, Any]],
        tmp_path: Path) -> None:
    first = tmp_path / "first"
    run = collector("report", "--prometheus", prom.url, "--cluster", "again", "--plots", "0",
                    "--since", str(dataset.base + AGAIN_OFFSET + 50),
                    "--until", str(dataset.base + AGAIN_OFFSET + 550), "--out", str(first))
    assert run.code == 0, run.err
    for i, spec in enumerate((str(first), str(first / "report.json"),
                              at(dataset, AGAIN_OFFSET + 300))):
        out = tmp_path / f"r{i}"
        run = collector(*report_cmd(prom, "again", "--out", str(out), "--format", "text",
                                    "--baseline", spec))
        assert run.code == 0, run.err
        found = json.loads((out / "report.json").read_text())["baseline"]
        assert {k: found[k] for k in ("jobs", "only_now", "only_before")} == \
            {k: again[1]["baseline"][k] for k in ("jobs", "only_now", "only_before")}, spec
        # the text: the changes on the jobs' lines, before the detail
        first_screen = run.out[:run.out.index("Against the baseline")]
        assert "peak memory change" in first_screen and "energy change" in first_screen
        assert re.search(r"\netl\s+finished\s+125 s \(2\.1 min\).*\+19\.0 %\s+\+20\.0 %"
                         r"\s+\+20\.0 %\s+\+20\.0 %\n", first_screen), first_screen
        assert re.search(r"\nscore\s+finished.*\s+new\s+-\s+-\s+-\n", first_screen)


@pytest.mark.integration
@requires_prometheus
def test_a_bad_baseline_is_one_line_and_writes_nothing(prom: PrometheusServer,
                                                       dataset: ReportDataset,
                                                       tmp_path: Path) -> None:
    (tmp_path / "half.json").write_text("{")
    (tmp_path / "other.json").write_text('{"report_version": 3}')
    first_session = ("--since", str(dataset.base + AGAIN_OFFSET + 50),
                     "--until", str(dataset.base + AGAIN_OFFSET + 550))
    for spec, words, span in (
            (str(tmp_path / "half.json"), "half.json is not JSON", ()),
            (str(tmp_path / "other.json"), "other.json is not a dask-metrics report.json",
             ()),
            (str(tmp_path / "gone" / "report.json"), "cannot read the baseline", ()),
            ("yesterday", "'yesterday' is not a time", ()),
            ("previous", "no monitor session of cluster 'again' started before "
             f"{at(dataset, AGAIN_OFFSET + 50)}", first_session)):
        out = tmp_path / "out"
        args = ["report", "--prometheus", prom.url, "--cluster", "again", "--out", str(out),
                "--baseline", spec, *(span or ("--since", "monitor"))]
        run = collector(*args)
        assert run.code == 2 and words in run.err, (spec, run.err)
        assert len(run.err.strip().splitlines()) == 1 and "Traceback" not in run.err
        assert not (out / "report.json").exists() and not (out / "report.html").exists()


FIRST_SCREEN_JS = """(() => {
  const bottom = e => Math.round(e.getBoundingClientRect().bottom);
  const cells = tr => [...tr.children].map(c => c.innerText.trim());
  const jobs = document.querySelector('#jobs table');
  return {
    title: document.querySelector('h1').innerText.trim(),
    figures: [...document.querySelectorAll('#glance .fig')].map(
      f => [f.querySelector('small').innerText, f.querySelector('b').innerText, bottom(f)]),
    headers: jobs ? cells(jobs.rows[0]) : [],
    jobs: jobs ? [...jobs.tBodies[0].rows].map(tr => [...cells(tr), bottom(tr)]) : [],
    advice: [...document.querySelectorAll('#advice > ol > li')].map(
      li => [li.innerText.trim(), bottom(li)]),
    overflow: document.documentElement.scrollWidth - innerWidth,
  };
})()"""
BROKEN_WORDS_JS = """(() => {
  const out = [], range = document.createRange();
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node; (node = walk.nextNode());) {
    if (node.parentElement.closest('svg')) continue;
    for (const m of node.textContent.matchAll(/\\S+/g)) {
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const lines = new Set([...range.getClientRects()].filter(r => r.width > 0)
                            .map(r => Math.round(r.top)));
      if (lines.size > 1) out.push(m[0]);
    }
  }
  return out;
})()"""
FIGURES = ["GPU time held", "GPU time busy", "Mean utilisation", "Peak memory", "Energy",
           "Idle GPU time"]


@pytest.mark.integration
@requires_prometheus
@requires_chromium
@pytest.mark.parametrize("which", ["rep", "again"])
def test_the_first_screen_answers_and_no_word_is_broken(
        which: str, rep: tuple[Path, dict[str, Any], str], again: tuple[Path, dict[str, Any]],
        tmp_path: Path) -> None:
    """At 1280 x 800, before any scrolling: the title, the six figures, every job's line
    (with its changes against the baseline) and the top three recommendations; at 1280 and
    390 px, no word on two lines and no page wider than the screen."""
    out, report = (rep[0], rep[1]) if which == "rep" else again
    with Page(tmp_path) as page:
        page.open(out / "report.html", 1280, 800)
        first = page.evaluate(FIRST_SCREEN_JS)
        assert first["title"] == report["session"]["title"]
        assert [f[0] for f in first["figures"]] == FIGURES
        peak = report["headline"]["peak"]
        assert first["figures"][3][1] == f"{peak['peak_bytes'] / GIB:.2f} GiB"
        names = [j["job_name"] for j in report["jobs"]]
        assert [row[0] for row in first["jobs"]] == names
        assert [row[1] for row in first["jobs"]] == [j["status"] for j in report["jobs"]]
        tops = [r["text"] for r in report["recommendations"][:3]]
        assert [a[0] for a in first["advice"]] == tops and len(tops) == 3
        bottoms = [f[2] for f in first["figures"]] + [row[-1] for row in first["jobs"]] + \
            [a[1] for a in first["advice"]]
        assert max(bottoms) <= 800, first
        if which == "again":
            wall, peak_change = (first["headers"].index(f"{h} change")
                                 for h in ("wall time", "peak memory"))
            assert [row[wall] for row in first["jobs"]] == ["+19.0 %", "new"]
            assert [row[peak_change] for row in first["jobs"]] == ["+20.0 %", "-"]
            assert first["headers"][-4:] == ["wall time change", "GPU-hours change",
                                              "peak memory change", "energy change"]
        assert page.evaluate(BROKEN_WORDS_JS) == []
        page.open(out / "report.html", 390, 844)
        assert page.evaluate(BROKEN_WORDS_JS) == []
        assert page.evaluate(FIRST_SCREEN_JS)["overflow"] <= 0  # tables scroll, not the page
        assert page.console() == [] and page.requests() == []


def test_only_the_tables_of_the_workers_to_chart_are_kept() -> None:
    """--plots N keeps N tables as the workers go by (the highest peaks so far, the earlier
    worker on a tie), not a fleet's: what is charted is what the whole ranking would pick."""
    percents = {"w-0": 10.0, "w-1": 90.0, "w-2": 10.0, "w-3": 50.0, "w-4": 90.0, "w-5": 0.0}

    def facts(name: str) -> WorkerFacts:
        peak = Peak(name, "0", "u", percents[name] * GIB, 100 * GIB, 0, "0", "0")
        return WorkerFacts(WorkerInfo(name), {}, [peak] if percents[name] else [], [], [])

    for most, expected in ((0, []), (1, ["w-1"]), (2, ["w-1", "w-4"]),
                           (3, ["w-1", "w-3", "w-4"]), (4, ["w-0", "w-1", "w-3", "w-4"]),
                           (9, list(percents))):
        kept = _Kept(most)
        for name in percents:
            kept(facts(name), WorkerTable([], [], [], []))
            assert len(kept.tables) <= most
        assert sorted(kept.tables) == expected, most
