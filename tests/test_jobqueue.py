"""docs/deploy.md's HPC recipe as written: dask-jobqueue's SLURMCluster with the preloads,
over a stand-in for ``sbatch``/``scancel`` (tests/standin_slurm, which runs each job script
on this machine), the workers' GPUs on the fake driver, and a real Prometheus discovering
them from the scheduler as they come and go."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from dask_metrics.demo.localstack import scrape_config
from tests.ground_truth import query
from tests.helpers import free_port, wait_for
from tests.prometheus_helpers import run_prometheus

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parent.parent
STANDIN = Path(__file__).resolve().parent / "standin_slurm"


def recipe() -> str:
    blocks = re.findall(r"```python\n(from dask_jobqueue import SLURMCluster.*?)```",
                        (ROOT / "docs" / "deploy.md").read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/deploy.md has one dask-jobqueue recipe"
    return blocks[0]


def localised(code: str, dashboard: int, worker_dashboard: int) -> str:
    """The recipe on this machine's loopback: the scheduler's host and both ports."""
    swaps = {'{"dashboard_address": ":8787"': '{"host": "127.0.0.1", "dashboard_address": '
                                              f'"127.0.0.1:{dashboard}"',
             '"--dashboard-address", ":8788"': '"--dashboard-address", '
                                               f'"127.0.0.1:{worker_dashboard}"'}
    for old, new in swaps.items():
        assert old in code, f"{old!r} is no longer in the recipe"
        code = code.replace(old, new)
    return code


def test_the_hpc_recipe_runs_as_written(fake_nvml, tmp_path, monkeypatch):
    state = tmp_path / "slurm"
    state.mkdir()
    for key, value in fake_nvml.env.items():
        if key in ("LD_LIBRARY_PATH", "FAKE_NVML_STATE"):
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # what SLURM's --gres=gpu:1 sets
    monkeypatch.setenv("STANDIN_SLURM_DIR", str(state))
    monkeypatch.setenv("PATH", f"{STANDIN}{os.pathsep}{os.environ['PATH']}")
    dashboard = free_port()
    namespace: dict[str, object] = {}
    exec(localised(recipe(), dashboard, free_port()), namespace)
    cluster = namespace["cluster"]
    targets = f"http://127.0.0.1:{dashboard}/dask-metrics/targets"
    with cluster, run_prometheus(tmp_path / "prom",
                                 scrape_configs=scrape_config(targets)["scrape_configs"]) as prom:
        def gpus() -> dict[str, set[str]]:
            found: dict[str, set[str]] = {}
            for r in query(prom, "dask_gpu_up"):
                found.setdefault(r["metric"]["worker"], set()).add(r["metric"]["uuid"])
            return found

        cluster.scale(jobs=1)  # a node comes
        seen = wait_for(gpus, timeout=120, interval=0.5, what="the node's GPU in Prometheus")
        assert list(seen.values()) == [{fake_nvml.uuid(1)}], seen
        cluster.scale(jobs=0)  # and goes: its target is dropped, its series go stale
        wait_for(gpus, lambda g: not g, timeout=120, interval=0.5,
                 what="the node's GPU gone from Prometheus")
    assert "Submitted" not in (state / "101.log").read_text()  # the job ran the worker
