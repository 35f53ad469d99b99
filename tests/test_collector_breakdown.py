"""activities.csv, gpu_by_prefix.csv and the worker columns against a real Prometheus holding
a backfilled, deterministic dataset (tests/collector_dataset.py, "where the time went"): the
values the dataset's comments work out by hand, two clusters and an HA pair in the same
Prometheus, a counter born inside the range and one reset by a scheduler restart."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dask_metrics.collector.query.scope import Scope
from dask_metrics.collector.sources.summaries import (
    activity_table,
    read_activities,
    read_gpu_by_prefix,
)
from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient
from dask_metrics.contract import (
    ACTIVITIES_CSV,
    ACTIVITY_COLUMNS,
    GPU_BY_PREFIX_COLUMNS,
    GPU_BY_PREFIX_CSV,
    REPLICA_LABELS,
)
from tests.collector_dataset import (
    LAB_ACTIVITIES,
    LAB_GPU_BY_PREFIX,
    LAB_RANGE,
    GiB,
    LabDataset,
    MiB,
    lab_tasks,
    make_lab_dataset,
)
from tests.helpers import collector, read_csv
from tests.prometheus_helpers import PrometheusServer, backfilled_prometheus, requires_prometheus

pytestmark = [requires_prometheus, pytest.mark.integration]


def cells(values: tuple) -> list[str]:
    """A row of the dataset's expectations as the CSV writes it."""
    return ["" if v is None else str(int(v)) if isinstance(v, float) and v.is_integer()
            else str(v) for v in values]


@pytest.fixture(scope="module")
def lab() -> LabDataset:
    return make_lab_dataset()


