"""End to end: a scheduler with the preload, two workers each with a sidecar on the fake
NVML driver, a real Prometheus scraping every second, a scripted workload of two jobs with a
memory spike between scrapes, then the Monitor API, `collector monitor` and `collector watch`.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import urllib.parse

import dask
import pytest
from distributed import Client, wait

from dask_metrics.collector import Monitor
from tests.exporter_helpers import free_port, processes, scrape, values, wait_for
from tests.fake_nvml import FakeNVML, GiB
from tests.prometheus_helpers import run_prometheus

pytestmark = pytest.mark.integration
WORKERS = ("gpu-a", "gpu-b")
SPIKE_START, SPIKE_END = 2.0, 2.3  # seconds after the session starts: between two scrapes


def slow(i: int) -> int:
    time.sleep(1.5)
    return i


def pinned_tasks() -> list:
    """Four slow tasks, two on each worker, as one graph (one DAG): the CSV checks below
    need work on both workers, whatever the scheduler would have decided."""
    tasks = []
    for i in range(4):
        with dask.annotate(workers=[WORKERS[i % 2]], allow_other_workers=False):
            tasks.append(dask.delayed(slow, pure=False)(i))
    return tasks


def fail() -> None:
    raise RuntimeError("this DAG errs on purpose")


def collector(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dask_metrics.collector", *args],
                          capture_output=True,
                          text=True, timeout=120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, fake_nvml_lib):
    """Everything running, Prometheus scraping it; yields (addr, prometheus, fake, tmp)."""
    tmp = tmp_path_factory.mktemp("e2e")
    fake = FakeNVML(tmp / "nvml_state", fake_nvml_lib, gpus=2)
    fake.gpus[0].gpu_util = 50
    fake.gpus[0].memory_used = fake.gpus[1].memory_used = 0
    fake.write()
    env = {k: v for k, v in fake.env.items() if k not in ("CUDA_VISIBLE_DEVICES",
                                                          "DASK_WORKER_NAME")}
    sched_port, dash_port = free_port(), free_port()
    sidecar_ports = [free_port() for _ in WORKERS]
    scrape_configs = [
        {"job_name": "dask-gpu", "static_configs": [
            {"targets": [f"127.0.0.1:{p}" for p in sidecar_ports]}]},
        {"job_name": "dask-scheduler", "static_configs": [
            {"targets": [f"127.0.0.1:{dash_port}"]}]},
    ]
    with run_prometheus(tmp / "prometheus", scrape_configs=scrape_configs) as prom:
        dask = [sys.executable, "-m", "dask"]
        addr = f"tcp://127.0.0.1:{sched_port}"
        cmds = [([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(sched_port),
                  "--dashboard-address", f"127.0.0.1:{dash_port}",
                  "--preload", "dask_metrics.scheduler", "--prometheus-url", prom.url], env)]
        for i, (name, port) in enumerate(zip(WORKERS, sidecar_ports, strict=True)):
            info = str(tmp / f"{name}.json")
            worker_env = {**env, "CUDA_VISIBLE_DEVICES": fake.uuid(i)}
            cmds.append(([*dask, "worker", addr, "--name", name, "--nthreads", "1",
                          "--no-nanny", "--host", "127.0.0.1",
                          "--dashboard-address", f"127.0.0.1:{free_port()}",
                          "--preload", "dask_metrics.worker", "--worker-info-file", info,
                          "--serve-metrics", "false"], worker_env))
            cmds.append(([sys.executable, "-m", "dask_metrics.exporter",
                          "--listen", f"127.0.0.1:{port}",
                          "--worker-info-file", info, "--interval", "0.1"], env))
        with processes(*cmds):
            with Client(addr, timeout=60) as client:
                client.wait_for_workers(len(WORKERS), timeout=60)
            for port, name in zip(sidecar_ports, WORKERS, strict=True):
                wait_for(lambda p=port, n=name: values(
                    scrape(f"http://127.0.0.1:{p}/metrics"), "dask_gpu_up", worker=n),
                    timeout=60, what=f"sidecar of {name} reading its worker-info file")
            # Prometheus hands new targets to its scrapers only every 5 s: without this wait
            # a session on a fast start could begin before the first scrape (seen in CI).
            wait_for(lambda: len(query(prom, "up == 1")) == len(WORKERS) + 1, timeout=60,
                     what="Prometheus scraping both sidecars and the scheduler")
            yield addr, prom, fake, tmp


@pytest.fixture(scope="module")
def session(cluster):
    """One monitor session: job 0 runs a DAG of slow tasks with a memory spike, job 1 a DAG
    that errs; a third client stops the session."""
    addr, prom, fake, _ = cluster
    with Client(addr, name="job-a") as a:
        monitor = Monitor(a).attach(["total-mem", "mem-util", "compute-util", "peak-mem"])
        started = monitor.start()["session"]
        fake.epoch = started["start"]
        fake.at(SPIKE_START, 0, memory_used=60 * GiB).at(SPIKE_END, 0, memory_used=1 * GiB)
        fake.write()
        assert a.compute(pinned_tasks(), sync=True) == [0, 1, 2, 3]
    with Client(addr, name="job-b") as b:
        future = b.submit(fail)
        wait(future)
        assert future.status == "error"
    idle = wait_for(lambda: idle_scrape(prom, time.time() - 0.2), timeout=30,
                    what="Prometheus to scrape the idle cluster")
    wait_for(lambda: newest(prom, "dask_gpu_up") > idle, timeout=30,
             what="a GPU sample after it")  # so that the CSVs end with idle rows
    with Client(addr) as c:
        stopped = Monitor(c).stop()["session"]
    return stopped


def query(prom, expr: str) -> list[dict]:
    status, body = prom.get("/api/v1/query?query=" + urllib.parse.quote(expr))
    assert status == 200, body
    return json.loads(body)["data"]["result"]


def idle_scrape(prom, since: float) -> float | None:
    """Time of a scheduler scrape after ``since`` that reported no unfinished DAG."""
    samples = [v for r in query(prom, "dask_job_current_job[30s]") for v in r["values"]]
    return next((t for t, v in samples if t >= since and v == "-1"), None)


def newest(prom, metric: str) -> float:
    """Time of the oldest of the newest samples of ``metric`` over all its series."""
    return min(float(r["value"][1]) for r in query(prom, f"timestamp({metric})"))


def test_monitor_outlives_its_client_and_exports_per_worker_csv(cluster, session):
    addr, prom, fake, tmp = cluster
    out = tmp / "csv"
    with Client(addr) as c:
        monitor = Monitor(c)
        result = monitor.to_csv(out)
        peaks = monitor.peak_memory()
        jobs = monitor.successful_jobs()
    assert list(session["metrics"]) == ["total-mem", "mem-util", "compute-util", "peak-mem"]
    assert peaks == [[75], [0]]  # 60 of 80 GiB on gpu-a's GPU, though no scrape saw it used
    assert jobs == [[True], [False]]
    assert sorted(result.files) == ["gpu-a.csv", "gpu-b.csv"]
    with open(out / "gpu-a.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:9] == ["timestamp", "time", "worker", "gpu", "uuid", "job", "dag",
                                 "worker_job", "worker_dag"]
    assert list(rows[0])[9:] == ["total-mem", "mem-util", "compute-util", "peak-mem"]
    assert {r["uuid"] for r in rows} == {fake.uuid(0)}
    times = [float(r["timestamp"]) for r in rows]
    assert times == sorted(times) and times[0] >= 0  # seconds since the session started
    assert times[-1] <= session["stop"] - session["start"] + 0.001
    assert {r["compute-util"] for r in rows} == {"50"}
    assert max(float(r["peak-mem"]) for r in rows) == 60 * GiB
    assert {("0", "0")} <= {(r["worker_job"], r["worker_dag"]) for r in rows}, (
        [(r["time"], r["job"], r["dag"], r["worker_job"]) for r in rows],
        query(prom, "dask_job_worker_tasks[3m]"))  # what the scheduler reported, if it fails
    assert "" in {r["worker_job"] for r in rows[-3:]}  # idle again at the end
    workers = (out / "workers.csv").read_text()
    assert "gpu-a" in workers and "gpu-b" in workers
    assert prom.url in (out / "export.json").read_text()


def test_monitor_command_line(cluster, session):
    addr = cluster[0]
    status = collector("monitor", "status", "--scheduler", addr)
    assert status.returncode == 0, status.stderr
    assert f"monitor session {session['id']}:" in status.stdout and "idle" in status.stdout
    refused = collector("monitor", "stop", "--scheduler", addr)
    assert refused.returncode == 1 and "no monitor session is running" in refused.stderr
    started = collector("monitor", "start", "--scheduler", addr, "--metrics", "power", "--json")
    assert started.returncode == 0, started.stderr
    reply = json.loads(started.stdout)
    assert reply["ok"] and list(reply["session"]["metrics"]) == ["power"]
    again = collector("monitor", "start", "--scheduler", addr)
    assert again.returncode == 1 and "collector: error:" in again.stderr
    stopped = collector("monitor", "stop", "--scheduler", addr, "--force")
    assert stopped.returncode == 0 and "stopped monitor session" in stopped.stdout
    bad = collector("monitor", "start", "--scheduler", addr, "--metrics", "watts")
    assert bad.returncode == 2 and "unknown metric 'watts'" in bad.stderr


def test_watch_exports_each_session_once_and_retries_when_prometheus_is_down(cluster, session):
    addr, prom, _, tmp = cluster
    out = tmp / "watch"
    down = collector("watch", "--once", "--scheduler", addr, "--out", str(out),
                     "--prometheus", f"http://127.0.0.1:{free_port()}", "--retries", "0")
    assert down.returncode == 1 and "retrying" in down.stderr
    assert not [p for p in out.iterdir() if not p.name.startswith(".")]
    first = collector("watch", "--once", "--scheduler", addr, "--out", str(out),
                      "--prometheus", prom.url)
    assert first.returncode == 0, first.stderr
    folders = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name.startswith("session"))
    assert folders and folders[0].startswith(f"session-{session['id']:04d}-")
    assert (out / folders[0] / "gpu-a.csv").is_file()
    stamp = os.stat(out / folders[0] / "gpu-a.csv").st_mtime_ns
    second = collector("watch", "--once", "--scheduler", addr, "--out", str(out),
                       "--prometheus", prom.url)
    assert second.returncode == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("session")) == folders
    assert os.stat(out / folders[0] / "gpu-a.csv").st_mtime_ns == stamp


def test_monitor_without_the_scheduler_preload():
    from distributed import LocalCluster

    from dask_metrics.collector.monitor import MonitorError

    refusal = pytest.raises(MonitorError, match=r"--preload dask_metrics\.scheduler")
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc, \
            Client(lc) as client, refusal:
        Monitor(client).start()
