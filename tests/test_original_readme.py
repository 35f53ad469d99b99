"""The original dask-metrics README's two snippets, run as they are written there
(../shared/seeds/dask-metrics-README.md), with only the scheduler address filled in, on the
local stack: a scheduler with the preload, workers with sidecars, a real Prometheus.

The snippets use ``Client`` without importing it, as in a session that already did
``from distributed import Client``; they run in such a namespace. Between them, two jobs run
from new clients, as the README says ("run any jobs just as you normally would").
"""

from __future__ import annotations

import csv
import json
import re
import sys
import time
from pathlib import Path

import pytest
from distributed import Client

from dask_metrics import Monitor
from dask_metrics.demo.localstack import LocalStack, StackOptions, scrape_config
from tests.fake_nvml import GiB
from tests.helpers import clean_env, free_port, http_get, processes
from tests.prometheus_helpers import run_prometheus

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT.parent / "shared" / "seeds" / "dask-metrics-README.md"
PLACEHOLDER = "'[scheduler address]'"


def snippets() -> list[str]:
    if not SEED.exists():
        pytest.fail(f"the original README is missing: {SEED} (../shared beside the checkout)")
    blocks = re.findall(r"```python\n(.*?)```", SEED.read_text(), flags=re.S)
    assert len(blocks) == 2, "the original README has two snippets"
    assert all(PLACEHOLDER in b for b in blocks)
    return blocks


def square(x: int) -> int:
    """A task long enough for Prometheus (scraping every second) to see its job run."""
    time.sleep(1.2)
    return x * x


def run_snippets(address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                 ) -> tuple[list[list[int]], list[list[bool]], Path]:
    """Both snippets as written, two jobs between them; (peaks, jobs, the CSV folder)."""
    start, stop = snippets()
    monkeypatch.chdir(tmp_path)  # 'path/to/folder' is relative to where the user runs it
    exec(start.replace(PLACEHOLDER, repr(address)), {"Client": Client})

    for job in range(2):  # each client is a job; each graph a DAG
        with Client(address) as client:
            for dag in range(job + 1):
                futures = client.map(square, range(4), key=[f"j{job}d{dag}-{i}"
                                                            for i in range(4)])
                assert client.gather(futures) == [0, 1, 4, 9]

    namespace: dict[str, object] = {"Client": Client}
    exec(stop.replace(PLACEHOLDER, repr(address)), namespace)

    # "worker.peak_memory()" in the README: a list per worker of each GPU's peak percent
    with Client(address) as client:
        monitor = namespace["Monitor"](client)  # the snippet's own import
        return monitor.peak_memory(), monitor.successful_jobs(), \
            tmp_path / "path" / "to" / "folder"


def check_results(workers: list[str], peaks: list[list[int]], jobs: list[list[bool]],
                  folder: Path) -> None:
    """One CSV per worker with the columns attach() asked for, one GPU each."""
    per_worker = {p.stem: p for p in folder.glob("*.csv")}
    assert set(workers) <= set(per_worker), sorted(per_worker)
    for worker in workers:
        with open(per_worker[worker], newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows, worker
        header = list(rows[0])
        for column in ("timestamp", "job", "dag", "mem-util", "compute-util"):
            assert column in header, (worker, header)
        assert "power" not in header  # only what attach() asked for
        assert float(rows[0]["timestamp"]) >= 0
        assert {r["job"] for r in rows} >= {"0", "1"}, worker
    assert len(peaks) == len(workers) and all(len(gpus) == 1 for gpus in peaks), peaks
    assert all(isinstance(p, int) and 0 <= p <= 100 for gpus in peaks for p in gpus), peaks
    assert jobs == [[True], [True, True]], jobs


def test_the_original_readme_runs_unchanged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    with LocalStack(StackOptions(folder=tmp_path / "stack", workers=2)) as stack:
        peaks, jobs, folder = run_snippets(stack.scheduler_address, tmp_path, monkeypatch)
    check_results(stack.worker_names, peaks, jobs, folder)


def test_the_original_readme_on_a_cluster_started_without_dask_metrics(
        fake_nvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A scheduler and workers with no preload, Prometheus discovering them from the
    scheduler: the snippets' Monitor registers the plugins, and a worker that joins after
    them gets its own."""
    fake_nvml.gpus[1].memory_used = 3 * GiB
    fake_nvml.write()
    port, dashboard = free_port(), free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask = [sys.executable, "-m", "dask"]
    env = clean_env(fake_nvml.env)

    def worker(name: str, gpu: int) -> tuple[list[str], dict[str, str]]:
        return ([*dask, "worker", address, "--name", name, "--host", "127.0.0.1",
                 "--nthreads", "1", "--dashboard-address", f"127.0.0.1:{free_port()}"],
                {**env, "CUDA_VISIBLE_DEVICES": str(gpu)})

    scheduler = ([*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                  "--dashboard-address", f"127.0.0.1:{dashboard}"], env)
    targets = f"http://127.0.0.1:{dashboard}/dask-metrics/targets"
    jobs_config = scrape_config(targets)["scrape_configs"]
    with processes(scheduler, worker("w0", 0)) as procs, \
            run_prometheus(tmp_path / "prom", scrape_configs=jobs_config) as prom:
        monkeypatch.setenv("DASK_METRICS_PROMETHEUS_URL", prom.url)
        with Client(address, timeout=30) as client:
            client.wait_for_workers(1, timeout=60)
        with processes(worker("w1", 1)):  # joins after the plugins: gets them too
            with Client(address, timeout=30) as client:
                client.wait_for_workers(2, timeout=60)
            assert http_get(targets)[0] == 404  # no dask-metrics before the Monitor
            peaks, jobs, folder = run_snippets(address, tmp_path, monkeypatch)
            with Client(address, timeout=30) as client:  # a second Monitor registers nothing
                Monitor(client).attach(["mem-util"])
                plugins = client.run_on_scheduler(
                    lambda dask_scheduler: sorted(dask_scheduler.plugins))
                groups = json.loads(http_get(targets)[1])
    check_results(["w0", "w1"], peaks, jobs, folder)
    assert "dask-metrics-jobs" in plugins and "dask-metrics-install" in plugins
    assert {g["labels"].get("worker") for g in groups} == {None, "w0", "w1"}
    assert "already has" not in procs[0].output  # the second Monitor did not try again