@pytest.fixture(scope="module")
def prom(lab: LabDataset, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[PrometheusServer]:
    with backfilled_prometheus(lab.openmetrics(), tmp_path_factory, "lab") as server:
        yield server


def span(lab: LabDataset) -> list[str]:
    return ["--since", str(lab.base + LAB_RANGE[0]), "--until", str(lab.base + LAB_RANGE[1])]


@pytest.fixture(scope="module")
def lab_export(prom: PrometheusServer, lab: LabDataset,
               tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("lab") / "export"
    run = collector("export", *span(lab), "--cluster", "lab", "--metrics", "total-mem",
                    "worker-mem", "worker-spilled", "worker-cpu", "worker-tasks",
                    "--out", str(out), "--prometheus", prom.url)
    assert run.code == 0, run.err
    return out


def test_activities_csv_is_the_increase_over_the_range(lab_export: Path) -> None:
    rows = read_csv(lab_export / ACTIVITIES_CSV)
    assert list(rows[0]) == list(ACTIVITY_COLUMNS)
    # train: there before the range (baseline at the start); prep: born in the range and
    # reset by a scheduler restart; the bytes counter did not grow: no row; the other
    # cluster's far bigger counters and the HA replica's copies: not counted
    assert [list(r.values()) for r in rows] == [cells(r) for r in LAB_ACTIVITIES]


def test_gpu_by_prefix_splits_busy_seconds_and_energy_per_task(lab_export: Path) -> None:
    rows = read_csv(lab_export / GPU_BY_PREFIX_CSV)
    assert list(rows[0]) == list(GPU_BY_PREFIX_COLUMNS)
    # load ran only while the GPU idled: 0 s; fit's GPU has no energy counter: empty
    assert [list(r.values()) for r in rows] == [cells(r) for r in LAB_GPU_BY_PREFIX]
    record = json.loads((lab_export / "export.json").read_text())
    assert record["summaries"] == [ACTIVITIES_CSV, GPU_BY_PREFIX_CSV]
    assert record["units"]["worker-cpu"] == "% of one core"


def test_worker_columns_take_the_scheduler_scrape_before_each_gpu_sample(
        lab_export: Path) -> None:
    rows = read_csv(lab_export / "g-0.csv")
    assert [float(r["timestamp"]) for r in rows] == [float(t) for t in range(0, 301, 5)]
    for row in rows:
        t = float(row["timestamp"]) + LAB_RANGE[0]
        s = t - 1  # the scheduler scrapes one second before the sidecar
        where = f"t={t}"
        assert float(row["worker-mem"]) == 2 * GiB + s * MiB, where
        assert float(row["worker-spilled"]) == s * 1024, where
        assert row["worker-cpu"] == "150", where
        executing = sum(n for w, *_, n in lab_tasks(s) if w == "g-0")
        assert float(row["worker-tasks"]) == executing, where
    # g-1 has no resource series: its worker columns are empty, its rows still there
    other = read_csv(lab_export / "g-1.csv")
    assert other and {r["worker-mem"] for r in other} == {""}


def test_a_default_export_adds_the_activity_and_rmm_columns_where_they_have_data(
        prom: PrometheusServer, lab: LabDataset, tmp_path: Path) -> None:
    """GPM activity and RMM columns join the default ones only where the export's cluster
    has them: empty cells for the worker without, no such columns for the other cluster."""
    headers = {}
    for cluster in ("lab", "other"):
        out = tmp_path / cluster
        run = collector("export", *span(lab), "--cluster", cluster, "--out", str(out),
                        "--prometheus", prom.url)
        assert run.code == 0, run.err
        headers[cluster] = list(read_csv(out / "g-0.csv")[0])
        record = json.loads((out / "export.json").read_text())
        assert record["metrics"] == headers[cluster][9:]
    default = ["total-mem", "mem-util", "compute-util", "peak-mem", "mem-bw-util", "power",
               "temperature", "sm-clock", "energy"]
    assert headers["other"][9:] == default
    assert headers["lab"][9:] == [*default, "sm-active", "rmm-used", "rmm-pool"]
    rows = read_csv(tmp_path / "lab" / "g-0.csv")
    for row in rows:
        s = float(row["timestamp"]) + LAB_RANGE[0] - 1  # the scheduler's scrape before
        assert row["sm-active"] == "25"
        assert (float(row["rmm-used"]), float(row["rmm-pool"])) == (GiB + s * MiB, 16 * GiB)
    assert {(r["sm-active"], r["rmm-used"]) for r in read_csv(tmp_path / "lab" / "g-1.csv")} \
        == {("", "")}
    # the seed layout is the original tool's files: never an added column
    run = collector("export", *span(lab), "--cluster", "lab", "--layout", "seed", "--out",
                    str(tmp_path / "seed"), "--prometheus", prom.url)
    assert run.code == 0, run.err
    record = json.loads((tmp_path / "seed" / "export.json").read_text())
    assert record["metrics"] == default


def test_the_monitor_reads_the_same_rows(prom: PrometheusServer, lab: LabDataset,
                                         lab_export: Path) -> None:
    """Monitor.activities()/gpu_by_prefix() are these two functions over the session."""
    since, until = lab.base + LAB_RANGE[0], lab.base + LAB_RANGE[1]
    with PrometheusClient(ConnectionSettings(prom.url)) as client:
        activities = read_activities(client, since, until, cluster="lab")
        by_prefix = read_gpu_by_prefix(client, since, until, cluster="lab")
    assert [tuple(r.values()) for r in activities] == LAB_ACTIVITIES
    assert [tuple(r.values()) for r in by_prefix] == LAB_GPU_BY_PREFIX


def test_activities_read_a_job_at_a_time_are_those_read_at_once(
        prom: PrometheusServer, lab: LabDataset) -> None:
    """A fleet's activity counters are read in batches of jobs: batches of one job give the
    rows of one query for them all, the HA pair's copies and the reset counter included;
    in chunks of 50 s, a batch read from its jobs' chunks only, a chunk at a time (a limit
    of one sample), the same rows."""
    start, end = ((lab.base + t) * 1000 for t in LAB_RANGE)
    with PrometheusClient(ConnectionSettings(prom.url)) as client:
        rows = {(limit, chunk): [row for rows in activity_table(
            client, start, end, 120_000, chunk, Scope("lab", REPLICA_LABELS), {}, limit)
                                 for row in rows]
                for limit in (1, 10**9) for chunk in (50_000, 3_600_000)}
    assert rows[1, 50_000] == rows[10**9, 50_000] == rows[1, 3_600_000] == rows[10**9, 3_600_000]
    rows = {limit: rows[limit, 3_600_000] for limit in (1, 10**9)}
    assert [(r["prefix"], r["value"]) for r in rows[1]] == [("train", 300.0), ("prep", 25.0)]


def test_the_scope_and_the_replica_labels_are_what_keep_the_rest_out(
        prom: PrometheusServer, lab: LabDataset) -> None:
    """Reading every cluster (an unscoped Monitor) counts the other one too; without the
    replica labels, each HA replica's copy counts: the checks above can fail."""
    since, until = lab.base + LAB_RANGE[0], lab.base + LAB_RANGE[1]
    with PrometheusClient(ConnectionSettings(prom.url)) as client:
        every = read_activities(client, since, until, any_cluster=True)
        doubled = read_activities(client, since, until, cluster="lab", replica_labels=())
    assert [r["value"] for r in every if r["prefix"] == "train"] == [300.0 + 1000.0 * 300]
    assert [r["value"] for r in doubled] == [2 * 300.0, 2 * 25.0]


def test_a_step_grid_and_the_seed_layout_keep_the_same_summaries(
        prom: PrometheusServer, lab: LabDataset, lab_export: Path, tmp_path: Path) -> None:
    """gpu_by_prefix is always computed from raw samples; the worker columns follow the
    grid; in the seed layout a worker column is one slot per GPU like the others."""
    out = tmp_path / "step"
    run = collector("export", *span(lab), "--cluster", "lab", "--step", "10s", "--layout",
                    "seed", "--metrics", "total-mem", "worker-mem", "--out", str(out),
                    "--prometheus", prom.url)
    assert run.code == 0, run.err
    for name in (ACTIVITIES_CSV, GPU_BY_PREFIX_CSV):
        assert (out / name).read_text() == (lab_export / name).read_text(), name
    rows = read_csv(out / "worker_0.csv")  # g-0
    assert [r["timestamp"] for r in rows[:3]] == ["0.000", "10.000", "20.000"]
    for row in rows:
        t = float(row["timestamp"]) + LAB_RANGE[0]
        assert float(row["worker-mem"]) == 2 * GiB + (t - 1) * MiB, row
