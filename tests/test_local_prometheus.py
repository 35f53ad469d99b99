"""``--prometheus local`` and ``Monitor(client, prometheus="local")``: a real Prometheus
beside a real scheduler, for one machine with none configured."""

from __future__ import annotations

import csv
import fcntl
import socket
import sys

import dask.config
import pytest
from distributed import Client, LocalCluster

from dask_metrics import Monitor
from dask_metrics.collector.errors import MonitorError
from dask_metrics.exporter.scheduler.local_prometheus import (
    LocalPrometheus,
    LocalPrometheusError,
    default_folder,
)
from tests.helpers import clean_env, free_port, processes, wait_for


def test_a_port_in_use_a_locked_folder_and_no_scheduler_http_are_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        with pytest.raises(LocalPrometheusError, match=f"cannot listen on 127.0.0.1:{port}"):
            LocalPrometheus("http://127.0.0.1:1/t", tmp_path / "p", port).start()
    (tmp_path / "q").mkdir()
    with open(tmp_path / "q" / "dask-metrics.lock", "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # as another scheduler's local Prometheus holds it
        with pytest.raises(LocalPrometheusError, match="a Prometheus already runs on"):
            LocalPrometheus("http://127.0.0.1:1/t", tmp_path / "q").start()
    with pytest.raises(LocalPrometheusError, match="needs its HTTP server"):
        LocalPrometheus.of_cluster(None, "c", None, 0)
    assert default_folder("a/b c").name == "a_b_c"  # one folder, whatever the cluster's name


@pytest.mark.integration
def test_the_original_workflow_with_a_local_prometheus(tmp_path, monkeypatch):
    """A LocalCluster with no preload and no Prometheus: ``Monitor(client,
    prometheus="local")`` is all it takes; the data stays after the cluster stops."""
    monkeypatch.delenv("DASK_METRICS_PROMETHEUS_URL", raising=False)
    folder = tmp_path / "local-prom"
    settings = {"dask-metrics.exporter.simulate": 1, "dask-metrics.exporter.interval": 0.2,
                "dask-metrics.scheduler.local-prometheus-dir": str(folder)}
    with dask.config.set(settings), LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address="127.0.0.1:0",
            worker_dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        monitor = Monitor(client, prometheus="local")
        monitor.attach(["mem-util", "compute-util"])
        monitor.start()
        assert client.submit(sum, [1, 2]).result(timeout=30) == 3
        monitor.stop()
        monitor.to_csv(str(tmp_path / "out"))
        peaks = monitor.peak_memory()
        url = Monitor(client).status()["prometheus_url"]  # advertised to every Monitor
        assert url.startswith("http://127.0.0.1:")
        again = Monitor(client, prometheus="local")  # the one running is reused
        again.attach(["mem-util"])
        assert again.status()["prometheus_url"] == url
    assert len(peaks) == 2 and all(len(gpus) == 1 for gpus in peaks), peaks
    for worker in ("0", "1"):
        with open(tmp_path / "out" / f"{worker}.csv", newline="") as fh:
            assert list(csv.DictReader(fh)), worker
    assert (folder / "data").is_dir() and (folder / "prometheus.yml").exists()
    with pytest.raises(OSError):  # stopped with the scheduler: its port is closed
        socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=2)


@pytest.mark.integration
def test_the_preload_option_runs_it_and_a_second_for_the_same_folder_is_refused(
        tmp_path, monkeypatch):
    monkeypatch.delenv("DASK_METRICS_PROMETHEUS_URL", raising=False)
    folder = tmp_path / "local-prom"
    port, dashboard = free_port(), free_port()
    dask = [sys.executable, "-m", "dask"]
    env = clean_env()
    first = ([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
              "--dashboard-address", f"127.0.0.1:{dashboard}", "--preload",
              "dask_metrics.scheduler", "--prometheus", "local", "--local-prometheus-dir",
              str(folder)], env)
    worker = ([*dask, "worker", f"tcp://127.0.0.1:{port}", "--name", "w0", "--host",
               "127.0.0.1", "--nthreads", "1", "--no-nanny", "--dashboard-address",
               f"127.0.0.1:{free_port()}", "--preload", "dask_metrics.worker", "--simulate",
               "1"], env)
    second = ([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(free_port()),
               "--dashboard-address", f"127.0.0.1:{free_port()}", "--preload",
               "dask_metrics.scheduler", "--prometheus", "local", "--local-prometheus-dir",
               str(folder)], env)
    with processes(first, worker) as procs, \
            Client(f"tcp://127.0.0.1:{port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        url = wait_for(lambda: Monitor(client).status()["prometheus_url"],
                       what="the local Prometheus advertised")
        wait_for(lambda: scrape_up(url), what="the local Prometheus scraping the worker")
        with processes(second) as refused:
            refused[0].wait(60)
        assert refused[0].returncode == 2
        lines = [ln for ln in refused[0].output.splitlines() if "dask-metrics:" in ln]
        assert len(lines) == 1 and "a Prometheus already runs on" in lines[0], lines
        assert "Traceback" not in refused[0].output
    assert any("data in " + str(folder) in line for line in procs[0].output.splitlines())


def scrape_up(url: str) -> bool:
    import requests

    found = requests.get(f"{url}/api/v1/query", params={"query": "dask_gpu_up"},
                         timeout=5).json()["data"]["result"]
    return bool(found)


def test_monitor_says_a_missing_binary_in_one_line(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with dask.config.set({"dask-metrics.exporter.simulate": 1}), LocalCluster(
            n_workers=1, processes=False, dashboard_address="127.0.0.1:0",
            worker_dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        with pytest.raises(MonitorError, match="Prometheus is not installed") as caught:
            Monitor(client, prometheus="local").start()
        assert "\n" not in str(caught.value)


