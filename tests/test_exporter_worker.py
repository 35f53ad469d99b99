"""``dask worker --preload dask_metrics.worker``: real schedulers and workers, real pynvml over
the fake driver; series on the worker's own /metrics, identity at the scheduler and in the
worker-info file, and a worker that starts fine without any NVML."""

from __future__ import annotations

import json
import time

import pytest
from distributed import Client, LocalCluster
from prometheus_client import REGISTRY

from tests.fake_nvml import FakeGPU, GiB
from tests.helpers import (
    no_nvml_env,
    scheduler_and_worker,
    scrape,
    value,
    values,
    wait_for,
)

pytestmark = pytest.mark.integration


def start_cluster(env: dict[str, str], *worker_args: str):
    return scheduler_and_worker(env, "gpu-worker-1", *worker_args)


def identities(client: Client) -> dict:
    """What the scheduler received, lists as JSON has them (msgpack gives tuples)."""
    return json.loads(json.dumps(client.run_on_scheduler(
        lambda dask_scheduler: {ws.name: ws.extra.get("dask_metrics")
                                for ws in dask_scheduler.workers.values()})))


def test_worker_preload_serves_its_gpus_and_publishes_its_identity(fake_nvml, tmp_path):
    fake_nvml.gpus[1].memory_used = 7 * GiB
    fake_nvml.write()
    info_file = tmp_path / "worker.json"
    env = {**fake_nvml.env, "CUDA_VISIBLE_DEVICES": fake_nvml.uuid(1)}
    cluster, sched_port, worker_http = start_cluster(
        env, "--interval", "0.2", "--worker-info-file", str(info_file))
    with cluster, Client(f"tcp://127.0.0.1:{sched_port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        assert client.submit(sum, [1, 2]).result(timeout=30) == 3
        labels = {"worker": "gpu-worker-1", "gpu": "0", "uuid": fake_nvml.uuid(1)}
        s = wait_for(lambda: (s := scrape(f"http://127.0.0.1:{worker_http}/metrics"))
                     and values(s, "dask_gpu_up", **labels) and s, what="worker GPU series")
        assert value(s, "dask_gpu_memory_used_bytes", **labels) == 7 * GiB
        assert len(values(s, "dask_gpu_info")) == 1  # only the worker's GPU
        pid = identities(client)["gpu-worker-1"]["pid"]
        assert identities(client)["gpu-worker-1"]["gpus"] == [
            {"index": 0, "uuid": fake_nvml.uuid(1)}]
        written = json.loads(info_file.read_text())
        assert written["name"] == "gpu-worker-1" and written["pid"] == pid
        assert written["gpus"] == [{"index": 0, "uuid": fake_nvml.uuid(1)}]
        assert written["address"].startswith("tcp://127.0.0.1:")


def test_a_rotated_device_list_is_the_first_devices_worker(fake_nvml):
    """dask-cuda's second worker of four: ``CUDA_VISIBLE_DEVICES=1,2,3,0`` and dask-cuda's
    own preload argument beside ours; the worker owns GPU 1 alone."""
    fake_nvml.gpus.extend(FakeGPU() for _ in range(2))
    fake_nvml.write()
    env = {**fake_nvml.env, "CUDA_VISIBLE_DEVICES": "1,2,3,0"}
    cluster, sched_port, worker_http = start_cluster(env, "--interval", "0.2",
                                                     "--create-cuda-context")
    with cluster, Client(f"tcp://127.0.0.1:{sched_port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        s = wait_for(lambda: scrape(f"http://127.0.0.1:{worker_http}/metrics"),
                     lambda s: values(s, "dask_gpu_info"), what="worker GPU series")
        assert {dict(k)["uuid"] for k in values(s, "dask_gpu_up")} == {fake_nvml.uuid(1)}
        assert identities(client)["gpu-worker-1"]["gpus"] == [
            {"index": 0, "uuid": fake_nvml.uuid(1)}]


def test_worker_without_nvml_runs_and_says_so(tmp_path):
    cluster, sched_port, worker_http = start_cluster(no_nvml_env())
    with cluster as procs, Client(f"tcp://127.0.0.1:{sched_port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        assert client.submit(sum, [2, 3]).result(timeout=30) == 5
        # labelled once the worker knows its dask_cluster (this scheduler has no preload to
        # say it: derived from its address)
        s = wait_for(lambda: scrape(f"http://127.0.0.1:{worker_http}/metrics"),
                     lambda s: values(s, "dask_gpu_exporter_nvml_up"), what="worker series")
        assert s.clusters() == {f"127.0.0.1-{sched_port}"}
        assert value(s, "dask_gpu_exporter_nvml_up", worker="gpu-worker-1") == 0
        assert not values(s, "dask_gpu_info")
        assert identities(client)["gpu-worker-1"]["gpus"] == []
    log = procs[1].output
    assert "dask-metrics: NVML initialisation failed" in log and "runs on" in log


def test_bad_preload_option_keeps_the_worker(fake_nvml):
    cluster, sched_port, worker_http = start_cluster(fake_nvml.env, "--interval", "never")
    with cluster as procs, Client(f"tcp://127.0.0.1:{sched_port}", timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
        assert client.submit(sum, [4, 5]).result(timeout=30) == 9
        assert not values(scrape(f"http://127.0.0.1:{worker_http}/metrics"), "dask_gpu_info")
    assert "bad option, GPU metrics disabled: --interval='never'" in procs[1].output


def test_two_workers_in_one_process_share_one_registry():
    import dask.config

    with dask.config.set({"distributed.worker.preload": ["dask_metrics.worker"],
                          "dask-metrics.exporter.simulate": 1,
                          "dask-metrics.exporter.interval": 0.1}), LocalCluster(
        n_workers=2, processes=False, dashboard_address=":0", worker_dashboard_address=":0"
    ) as cluster, Client(cluster) as client:
        names = {str(w.name) for w in cluster.workers.values()}
        def collected() -> set[str]:
            return {s.labels["worker"] for m in REGISTRY.collect()
                    if m.name == "dask_gpu_info" for s in m.samples}

        wait_for(collected, lambda found: found == names, what="both workers' GPUs")
        assert all(g for g in identities(client).values())
    assert not [m for m in REGISTRY.collect() if m.name == "dask_gpu_info"]


def test_the_worker_peak_window_follows_the_scrapes_of_its_metrics(fake_nvml):
    """Dask serves the worker's /metrics: the preload sees its scrapes all the same, and the
    window of a 0.5 s shortest grows to the 2 s between two of them. (A worker process of its
    own: scraped in this one, Dask's worker collector would stay in the test's registry.)"""
    cluster, _, worker_http = start_cluster(fake_nvml.env, "--interval", "0.1",
                                            "--peak-window", "0.5")
    url = f"http://127.0.0.1:{worker_http}/metrics"
    with cluster:
        first = wait_for(lambda: scrape(url), lambda s: values(s, "dask_gpu_info"),
                         what="worker GPU series")
        assert values(first, "dask_gpu_exporter_peak_window_seconds")
        scraped = time.monotonic()
        wait_for(lambda: time.monotonic() - scraped >= 2.0, timeout=10, what="2 s")
        scrape(url)  # the second scrape: 2 s after the first
        grown = wait_for(lambda: scrape(url), lambda s: min(
            values(s, "dask_gpu_exporter_peak_window_seconds").values()) >= 2.0,
            timeout=10, what="a window as long as the gap")
        assert max(values(grown, "dask_gpu_exporter_peak_window_seconds").values()) <= 600
