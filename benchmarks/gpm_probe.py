#!/usr/bin/env python
"""NVML's GPM on a real GPU: whether the device supports it, what a sampling round costs
(the 17 metrics below, and the 4 an exporter would keep), and what SM, tensor and DRAM
activity read under known kernels (one tiny kernel in a loop, an FP32 matmul without tensor
cores, a bf16 matmul on them, a device copy) next to NVML's utilisation and
``nvidia-smi dmon -s u``. Needs an NVIDIA GPU, PyTorch and nvidia-ml-py; prints JSON lines.
Usage::

    python benchmarks/gpm_probe.py
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Mapping

import pynvml as nvml
import torch

METRICS = {"graphics": 1, "sm_util": 2, "sm_occupancy": 3, "integer": 4, "any_tensor": 5,
           "dfma": 6, "hmma": 7, "dmma": 8, "imma": 9, "dram_bw": 10, "fp64": 11, "fp32": 12,
           "fp16": 13, "pcie_tx": 20, "pcie_rx": 21, "nvlink_rx": 60, "nvlink_tx": 61}
KEPT = {name: METRICS[name] for name in ("sm_util", "sm_occupancy", "any_tensor", "dram_bw")}


def show(**row: object) -> None:
    print(json.dumps(row), flush=True)


def read(first: object, second: object, ids: Mapping[str, int]) -> dict[str, float | None]:
    """The metrics between two GPM samples (None where the device refuses one)."""
    get = nvml.c_nvmlGpmMetricsGet_t()
    get.version = nvml.NVML_GPM_METRICS_GET_VERSION
    get.numMetrics = len(ids)
    get.sample1, get.sample2 = first, second
    for i, metric in enumerate(ids.values()):
        get.metrics[i].metricId = metric
    nvml.nvmlGpmMetricsGet(get)
    return {name: None if get.metrics[i].nvmlReturn else round(get.metrics[i].value, 3)
            for i, name in enumerate(ids)}


def round_cost(handle: object, samples: tuple[object, object], ids: Mapping[str, int],
               rounds: int = 100) -> float:
    """CPU ms of one sampling round: a sample taken, the metrics since the last one read."""
    a, b = samples
    nvml.nvmlGpmSampleGet(handle, a)
    started = time.process_time()
    for i in range(rounds):
        newer, older = (b, a) if i % 2 == 0 else (a, b)
        nvml.nvmlGpmSampleGet(handle, newer)
        read(older, newer, ids)
    return (time.process_time() - started) * 1000 / rounds


def phase(handle: object, samples: tuple[object, object], name: str,
          work: Callable[[], None] | None, seconds: float = 3.0) -> None:
    """Run ``work`` in a loop for ``seconds`` and print what GPM and NVML read meanwhile."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            work()

    runner = threading.Thread(target=loop) if work else None
    if runner:
        runner.start()
        time.sleep(0.5)  # warm up
    a, b = samples
    nvml.nvmlGpmSampleGet(handle, a)
    utils = []
    began = time.time()
    while time.time() - began < seconds:
        utils.append(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        time.sleep(0.1)
    nvml.nvmlGpmSampleGet(handle, b)
    stop.set()
    if runner:
        runner.join()
    show(phase=name, nvml_util_mean=round(sum(utils) / len(utils), 1), **read(a, b, METRICS))


def main() -> None:
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    show(name=nvml.nvmlDeviceGetName(handle), driver=nvml.nvmlSystemGetDriverVersion(),
         gpm_supported=int(nvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice))
    samples = (nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc())
    show(round_cpu_ms_17_metrics=round_cost(handle, samples, METRICS),
         round_cpu_ms_4_metrics=round_cost(handle, samples, KEPT))

    tiny = torch.ones(256, device="cuda")
    a32, b32 = (torch.randn(8192, 8192, device="cuda") for _ in range(2))
    a16, b16 = a32.bfloat16(), b32.bfloat16()
    torch.backends.cuda.matmul.allow_tf32 = False  # FP32 pipes, no tensor cores

    def synced(step: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            step()
            torch.cuda.synchronize()
        return run

    dmon = subprocess.Popen(["nvidia-smi", "dmon", "-s", "u", "-d", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    phase(handle, samples, "idle", None)
    phase(handle, samples, "tiny_kernel_one_block",
          synced(lambda: [tiny.mul_(1.0000001) for _ in range(200)]))
    phase(handle, samples, "fp32_matmul_no_tensor_cores", synced(lambda: a32 @ b32))
    phase(handle, samples, "bf16_matmul_tensor_cores", synced(lambda: a16 @ b16))
    phase(handle, samples, "device_copy", synced(lambda: b32.copy_(a32)))
    dmon.terminate()
    print("nvidia-smi dmon -s u:\n" + dmon.communicate(timeout=5)[0])


if __name__ == "__main__":
    main()
