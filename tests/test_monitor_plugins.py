"""A Monitor on a cluster started without dask-metrics registers its plugins: real
``dask scheduler`` and ``dask worker`` processes over the fake NVML, one worker with the
worker preload, one bare, one where dask-metrics is not installed."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
from distributed import Client

from dask_metrics import Monitor
from dask_metrics.collector.errors import MonitorError
from tests.helpers import clean_env, free_port, processes, scrape, values, wait_for

pytestmark = pytest.mark.integration
DASK = [sys.executable, "-m", "dask"]


def without_dask_metrics(folder: Path, env: dict[str, str]) -> dict[str, str]:
    """``env`` under which ``import dask_metrics`` fails, as where it is not installed (run
    outside the checkout, whose folder would come first on sys.path)."""
    stub = folder / "stub" / "dask_metrics"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ImportError(\"No module named 'dask_metrics'\")\n")
    return {**env, "PYTHONPATH": str(stub.parent)}


def scheduler(port: int, dashboard: int, env: dict[str, str]) -> tuple[list[str], dict, str]:
    return ([*DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port),
             "--dashboard-address", f"127.0.0.1:{dashboard}"], env, "/")


def worker(port: int, name: str, http: int, env: dict[str, str], *extra: str
           ) -> tuple[list[str], dict, str]:
    return ([*DASK, "worker", f"tcp://127.0.0.1:{port}", "--name", name, "--host",
             "127.0.0.1", "--nthreads", "1", "--no-nanny", "--dashboard-address",
             f"127.0.0.1:{http}", *extra], env, "/")


def test_plugins_reach_every_worker_once_and_name_those_without_the_package(
        fake_nvml, tmp_path, monkeypatch):
    monkeypatch.delenv("DASK_METRICS_PROMETHEUS_URL", raising=False)
    env = clean_env(fake_nvml.env)
    port, dashboard = free_port(), free_port()
    http = {name: free_port() for name in ("w-pre", "w-bare", "w-none")}
    lacking = without_dask_metrics(tmp_path, env)
    with processes(scheduler(port, dashboard, env),
                   worker(port, "w-pre", http["w-pre"], {**env, "CUDA_VISIBLE_DEVICES": "0"},
                          "--preload", "dask_metrics.worker"),
                   worker(port, "w-bare", http["w-bare"], {**env, "CUDA_VISIBLE_DEVICES": "1"}),
                   worker(port, "w-none", http["w-none"], lacking)), \
            Client(f"tcp://127.0.0.1:{port}", timeout=30) as client:
        client.wait_for_workers(3, timeout=60)
        with pytest.warns(UserWarning, match=r"1 worker\(s\) serve no GPU series, dask-metrics "
                          r"is not installed there: .*w-none.*pip install"):
            Monitor(client).attach(["mem-util"])

        def gpus(name: str) -> set[str]:
            s = scrape(f"http://127.0.0.1:{http[name]}/metrics")
            return {dict(k)["uuid"] for k in values(s, "dask_gpu_info")}

        wait_for(lambda: gpus("w-bare"), what="the bare worker's GPU from the plugin")
        assert gpus("w-bare") == {fake_nvml.uuid(1)}
        assert gpus("w-pre") == {fake_nvml.uuid(0)}  # the preload's, not sampled twice
        assert gpus("w-none") == set()
        sched = f"http://127.0.0.1:{dashboard}/metrics"
        known = wait_for(lambda: {dict(k)["worker"] for k in values(
            scrape(sched), "dask_job_worker_gpu_info")}, lambda w: w == {"w-pre", "w-bare"},
            what="the scheduler knowing both workers' GPUs")
        assert known == {"w-pre", "w-bare"}
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a second Monitor finds the plugins: no warning
            Monitor(client).attach(["mem-util"])
        plugins = client.run_on_scheduler(lambda dask_scheduler: (
            sorted(dask_scheduler.plugins), sorted(dask_scheduler.worker_plugins)))
    assert "dask-metrics-jobs" in plugins[0]
    assert [p for p in plugins[1] if "dask-metrics" in p] == ["dask-metrics-gpu"]


def test_a_scheduler_without_the_package_is_said_and_nothing_is_registered(
        fake_nvml, tmp_path):
    env = clean_env(fake_nvml.env)
    port, dashboard = free_port(), free_port()
    lacking = without_dask_metrics(tmp_path, env)
    with processes(scheduler(port, dashboard, lacking),
                   worker(port, "w0", free_port(), env)), \
            Client(f"tcp://127.0.0.1:{port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        with pytest.raises(MonitorError, match=r"not installed where the scheduler runs.*pip "
                           r"install.*--preload dask_metrics.scheduler") as caught:
            Monitor(client).start()
        assert "\n" not in str(caught.value)
        plugins = client.run_on_scheduler(lambda dask_scheduler: (
            sorted(dask_scheduler.plugins), sorted(dask_scheduler.worker_plugins)))
    assert not [p for p in plugins[0] + plugins[1] if "dask-metrics" in p]


def test_a_restarted_scheduler_gets_the_plugins_again_on_the_next_call(fake_nvml, tmp_path,
                                                                       monkeypatch):
    """The plugins live in the scheduler's memory: after a restart (its workers restarted
    too, as a supervisor does) the next Monitor call, here the original README's second
    snippet's kind, which only stops and exports, registers them again."""
    monkeypatch.delenv("DASK_METRICS_PROMETHEUS_URL", raising=False)
    env = clean_env(fake_nvml.env)
    port, dashboard, http = free_port(), free_port(), free_port()
    gpu0 = {**env, "CUDA_VISIBLE_DEVICES": "0"}

    def served() -> set[str]:
        s = scrape(f"http://127.0.0.1:{http}/metrics")
        return {dict(k)["uuid"] for k in values(s, "dask_gpu_info")}

    for life in range(2):
        with processes(scheduler(port, dashboard, env), worker(port, "w0", http, gpu0)), \
                Client(f"tcp://127.0.0.1:{port}", timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
            monitor = Monitor(client)
            if life == 0:
                assert monitor.start()["ok"]
            else:
                assert monitor.status()["running"] is False  # a new scheduler: no session
            assert wait_for(served, what=f"the GPU served in life {life}") == {
                fake_nvml.uuid(0)}
