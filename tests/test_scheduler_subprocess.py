"""``dask scheduler --preload dask_metrics.scheduler`` with ``dask worker`` processes, as deployed:
worker clients live in other processes, and a worker can be killed for real."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from distributed import Client, worker_client

from tests.helpers import Scrape, free_port, processes, scrape, wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS_URL = "http://prometheus.example:9090"
FINISHED = 2.0


@dataclass
class DaskProcesses:
    address: str
    dashboard_port: int
    scheduler: subprocess.Popen[bytes]
    workers: dict[str, subprocess.Popen[bytes]]
    log_dir: Path

    def metrics(self) -> Scrape:
        """The scheduler's /metrics, dask_cluster checked on every series and taken off."""
        return scrape(self.dashboard_port).of_cluster()

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.fixture(scope="module")
def dask_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaskProcesses]:
    log_dir = tmp_path_factory.mktemp("dask")
    port, dashboard = free_port(), free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION": "inf",  # spread tasks, no queuing
    }
    dask_cli = [sys.executable, "-m", "dask"]
    scheduler = _start(
        [*dask_cli, "scheduler", "--host", "127.0.0.1", "--port", str(port),
         "--dashboard-address", f"127.0.0.1:{dashboard}", "--preload", "dask_metrics.scheduler",
         "--job-mode", "client", "--prometheus-url", PROMETHEUS_URL],
        log_dir / "scheduler.log", env,
    )  # fmt: skip
    address = f"tcp://127.0.0.1:{port}"
    worker = [*dask_cli, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard"]
    workers = {
        name: _start([*worker, "--name", name], log_dir / f"{name}.log", env)
        for name in ("w1", "w2")
    }
    procs = DaskProcesses(address, dashboard, scheduler, workers, log_dir)
    try:
        with Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        yield procs
    finally:
        for proc in [*workers.values(), scheduler]:  # workers first: a clean goodbye
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    scheduler_log = procs.log("scheduler")
    assert "Run preload teardown: dask_metrics.scheduler" in scheduler_log
    assert "hook failed" not in scheduler_log


def dags_of(s: Scrape, job_name: str) -> dict[str, tuple[str, float]]:
    """dag_id -> (client, status) of the job called ``job_name``."""
    info = s.rows("dask_job_dag_info", "job_id", "dag_id", "job_name", "client")
    status = s.rows("dask_job_dag_status", "job_id", "dag_id")
    return {d: (c, status[j, d]) for (j, d, name, c) in info if name == job_name}


def spawn(n: int) -> int:
    with worker_client() as client:
        return sum(client.gather(client.map(lambda x: x + 1, range(n), pure=False)))


def slow_pid(i: int) -> int:
    time.sleep(0.5)
    return os.getpid()


def test_worker_clients_in_worker_processes_join_the_job_of_their_task(dask_processes):
    with Client(dask_processes.address, name="alice") as alice:
        assert alice.sync(alice.scheduler.dask_metrics_prometheus_url) == PROMETHEUS_URL
        with Client(dask_processes.address, name="bob") as bob:
            assert alice.submit(spawn, 3, pure=False).result() == 6
            assert bob.submit(spawn, 2, pure=False).result() == 3
        s = wait_for(dask_processes.metrics, lambda s: s.value("dask_job_current_job") == -1)
    alice_dags, bob_dags = dags_of(s, "alice"), dags_of(s, "bob")
    assert sorted(alice_dags) == ["0", "1"] and sorted(bob_dags) == ["0", "1"]
    assert alice_dags["0"] == (alice.id, FINISHED)
    assert alice_dags["1"][0].startswith("Client-worker-")  # submitted by a worker's client
    assert bob_dags["1"][0].startswith("Client-worker-")
    assert {status for _, status in [*alice_dags.values(), *bob_dags.values()]} == {FINISHED}


def test_a_killed_worker_loses_its_series_and_the_dag_finishes_elsewhere(dask_processes):
    with Client(dask_processes.address, name="killer") as client:
        futures = client.map(slow_pid, range(12), pure=False)

        def busy_workers(s: Scrape) -> set[str]:
            return {w for (w,) in s.rows("dask_job_worker_tasks", "worker")}

        wait_for(dask_processes.metrics, lambda s: busy_workers(s) == {"w1", "w2"})
        victim = dask_processes.workers["w2"]
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        s = wait_for(dask_processes.metrics, lambda s: busy_workers(s) == {"w1"}, timeout=30)
        assert sum(s["dask_job_worker_tasks"].values()) >= 1
        pids = client.gather(futures)
        assert victim.pid not in pids and len(pids) == 12
        s = wait_for(dask_processes.metrics, lambda s: not s["dask_job_worker_tasks"])
    assert {status for _, status in dags_of(s, "killer").values()} == {FINISHED}
    assert s.value("dask_job_plugin_errors_total", hook="transition") == 0
    assert s.value("dask_job_plugin_errors_total", hook="remove_worker") == 0


@pytest.mark.integration
def test_rmm_pool_and_use_come_from_the_heartbeats_of_workers_that_have_rmm(tmp_path):
    """A worker that imports rmm (the stand-in) sends its pool and bytes in use with every
    heartbeat: the scheduler's /metrics follows them; a worker without rmm has no series."""
    state = tmp_path / "rmm.json"
    state.write_text(json.dumps({"pool": 16 * 2**30, "used": 3 * 2**30}))
    port, dashboard = free_port(), free_port()
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    with_rmm = {**base, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "standin_rmm"),
                                                       str(ROOT)]),
                "STANDIN_RMM_STATE": str(state)}
    dask_cli = [sys.executable, "-m", "dask"]
    address = f"tcp://127.0.0.1:{port}"
    worker = [*dask_cli, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard"]
    with processes(
        ([*dask_cli, "scheduler", "--host", "127.0.0.1", "--port", str(port),
          "--dashboard-address", f"127.0.0.1:{dashboard}", "--preload",
          "dask_metrics.scheduler"], base),
        ([*worker, "--name", "rapids"], with_rmm),
        ([*worker, "--name", "plain"], base),
    ):
        def rmm(s: Scrape) -> dict[str, tuple[float, float]]:
            return {w: (s.value("dask_job_worker_rmm_used_bytes", worker=w),
                        s.value("dask_job_worker_rmm_pool_bytes", worker=w))
                    for (w,) in s.rows("dask_job_worker_rmm_pool_bytes", "worker")}

        def page() -> Scrape:
            return scrape(dashboard).of_cluster()

        s = wait_for(page, lambda s: len(s.rows("dask_job_worker_threads", "worker")) == 2
                     and rmm(s), timeout=60, what="both workers, one with RMM")
        assert rmm(s) == {"rapids": (3 * 2**30, 16 * 2**30)}
        state.write_text(json.dumps({"pool": 16 * 2**30, "used": 5 * 2**30}))
        wait_for(lambda: rmm(page()), lambda r: r == {"rapids": (5 * 2**30, 16 * 2**30)},
                 what="the next heartbeat's RMM use")
        # an untracked pool: Dask sees no bytes in use, only the pool
        state.write_text(json.dumps({"pool": 16 * 2**30, "used": 5 * 2**30, "tracked": False}))
        wait_for(lambda: rmm(page()), lambda r: r == {"rapids": (0, 16 * 2**30)},
                 what="an untracked pool")
