"""docs/exporter.md's one-machine recipe without a GPU: a real worker with the worker preload
writing its worker-info file (no NVML here, so it lists no GPU) and a real sidecar with
``--simulate 2`` reading it. The sidecar's --simulate wins over the file's empty GPU list; the
file still names the worker and the pid its simulated GPUs mirror."""

from __future__ import annotations

import json
import sys

import pytest
from distributed import Client

from tests.helpers import (
    free_port,
    no_nvml_env,
    processes,
    scrape,
    sidecar,
    values,
    wait_for,
)

DASK = [sys.executable, "-m", "dask"]
pytestmark = pytest.mark.integration
NO_GPU_ENV = no_nvml_env()


@pytest.mark.parametrize("worker_nvml", [[], ["--nvml", "false"]], ids=["plain", "nvml-false"])
def test_sidecar_simulate_wins_over_the_workers_empty_gpu_list(tmp_path, worker_nvml):
    info_file = tmp_path / "w1.json"
    sched_port = free_port()
    scheduler = [*DASK, "scheduler", "--host", "127.0.0.1", "--port", str(sched_port),
                 "--dashboard-address", f"127.0.0.1:{free_port()}",
                 "--preload", "dask_metrics.scheduler"]
    worker = [*DASK, "worker", f"tcp://127.0.0.1:{sched_port}", "--name", "w1",
              "--host", "127.0.0.1", "--nthreads", "1", "--no-nanny",
              "--dashboard-address", f"127.0.0.1:{free_port()}",
              "--preload", "dask_metrics.worker", "--serve-metrics", "false",
              "--worker-info-file", str(info_file), *worker_nvml]
    with processes((scheduler, NO_GPU_ENV), (worker, NO_GPU_ENV)), \
            Client(f"tcp://127.0.0.1:{sched_port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        written = wait_for(lambda: json.loads(info_file.read_text()), what="the worker-info file")
        assert written["gpus"] == []  # no GPU on this machine: the worker found none
        worker_pid = written["pid"]
        with sidecar("--simulate", "2", "--worker-info-file", str(info_file),
                     "--interval", "0.1", env=NO_GPU_ENV) as base:
            s = wait_for(lambda: (s := scrape(base + "/metrics"))
                         and values(s, "dask_gpu_process_memory_used_bytes") and s,
                         what="the simulated GPUs attached to the worker")
    info = values(s, "dask_gpu_info", worker="w1", simulated="true")
    assert sorted(dict(k)["gpu"] for k in info) == ["0", "1"]
    pids = {dict(k)["pid"] for k in values(s, "dask_gpu_process_memory_used_bytes")}
    assert pids == {str(worker_pid)}  # they mirror the worker's process
    assert len(values(s, "dask_gpu_up", worker="w1")) == 2
