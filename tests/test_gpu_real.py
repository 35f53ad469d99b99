"""Against real NVML, on a machine with an NVIDIA GPU: ``pytest -m gpu``.

Deselected by default (pyproject's addopts); where the marker is asked for and no GPU is
present, every test here is skipped with the reason NVML gave.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from dask_metrics.exporter.gpu_source import SourceUnavailable
from dask_metrics.exporter.nvml_source import NvmlSource
from tests.helpers import http_get, promtool_lint, scrape, sidecar, value, values, wait_for

GiB = 2**30

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


def gpm_offered(uuids: list[str]) -> dict[str, bool]:
    """Whether NVML offers GPM (SM and tensor activity) on each GPU, asked directly."""
    import pynvml

    pynvml.nvmlInit()
    try:
        return {uuid: bool(pynvml.nvmlGpmQueryDeviceSupport(
            pynvml.nvmlDeviceGetHandleByUUID(uuid)).isSupportedDevice) for uuid in uuids}
    finally:
        pynvml.nvmlShutdown()


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
    offers = gpm_offered(real_gpus)
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


# A process that holds known GPU memory and runs known kernels on command, one per stdin line
# ("hold", "free", "matmul SECONDS"), answering each with the same line once it is done.
HOLDER = r"""
import sys, time
import torch
torch.ones(1, device="cuda")
print("ready", flush=True)
for line in sys.stdin:
    command = line.split()
    if command[0] == "hold":
        block = torch.ones(2 * 2**30, dtype=torch.uint8, device="cuda")
    elif command[0] == "free":
        del block
        torch.cuda.empty_cache()
    elif command[0] == "matmul":
        a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
        end = time.monotonic() + float(command[1])
        while time.monotonic() < end:
            (a @ a).sum().item()
    torch.cuda.synchronize()
    print(line.strip(), flush=True)
"""


def test_known_memory_and_kernels_read_back_from_the_sidecar(real_gpus):
    """The truth is scripted on the GPU itself: 2 GiB held by a known process shows as used
    memory, as that pid's memory and as the peak after it is freed; bf16 matrix products
    read as busy, SM- and tensor-active (where GPM is), idle reads idle again."""
    pytest.importorskip("torch", reason="needs PyTorch to put known work on the GPU")
    uuid = real_gpus[0]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": uuid}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def send(command: str) -> None:
        holder.stdin.write(command + "\n")
        holder.stdin.flush()

    def done(command: str) -> None:  # bounded by the test's timeout (pyproject)
        assert holder.stdout.readline().strip() == command

    def tell(command: str) -> None:
        send(command)
        done(command)

    labels = {"worker": "gpu-test", "gpu": "0", "uuid": uuid}
    gpm = gpm_offered([uuid])[uuid]
    try:
        done("ready")
        with sidecar("--worker", "gpu-test", "--gpus", uuid, "--pids", str(holder.pid),
                     "--interval", "0.2") as base:
            def reads(check, what: str):
                return wait_for(lambda: scrape(base + "/metrics"), check, what=what)

            def used(s) -> float:
                return value(s, "dask_gpu_memory_used_bytes", **labels)

            idle = reads(lambda s: values(s, "dask_gpu_memory_used_bytes", **labels), "a read")
            tell("hold")
            held = reads(lambda s: used(s) >= used(idle) + 2 * GiB, "2 GiB more used")
            mine = value(held, "dask_gpu_process_memory_used_bytes", **labels,
                         pid=str(holder.pid))
            assert 2 * GiB <= mine <= used(held), (mine, used(held))
            tell("free")
            freed = reads(lambda s: used(s) < used(idle) + 2 * GiB, "the 2 GiB freed")
            assert value(freed, "dask_gpu_memory_peak_bytes", **labels) >= used(idle) + 2 * GiB
            send("matmul 8")

            def busy(s) -> bool:
                ratio = "dask_gpu_{}_active_ratio"
                return value(s, "dask_gpu_utilization_ratio", **labels) >= 0.9 and (
                    not gpm or (value(s, ratio.format("sm"), **labels) >= 0.5
                                and value(s, ratio.format("tensor"), **labels) >= 0.5))

            reads(busy, "matrix products read as busy")
            done("matmul 8")
            after = reads(lambda s: value(s, "dask_gpu_utilization_ratio", **labels) <= 0.05,
                          "idle again")
            if gpm:
                assert value(after, "dask_gpu_tensor_active_ratio", **labels) <= 0.05
                assert value(after, "dask_gpu_tensor_active_seconds_total", **labels) >= 1
            assert value(after, "dask_gpu_busy_seconds_total", **labels) >= 1
    finally:
        holder.kill()
        holder.wait()
