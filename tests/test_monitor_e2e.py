"""End to end on the local stack (dask_metrics.demo.localstack, what the demo runs): a
scheduler with the preload, two workers each with a sidecar on the fake NVML driver, a real
Prometheus scraping every second, a scripted workload of two jobs with a memory spike
between scrapes, then the Monitor API, `collector monitor` and `collector watch`.
"""

from __future__ import annotations

import csv
import html
import json
import os
import time

import dask
import pytest
from distributed import Client, wait

from dask_metrics import Monitor
from dask_metrics.collector.model.timespec import parse_rfc3339
from dask_metrics.collector.monitor.monitor import MonitorError
from dask_metrics.demo.localstack import LocalStack, StackOptions, WorkerSpec
from tests.fake_nvml import FakeNVML, GiB
from tests.helpers import clean_env, collector_process, free_port, wait_for

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


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, fake_nvml_lib):
    """The local stack (what the demo runs) on the fake driver, gpu-a on GPU 0 and gpu-b on
    GPU 1, everything scraped; yields (stack, fake, tmp)."""
    tmp = tmp_path_factory.mktemp("e2e")
    fake = FakeNVML(tmp / "nvml_state", fake_nvml_lib, gpus=2)
    fake.gpus[0].gpu_util = 50
    fake.gpus[0].memory_used = fake.gpus[1].memory_used = 0
    fake.write()
    options = StackOptions(
        tmp / "stack", env=clean_env(fake.env), sample_interval=0.1,
        worker_specs=[WorkerSpec(name, gpus=fake.uuid(i)) for i, name in enumerate(WORKERS)])
    with LocalStack(options) as stack:
        yield stack, fake, tmp


@pytest.fixture(scope="module")
def session(cluster):
    """One monitor session: job 0 runs a DAG of slow tasks with a memory spike, job 1 a DAG
    that errs; a third client stops the session."""
    stack, fake, _ = cluster
    addr = stack.scheduler_address
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
        erred = time.time()  # the scheduler knew before the client did
    # a scrape that began after the error: it holds the erred DAG (one just before job-b,
    # idle too, would let the session stop before any scrape saw job-b at all)
    idle = wait_for(lambda: idle_scrape(stack, erred), timeout=30,
                    what="Prometheus to scrape the idle cluster")
    wait_for(lambda: stack.scraped_since("dask_gpu_up", idle), timeout=30,
             what="a GPU sample of each worker after it")  # so the CSVs end with idle rows
    with Client(addr) as c:
        stopped = Monitor(c).stop()["session"]
    return stopped


def idle_scrape(stack: LocalStack, since: float) -> float | None:
    """Time of a scheduler scrape after ``since`` that reported no unfinished DAG."""
    samples = [v for r in stack.query("dask_job_current_job[30s]") for v in r["values"]]
    return next((t for t, v in samples if t >= since and v == "-1"), None)


def test_monitor_outlives_its_client_and_exports_per_worker_csv(cluster, session):
    stack, fake, tmp = cluster
    out = tmp / "csv"
    with Client(stack.scheduler_address) as c:
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
        stack.query("dask_job_worker_tasks[3m]"))  # what the scheduler reported, if it fails
    assert "" in {r["worker_job"] for r in rows[-3:]}  # idle again at the end
    # the original contract: the folder's CSV files are one per worker, the rest in tables/
    assert sorted(p.name for p in out.glob("*.csv")) == ["gpu-a.csv", "gpu-b.csv"]
    with open(out / "tables" / "workers.csv", newline="") as fh:
        workers = list(csv.DictReader(fh))
    assert [(w["worker"], w["simulated"]) for w in workers] == [("gpu-a", "false"),
                                                                ("gpu-b", "false")]
    record = json.loads((out / "export.json").read_text())
    assert record["prometheus"] == stack.prometheus_url and record["simulated"] is False
    with open(out / "tables" / "jobs.csv", newline="") as fh:
        dags = list(csv.DictReader(fh))
    assert [(d["job"], d["job_name"], d["dag"], d["status"]) for d in dags] == [
        ("0", "job-a", "0", "finished"), ("1", "job-b", "0", "erred")], (
        session, stack.query("dask_job_dag_status[3m]"))  # what Prometheus holds, if it fails
    assert [d["client"].split("-")[:3] for d in dags] == [["Client", "job", "a"],
                                                         ["Client", "job", "b"]]  # Dask's ids
    for d in dags:  # seen within the session, the erred DAG after the first one
        assert 0 <= float(d["first_seen"]) <= float(d["last_seen"]) <= times[-1] + 2
    assert float(dags[1]["first_seen"]) >= float(dags[0]["first_seen"])


