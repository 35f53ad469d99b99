"""Against real NVML, on a machine with an NVIDIA GPU: ``pytest -m gpu``.

Deselected by default (pyproject's addopts); where the marker is asked for and no GPU is
present, every test here is skipped with the reason NVML gave.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from dask_metrics.exporter.gpu_source import SourceUnavailable
from dask_metrics.exporter.nvml_source import NvmlSource
from tests.helpers import http_get, promtool_lint, scrape, sidecar, value, values, wait_for

pytestmark = [pytest.mark.gpu, pytest.mark.integration]  # real NVML, a sidecar process


@pytest.fixture(scope="module")
def real_gpus() -> list[str]:
    source = NvmlSource()
    try:
        source.start()
    except SourceUnavailable as exc:
        pytest.skip(f"needs an NVIDIA GPU and driver: {exc}")
    try:
        return [c.uuid for c in source.candidates() if c.nvml_index is not None]
    finally:
        source.close()


def test_empty_cuda_visible_devices_means_no_gpu(real_gpus):
    with sidecar("--worker", "gpu-test", env={"CUDA_VISIBLE_DEVICES": ""}) as base:
        assert not values(scrape(base + "/metrics"), "dask_gpu_info")


def test_sidecar_serves_every_visible_gpu(real_gpus):
    with sidecar("--worker", "gpu-test", "--gpus", ",".join(real_gpus)) as base:
        samples = scrape(base + "/metrics")
        for index, uuid in enumerate(real_gpus):
            labels = {"worker": "gpu-test", "gpu": str(index), "uuid": uuid}
            assert value(samples, "dask_gpu_up", **labels) == 1
            total = value(samples, "dask_gpu_memory_total_bytes", **labels)
            used = value(samples, "dask_gpu_memory_used_bytes", **labels)
            assert total > 0 and 0 <= used <= total  # an idle GPU reports 0 used (NVML v2)
            info = values(samples, "dask_gpu_info", **labels)
            assert len(info) == 1 and dict(next(iter(info)))["simulated"] == "false"
        promtool_lint(http_get(base + "/metrics")[1])


def test_uuids_match_nvidia_smi(real_gpus):
    if not shutil.which("nvidia-smi"):
        pytest.skip("needs nvidia-smi to compare with")
    out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == real_gpus


def test_gpm_series_exactly_where_the_gpu_offers_them(real_gpus):
    """Hopper and newer: SM/tensor activity gauges in [0, 1] and counters that never go back;
    a GPU without GPM: none of them (never zeros)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        offers = {uuid: bool(pynvml.nvmlGpmQueryDeviceSupport(
            pynvml.nvmlDeviceGetHandleByUUID(uuid)).isSupportedDevice) for uuid in real_gpus}
    finally:
        pynvml.nvmlShutdown()
    gpm = ("dask_gpu_sm_active_ratio", "dask_gpu_tensor_active_ratio",
           "dask_gpu_sm_active_seconds_total", "dask_gpu_tensor_active_seconds_total")
    with sidecar("--worker", "gpu-test", "--gpus", ",".join(real_gpus), "--interval",
                 "0.2") as base:
        def labelled(index: int, uuid: str) -> dict[str, str]:
            return {"worker": "gpu-test", "gpu": str(index), "uuid": uuid}

        def ready(s) -> bool:
            return all(values(s, gpm[0], **labelled(i, u)) for i, u in enumerate(real_gpus)
                       if offers[u])

        first = wait_for(lambda: scrape(base + "/metrics"), ready, what="GPM series")
        later = wait_for(lambda: scrape(base + "/metrics"),
                         lambda s: value(s, "dask_gpu_exporter_samples_total",
                                         worker="gpu-test")
                         > value(first, "dask_gpu_exporter_samples_total", worker="gpu-test"))
    for index, uuid in enumerate(real_gpus):
        labels = labelled(index, uuid)
        if not offers[uuid]:
            assert not any(values(later, name, **labels) for name in gpm), uuid
            continue
        for name in gpm[:2]:
            assert 0 <= value(later, name, **labels) <= 1, name
        for name in gpm[2:]:
            assert value(later, name, **labels) >= value(first, name, **labels) >= 0, name
