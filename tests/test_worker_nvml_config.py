"""The worker preload follows Dask's ``distributed.diagnostics.nvml``: False keeps NVML out
of the worker (the driver library is never loaded) unless dask-metrics' ``nvml`` option asks
for it. Real scheduler and worker processes, real pynvml over the fake driver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from distributed import Client

from tests.fake_nvml import LIBRARY_NAME
from tests.helpers import scheduler_and_worker, scrape, values, wait_for

pytestmark = pytest.mark.integration
DASK_NVML_OFF = {"DASK_DISTRIBUTED__DIAGNOSTICS__NVML": "False"}


def start_cluster(env: dict[str, str], *worker_args: str):
    return scheduler_and_worker(env, "w1", "--interval", "0.1", *worker_args)


def identity(client: Client) -> dict:
    return json.loads(json.dumps(client.run_on_scheduler(
        lambda dask_scheduler: next(ws.extra.get("dask_metrics")
                                    for ws in dask_scheduler.workers.values()))))


def nvml_loaded(pid: int, fake_lib: Path) -> bool:
    """Whether the process has mapped the (fake) NVML library: pynvml loads it on init."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return str(fake_lib / LIBRARY_NAME) in maps


def test_dask_nvml_false_keeps_nvml_out_and_says_how_to_force_it(fake_nvml, tmp_path):
    info_file = tmp_path / "worker.json"
    env = {**fake_nvml.env, **DASK_NVML_OFF}
    cluster, sched_port, worker_http = start_cluster(env, "--worker-info-file", str(info_file))
    with cluster as procs, Client(f"tcp://127.0.0.1:{sched_port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        assert client.submit(sum, [1, 2]).result(timeout=30) == 3
        published = identity(client)
        assert published["gpus"] == [] and published["name"] == "w1"
        assert json.loads(info_file.read_text())["pid"] == published["pid"]
        s = scrape(f"http://127.0.0.1:{worker_http}/metrics")
        assert not [name for name in s.samples if name.startswith("dask_gpu_")]
        assert not nvml_loaded(published["pid"], fake_nvml.lib_dir)
    lines = [line for line in procs[1].output.splitlines() if "NVML not started" in line]
    assert len(lines) == 1, procs[1].output
    assert "distributed.diagnostics.nvml is False" in lines[0]
    assert "--nvml true" in lines[0] and "DASK_METRICS_EXPORTER_NVML=true" in lines[0]
    assert "nvml: true" in lines[0]


@pytest.mark.parametrize("force", [
    (("--nvml", "true"), {}),
    ((), {"DASK_METRICS_EXPORTER_NVML": "true"}),
    ((), {"DASK_DASK_METRICS__EXPORTER__NVML": "True"}),
], ids=["option", "environment", "dask-config"])
def test_nvml_true_starts_it_anyway(fake_nvml, force):
    args, extra_env = force
    env = {**fake_nvml.env, **DASK_NVML_OFF, **extra_env}
    cluster, sched_port, worker_http = start_cluster(env, *args)
    with cluster as procs, Client(f"tcp://127.0.0.1:{sched_port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        published = identity(client)
        assert [g["uuid"] for g in published["gpus"]] == [fake_nvml.uuid(0), fake_nvml.uuid(1)]
        wait_for(lambda: len(values(scrape(f"http://127.0.0.1:{worker_http}/metrics"),
                                    "dask_gpu_up", worker="w1")) == 2,
                 what="the worker's GPU series")
        assert nvml_loaded(published["pid"], fake_nvml.lib_dir)
    assert "NVML not started" not in procs[1].output


def test_nvml_false_keeps_it_out_even_when_dask_allows_it(fake_nvml):
    cluster, sched_port, worker_http = start_cluster(fake_nvml.env, "--nvml", "false")
    with cluster as procs, Client(f"tcp://127.0.0.1:{sched_port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        assert identity(client)["gpus"] == []
        s = scrape(f"http://127.0.0.1:{worker_http}/metrics")
        assert not [name for name in s.samples if name.startswith("dask_gpu_")]
    assert "NVML not started (dask-metrics.exporter nvml is false)" in procs[1].output
