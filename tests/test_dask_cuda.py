"""The real dask-cuda over the fake driver with 4 GPUs: ``LocalCUDACluster`` gives each
worker every GPU in ``CUDA_VISIBLE_DEVICES``, its own first, and each worker reports only
its own. Runs in its own environment (``scripts/test-dask-cuda.sh``: dask-cuda pins its
Dask), with ``-m dask_cuda``."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from distributed import Client

from dask_metrics.demo.localstack import scrape_config
from tests.fake_nvml import FakeNVML, GiB, load_in_process
from tests.ground_truth import query
from tests.helpers import scrape, values, wait_for
from tests.prometheus_helpers import run_prometheus
from tests.test_original_readme import check_results, run_snippets

pytestmark = [pytest.mark.dask_cuda, pytest.mark.integration]
DEPLOY = Path(__file__).resolve().parent.parent / "docs" / "deploy.md"
GPUS = 4


@pytest.fixture
def four_gpus(tmp_path, fake_nvml_lib, monkeypatch) -> FakeNVML:
    """Four fake GPUs, seen by this process (LocalCUDACluster counts them here) and by the
    worker processes it spawns (the environment they inherit)."""
    fake = FakeNVML(tmp_path / "nvml_state", fake_nvml_lib, gpus=GPUS)
    for i in range(GPUS):
        fake.gpus[i].memory_used = (i + 1) * GiB
    fake.write()
    for key in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE"):
        monkeypatch.setenv(key, fake.env[key])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    load_in_process(fake_nvml_lib)
    return fake


def recipe() -> str:
    """docs/deploy.md's LocalCUDACluster recipe, as written there."""
    blocks = re.findall(r"```python\n(from dask_cuda import LocalCUDACluster.*?)```",
                        DEPLOY.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/deploy.md has one LocalCUDACluster recipe"
    return blocks[0]


def worker_gpus(cluster) -> dict[str, set[str]]:
    """{worker name: the UUIDs its own /metrics serves}."""
    found = {}
    for w in cluster.scheduler_info["workers"].values():
        host = w["host"]
        s = scrape(f"http://{host}:{w['services']['dashboard']}/metrics")
        found[str(w["name"])] = {dict(k)["uuid"] for k in values(s, "dask_gpu_info")}
    return found


def test_the_documented_recipe_gives_each_worker_its_own_gpu(four_gpus, tmp_path):
    namespace: dict[str, object] = {}
    exec(recipe().replace('":8787"', '"127.0.0.1:0"'), namespace)  # a free port here
    cluster, client = namespace["cluster"], namespace["client"]
    with cluster, client:
        client.wait_for_workers(GPUS, timeout=60)
        visible = client.run(lambda: __import__("os").environ["CUDA_VISIBLE_DEVICES"])
        assert sorted(v.split(",")[0] for v in visible.values()) == ["0", "1", "2", "3"]
        assert any(len(v.split(",")) == GPUS for v in visible.values())  # the whole list
        owned = wait_for(lambda: worker_gpus(cluster), lambda g: all(g.values()),
                         what="every worker's GPU series")
        assert sorted(u for gpus in owned.values() for u in gpus) == sorted(
            four_gpus.uuid(i) for i in range(GPUS))  # each GPU once
        assert all(len(gpus) == 1 for gpus in owned.values()), owned
        dashboard = cluster.dashboard_link.replace("/status", "")
        targets = f"{dashboard}/dask-metrics/targets"
        with run_prometheus(tmp_path / "prom",
                            scrape_configs=scrape_config(targets)["scrape_configs"]) as prom:
            wait_for(lambda: {r["metric"]["worker"] for r in query(prom, "dask_gpu_up")},
                     lambda w: len(w) == GPUS, what="Prometheus scraping the four workers")
            from dask_metrics import Monitor

            monitor = Monitor(client, prometheus=prom.url)
            monitor.start()
            assert client.submit(sum, [1, 2]).result(timeout=30) == 3
            monitor.stop()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                peaks = monitor.peak_memory()
    assert len(peaks) == GPUS and all(len(gpus) == 1 for gpus in peaks), peaks
    assert not [w for w in caught if "is seen by" in str(w.message)]


def test_the_original_readme_on_a_bare_local_cuda_cluster(four_gpus, tmp_path, monkeypatch):
    """``LocalCUDACluster()`` with nothing but dask-metrics installed: the snippets' Monitor
    registers the plugins; one CSV per worker, each with its own GPU."""
    from dask_cuda import LocalCUDACluster

    with LocalCUDACluster(dashboard_address="127.0.0.1:0") as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(GPUS, timeout=60)
        targets = cluster.dashboard_link.replace("/status", "/dask-metrics/targets")
        with run_prometheus(tmp_path / "prom",
                            scrape_configs=scrape_config(targets)["scrape_configs"]) as prom:
            monkeypatch.setenv("DASK_METRICS_PROMETHEUS_URL", prom.url)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                peaks, jobs, folder = run_snippets(cluster.scheduler_address, tmp_path,
                                                   monkeypatch)
            owned = worker_gpus(cluster)
    names = sorted(owned)
    check_results(names, peaks, jobs, folder)
    assert all(len(gpus) == 1 for gpus in owned.values()), owned
    assert len(set().union(*owned.values())) == GPUS
    assert not [w for w in caught if "is seen by" in str(w.message)]