def test_the_report_against_an_earlier_one_and_in_a_notebook(cluster, session):
    """Monitor.report with a baseline (here the same session's earlier report: nothing
    changed), the result shown inline in Jupyter, and the Monitor's own view, also once its
    client is gone."""
    stack, _, tmp = cluster
    with Client(stack.scheduler_address) as c:
        monitor = Monitor(c)
        first = monitor.report(tmp / "report-1")
        again = monitor.report(tmp / "report-2", baseline=tmp / "report-1")
        with pytest.raises(ValueError, match=r"is not a dask-metrics report\.json"):
            monitor.report(tmp / "report-3", baseline={"jobs": []})
        view = monitor._repr_html_()
    assert not (tmp / "report-3").exists()
    assert [j["job_name"] for j in first.report["jobs"]] == ["job-a", "job-b"]
    base = again.report["baseline"]
    assert base["source"].startswith(str(tmp / "report-1" / "report.json"))
    assert [(j["job_name"], j["wall_seconds"]["change_percent"]) for j in base["jobs"]] == [
        ("job-a", 0.0), ("job-b", 0.0)]
    assert base["only_now"] == base["only_before"] == []
    frame = again._repr_html_()
    assert frame.startswith("<iframe sandbox srcdoc=")
    assert html.unescape(frame.split('srcdoc="', 1)[1].split('"', 1)[0]) == \
        (tmp / "report-2" / "report.html").read_text()
    assert f"{session['id']} stopped since" in view and "job-a" not in view
    assert "next start records" in view
    assert "unknown: the scheduler did not answer" in monitor._repr_html_()  # client closed


def test_monitor_command_line(cluster, session):
    addr = cluster[0].scheduler_address
    status = collector_process("monitor", "status", "--scheduler", addr)
    assert status.returncode == 0, status.stderr
    assert f"monitor session {session['id']}:" in status.stdout and "idle" in status.stdout
    refused = collector_process("monitor", "stop", "--scheduler", addr)
    assert refused.returncode == 1 and "no monitor session is running" in refused.stderr
    started = collector_process("monitor", "start", "--scheduler", addr, "--metrics", "power",
                                "--json")
    assert started.returncode == 0, started.stderr
    reply = json.loads(started.stdout)
    assert reply["ok"] and list(reply["session"]["metrics"]) == ["power"]
    again = collector_process("monitor", "start", "--scheduler", addr)
    assert again.returncode == 1 and "collector: error:" in again.stderr
    stopped = collector_process("monitor", "stop", "--scheduler", addr, "--force")
    assert stopped.returncode == 0 and "stopped monitor session" in stopped.stdout
    bad = collector_process("monitor", "start", "--scheduler", addr, "--metrics", "watts")
    assert bad.returncode == 2 and "unknown metric 'watts'" in bad.stderr


