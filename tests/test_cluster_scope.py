"""Many Dask clusters, one Prometheus: two clusters with identically named
workers, series without a dask_cluster label (older exporters), HA replicas' copies, and a
re-export into a folder; backfilled into a real Prometheus (tests/collector_dataset.py's
ClusterDataset), read back through the CLI and through Monitor."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dask_metrics.collector.monitor.monitor import Monitor
from dask_metrics.collector.output.export import SUMMARIES
from dask_metrics.collector.output.traces import read_export
from dask_metrics.contract import Handler
from tests.collector_dataset import (
    CLUSTERS,
    DC_OFFSET,
    HA_OFFSET,
    MIXED_OFFSET,
    OUTCOMES,
    SCOPE_TIMES,
    SESSIONS,
    UNLABELLED_OFFSET,
    ClusterDataset,
    GiB,
    ha_expected,
    make_cluster_dataset,
    scope_used,
)
from tests.helpers import Run, collector, read_csv
from tests.prometheus_helpers import (
    PrometheusServer,
    create_blocks,
    requires_prometheus,
    run_prometheus,
    run_victoria_metrics,
)

pytestmark = [requires_prometheus, pytest.mark.integration]


def one_error_line(run: Run, code: int) -> str:
    assert run.code == code, run.err
    lines = run.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("collector: error: "), run.err
    return lines[0]


@pytest.fixture(scope="module")
def data() -> ClusterDataset:
    return make_cluster_dataset()


@pytest.fixture(scope="module", params=["prometheus", "victoriametrics"])
def prom(request: pytest.FixtureRequest, data: ClusterDataset,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """The same data in Prometheus (backfilled) and in VictoriaMetrics (imported)."""
    if request.param == "victoriametrics":
        with run_victoria_metrics(tmp_path_factory.mktemp("vm"), data=data.openmetrics()
                                  ) as server:
            yield server
        return
    blocks = create_blocks(data.openmetrics(), tmp_path_factory.mktemp("blocks"))
    with run_prometheus(tmp_path_factory.mktemp("prom"), blocks=blocks) as server:
        yield server


def span(at: int, *extra: str) -> list[str]:
    return ["--since", str(at), "--until", str(at + 300), *extra]


# ---- two clusters, identical worker names ----------------------------------------------------


def test_several_clusters_and_none_named_is_one_line_listing_them(
        prom: PrometheusServer, data: ClusterDataset, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for command in (["export", "--out", str(out)], ["peaks"],
                    ["plot", "--out", str(out)]):
        run = collector(*command, *span(data.base), "--prometheus", prom.url)
        line = one_error_line(run, 2)
        assert "2 Dask clusters" in line and "'ml-a', 'ml-b'" in line and "--cluster" in line
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no staging folder either


@pytest.mark.parametrize("k", [0, 1])
def test_each_cluster_exports_its_own_workers(prom: PrometheusServer, data: ClusterDataset,
                                              tmp_path: Path, k: int) -> None:
    cluster, out = CLUSTERS[k], tmp_path / "out"
    run = collector("export", *span(data.base), "--cluster", cluster, "--metrics",
                    "total-mem", "--out", str(out), "--prometheus", prom.url)
    assert run.code == 0, run.err
    assert f"of Dask cluster '{cluster}'" in run.err
    record = json.loads((out / "export.json").read_text())
    assert record["cluster"] == cluster and record["asked"]["cluster"] == cluster
    assert record["files"] == ["w-0.csv", "w-1.csv"]
    assert [(r["worker"], r["uuids"], r["address"]) for r in read_csv(out / "workers.csv")] == [
        (w, f"GPU-{cluster}-{w}", f"tcp://10.{k}.0.{i}:4000") for i, w in enumerate(("w-0",
                                                                                    "w-1"))]
    for i, worker in enumerate(("w-0", "w-1")):
        rows = read_csv(out / f"{worker}.csv")
        assert [float(r["timestamp"]) for r in rows] == SCOPE_TIMES  # one cluster's, not two
        assert [float(r["total-mem"]) for r in rows] == [scope_used(k, i, t) for t in SCOPE_TIMES]
        busy = [float(r["timestamp"]) for r in rows if r["job"] == "0"]
        assert (busy[0], busy[-1]) == ((50, 145) if k == 0 else (150, 245))
    # jobs.csv: this cluster's DAGs only (both clusters have a job 0, DAG 0, ending otherwise)
    words = {2.0: "finished", 3.0: "erred"}
    assert [(r["job"], r["dag"], r["status"], r["first_seen"], r["last_seen"])
            for r in read_csv(out / "jobs.csv")] == [
        (job, dag, words[status], "0.000", f"{done:.3f}")
        for (job, dag), (done, status) in sorted(OUTCOMES[cluster].items())]


def test_peaks_are_each_clusters_own(prom: PrometheusServer, data: ClusterDataset) -> None:
    got = {}
    for cluster in CLUSTERS:
        run = collector("peaks", *span(data.base), "--cluster", cluster, "--json",
                        "--prometheus", prom.url)
        assert run.code == 0, run.err
        got[cluster] = {p["worker"]: (p["peak_bytes"], p["uuid"]) for p in json.loads(run.out)}
    # ml-a's gauge holds 15 GiB in its first 30 s (a spike from before --since): not taken.
    assert got["ml-a"]["w-0"] == (12 * GiB, "GPU-ml-a-w-0")
    assert got["ml-b"]["w-0"] == (9 * GiB, "GPU-ml-b-w-0")
    assert got["ml-a"]["w-1"][1] == "GPU-ml-a-w-1"


def test_an_unknown_cluster_lists_the_ones_found(prom: PrometheusServer, data: ClusterDataset,
                                                 tmp_path: Path) -> None:
    run = collector("export", *span(data.base), "--cluster", "ml-z", "--out",
                    str(tmp_path / "out"), "--prometheus", prom.url)
    line = one_error_line(run, 1)
    assert "'ml-z'" in line and "'ml-a', 'ml-b'" in line
    assert not (tmp_path / "out").exists()


def test_since_monitor_is_the_named_clusters_last_session(prom: PrometheusServer,
                                                          data: ClusterDataset,
                                                          tmp_path: Path) -> None:
    out = tmp_path / "out"
    run = collector("export", "--since", "monitor", "--cluster", "ml-b", "--metrics",
                    "total-mem", "--out", str(out), "--prometheus", prom.url)
    assert run.code == 0, run.err
    record = json.loads((out / "export.json").read_text())
    start, stop = SESSIONS["ml-b"]
    assert (record["since_unix"], record["until_unix"]) == (data.base + start, data.base + stop)
    assert record["cluster"] == "ml-b"
    run = collector("peaks", "--since", "monitor", "--prometheus", prom.url)
    assert "Dask clusters" in one_error_line(run, 2)


# ---- series without the label ------------------------------------------------------------------


def test_series_without_the_label_are_cluster_empty(prom: PrometheusServer,
                                                    data: ClusterDataset,
                                                    tmp_path: Path) -> None:
    out = tmp_path / "old"
    run = collector("export", *span(data.base + UNLABELLED_OFFSET), "--metrics", "total-mem",
                    "--out", str(out), "--prometheus", prom.url)
    assert run.code == 0, run.err
    assert json.loads((out / "export.json").read_text())["cluster"] == ""
    assert len(read_csv(out / "w-0.csv")) == len(SCOPE_TIMES)
    mixed = span(data.base + MIXED_OFFSET)
    line = one_error_line(collector("peaks", *mixed, "--prometheus", prom.url), 2)
    assert "'' (series without a dask_cluster label), 'ml-a'" in line
    run = collector("peaks", *mixed, "--cluster", "", "--json", "--prometheus", prom.url)
    assert run.code == 0, run.err
    assert [p["worker"] for p in json.loads(run.out)] == ["w-9"]


# ---- HA replicas ---------------------------------------------------------------------------


def test_ha_replicas_are_exported_once(prom: PrometheusServer, data: ClusterDataset,
                                       tmp_path: Path) -> None:
    out = tmp_path / "ha"
    at = data.base + HA_OFFSET
    run = collector("export", *span(at), "--metrics", "total-mem", "--out", str(out),
                    "--prometheus", prom.url)
    assert run.code == 0, run.err
    rows = read_csv(out / "w-0.csv")
    assert [(float(r["timestamp"]), float(r["total-mem"])) for r in rows] == [
        (round(t, 3), v) for t, v in ha_expected()]
    assert 60 < len(rows) < 2 * len(SCOPE_TIMES) - 40  # a whole, b in a's gap: not doubled
    assert [r["worker"] for r in read_csv(out / "workers.csv")] == ["w-0"]


def test_a_users_replica_label(prom: PrometheusServer, data: ClusterDataset,
                               tmp_path: Path) -> None:
    at = data.base + DC_OFFSET
    doubled = collector("export", *span(at), "--metrics", "total-mem", "--out",
                        str(tmp_path / "a"), "--prometheus", prom.url)
    assert doubled.code == 0, doubled.err  # two series of one GPU: the first one per time
    run = collector("export", *span(at), "--metrics", "total-mem", "--replica-label",
                    "dc_replica", "--out", str(tmp_path / "b"), "--prometheus", prom.url)
    assert run.code == 0, run.err
    rows = read_csv(tmp_path / "b" / "w-0.csv")
    # x and y disagree by 1 byte at every time: the first replica (x) wins
    assert [float(r["total-mem"]) for r in rows] == [scope_used(2, 0, t) for t in SCOPE_TIMES]
    record = json.loads((tmp_path / "b" / "export.json").read_text())
    assert record["replica_labels"] == ["prometheus_replica", "replica", "dc_replica"]
    bad = collector("export", *span(at), "--replica-label", "no-such", "--prometheus", prom.url)
    assert "--replica-label" in one_error_line(bad, 2)


# ---- a second export into the same folder ------------------------------------------------------


def test_a_re_export_leaves_only_its_own_files_where_plots_read(
        prom: PrometheusServer, data: ClusterDataset, tmp_path: Path) -> None:
    out = tmp_path / "again"
    base = ["export", *span(data.base), "--cluster", "ml-a", "--metrics", "total-mem",
            "mem-util", "compute-util", "--out", str(out), "--prometheus", prom.url]
    assert collector(*base).code == 0
    (out / "notes.txt").write_text("mine")
    run = collector(*base, "--workers", "w-1")
    assert run.code == 0, run.err
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["export.json", "jobs.csv", "notes.txt", "w-1.csv", "workers.csv", *SUMMARIES])
    assert json.loads((out / "export.json").read_text())["files"] == ["w-1.csv"]
    (out / "w-0.csv").write_text((out / "w-1.csv").read_text())  # a stray file: not read
    assert [t.worker for t in read_export(out)] == ["w-1"]


# ---- Monitor ---------------------------------------------------------------------------------


class Scheduler:
    """The scheduler preload's handlers that Monitor's results need, as a Dask client's
    ``client.scheduler`` serves them; ``cluster`` None: a preload without Handler.CLUSTER."""

    def __init__(self, session: dict[str, Any], url: str, cluster: str | None) -> None:
        self.session, self.url, self.cluster = session, url, cluster

    def __getattr__(self, name: str) -> Any:
        if name == Handler.MONITOR_STATUS:
            return lambda: {"session": self.session, "prometheus_url": self.url}
        if name == Handler.CLUSTER:
            return lambda: self.cluster
        raise AttributeError(name)


class Client:
    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def sync(self, func: Any, **kwargs: Any) -> Any:
        return func(**kwargs)


def monitor_of(prom: PrometheusServer, data: ClusterDataset, cluster: str | None,
               session_of: str = "ml-a", at: int = 0) -> Monitor:
    start, stop = SESSIONS[session_of]
    dags: dict[int, list[int]] = {}
    for job, dag in OUTCOMES.get(session_of, {}):  # what the scheduler records per session
        dags.setdefault(int(job), []).append(int(dag))
    session = {"id": 0, "start": data.base + at + start, "stop": data.base + at + stop,
               "metrics": ["total-mem"],
               "jobs": [{"job_id": job, "job_name": "", "first_dag": min(ids),
                         "last_dag": max(ids)} for job, ids in sorted(dags.items())]}
    return Monitor(Client(Scheduler(session, prom.url, cluster)), scrape_wait=0)


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_monitor_scopes_every_result_to_its_cluster(prom: PrometheusServer,
                                                    data: ClusterDataset, tmp_path: Path,
                                                    cluster: str) -> None:
    monitor = monitor_of(prom, data, cluster, cluster)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning about scoping, none of another cluster
        warnings.filterwarnings("ignore", "peak of .* does not date its peaks")  # synthetic
        result = monitor.to_csv(tmp_path / "out")
        peaks = monitor.peak_memory()
        jobs = monitor.successful_jobs()
    assert result.cluster == cluster and result.workers == ["w-0", "w-1"]
    assert json.loads((tmp_path / "out" / "export.json").read_text())["cluster"] == cluster
    start, stop = SESSIONS[cluster]
    assert len(read_csv(tmp_path / "out" / "w-0.csv")) == len(
        [t for t in SCOPE_TIMES if start <= t <= stop])
    k = CLUSTERS.index(cluster)
    assert peaks[0] == [75 if k == 0 else 56]  # 12 GiB or 9 GiB of 16 GiB
    assert jobs == ([[True, False]] if k == 0 else [[False], [True]])


def test_a_scheduler_that_does_not_tell_its_cluster_leaves_monitor_unscoped(
        prom: PrometheusServer, data: ClusterDataset, tmp_path: Path) -> None:
    monitor = monitor_of(prom, data, None, "ml-a", UNLABELLED_OFFSET)
    with pytest.warns(UserWarning, match="not scoped to one cluster"):
        result = monitor.to_csv(tmp_path / "out")
    assert result.cluster is None and result.workers == ["w-0"]
    assert json.loads((tmp_path / "out" / "export.json").read_text())["cluster"] is None