def test_watch_exports_each_session_once_and_retries_when_prometheus_is_down(cluster, session):
    stack, _, tmp = cluster
    addr = stack.scheduler_address
    out = tmp / "watch"
    down = collector_process("watch", "--once", "--scheduler", addr, "--out", str(out),
                             "--prometheus", f"http://127.0.0.1:{free_port()}", "--retries", "0")
    assert down.returncode == 1 and "retrying" not in down.stderr  # --once: one try
    assert "collector: error: cannot reach Prometheus" in down.stderr
    assert not [p for p in out.iterdir() if not p.name.startswith(".")]
    first = collector_process("watch", "--once", "--scheduler", addr, "--out", str(out),
                              "--prometheus", stack.prometheus_url)
    assert first.returncode == 0, first.stderr
    folders = sorted(p.name for p in out.iterdir() if p.is_dir() and p.name.startswith("session"))
    assert folders and folders[0].startswith(f"session-{session['id']:04d}-")
    assert (out / folders[0] / "gpu-a.csv").is_file()
    stamp = os.stat(out / folders[0] / "gpu-a.csv").st_mtime_ns
    second = collector_process("watch", "--once", "--scheduler", addr, "--out", str(out),
                               "--prometheus", stack.prometheus_url)
    assert second.returncode == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("session")) == folders
    assert os.stat(out / folders[0] / "gpu-a.csv").st_mtime_ns == stamp


def test_monitor_without_the_scheduler_preload_adds_its_plugins(monkeypatch):
    """A cluster started without dask-metrics: the Monitor registers the plugins and the
    session runs (no Prometheus configured: nothing to wait for)."""
    from distributed import LocalCluster

    monkeypatch.delenv("DASK_METRICS_PROMETHEUS_URL", raising=False)
    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as lc, \
            Client(lc) as client:
        assert Monitor(client).start()["ok"]
        assert Monitor(client).status()["running"]
        assert "dask-metrics-jobs" in lc.scheduler.plugins


def test_a_session_shorter_than_a_scrape_still_has_its_peaks(cluster, session):
    """Start and stop within one scrape interval: no GPU sample falls inside, so the peak
    is what the peak windows over the session say, at most, with a warning — it was 'no GPU
    series … is Prometheus scraping the GPU exporters?'. Each sidecar is scraped at its own
    offset in the second, so a short session may still hold one's sample (then that peak is
    exact and dated inside); sessions are tried until one holds none. Runs after the other
    tests of the session, as it starts later ones."""
    stack, _, tmp = cluster
    with Client(stack.scheduler_address) as c:
        for _ in range(10):
            monitor = Monitor(c)
            started = monitor.start()["session"]
            stopped = monitor.stop()["session"]
            run = collector_process("peaks", "--since", "monitor", "--json",
                                    "--prometheus", stack.prometheus_url)
            assert run.returncode == 0, run.stderr
            listed = json.loads(run.stdout)
            assert len(listed) == 2  # a peak per worker and GPU, bound or not
            for p in listed:
                if p["exact"]:
                    assert started["start"] <= parse_rfc3339(p["time"]) <= stopped["stop"], (
                        started, stopped, listed, run.stderr,
                        stack.query("dask_job_monitor_start_timestamp_seconds[10s]"),
                        stack.query("dask_job_monitor_stop_timestamp_seconds[10s]"))
            if not any(p["exact"] for p in listed):
                break
        else:
            pytest.fail("10 sessions in a row held a GPU sample: not shorter than a scrape")
        assert "at most" in run.stderr
        with pytest.warns(UserWarning, match="at most this, what the peak windows"):
            peaks = monitor.peak_memory()  # no sample inside: the window's bound, said so
        assert all(isinstance(v, int) for p in peaks for v in p)
        # the command line finds the same session and the same peaks (it said "no GPU
        # series" where Monitor answered)
        assert [[round(p["peak_percent"])] for p in listed] == peaks
        (tmp / "afile").write_text("not a folder\n")
        with pytest.raises(MonitorError) as caught:
            monitor.to_csv(tmp / "afile" / "sub")
    assert str(caught.value) == f"cannot write {tmp / 'afile' / 'sub'}: Not a directory"
