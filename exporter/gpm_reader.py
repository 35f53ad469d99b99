"""The GPU's activity counters (GPM: SM, tensor, DRAM, FP pipes) of one device, read
through NVML's GPM sample buffers: which metrics a round reads, and the means between two
rounds. Apart from the rest of NVML because GPM has its own buffers and costs.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

from dask_metrics import contract as m

# The GPM metrics read each round (NVML metric ids, pynvml's NVML_GPM_METRIC_*), by the
# series they feed. PCIe and NVLink throughput are left out: on an H200 they made a round
# cost 1.8 ms of CPU instead of 0.05 ms (docs/benchmarks.md).
GPM_METRIC_IDS: dict[str, int] = {
    m.SM_ACTIVE.name: 2,  # SM_UTIL
    m.SM_OCCUPANCY.name: 3,  # SM_OCCUPANCY
    m.TENSOR_ACTIVE.name: 5,  # ANY_TENSOR_UTIL
    m.DRAM_ACTIVE.name: 10,  # DRAM_BW_UTIL
    m.FP64_ACTIVE.name: 11,  # FP64_UTIL
    m.FP32_ACTIVE.name: 12,  # FP32_UTIL
    m.FP16_ACTIVE.name: 13,  # FP16_UTIL
}


class GpmReader:
    """Two GPM sample buffers of one device, taken in turn: each read gives the means
    since the previous one (counters kept by the GPU, so nothing between is missed)."""

    def __init__(self, nv: Any, handle: Any, instance: int | None) -> None:
        self._nv = nv
        self._handle = handle
        self._instance = instance
        first = nv.nvmlGpmSampleAlloc()
        try:
            self._samples = (first, nv.nvmlGpmSampleAlloc())
        except nv.NVMLError:
            nv.nvmlGpmSampleFree(first)
            raise
        self._taken_at: float | None = None  # monotonic time of the older sample
        # One request, filled once: a fresh one per round (metrics[] of every metric id
        # NVML knows, about 20 KB to zero) was most of GPM's cost in Python.
        self._get = get = nv.c_nvmlGpmMetricsGet_t()
        get.version = nv.NVML_GPM_METRICS_GET_VERSION
        get.numMetrics = len(GPM_METRIC_IDS)
        for i, metric in enumerate(GPM_METRIC_IDS.values()):
            get.metrics[i].metricId = metric

    def read(self) -> tuple[dict[str, float], float]:
        nv = self._nv
        older, newer = self._samples
        if self._instance is None:
            nv.nvmlGpmSampleGet(self._handle, newer)
        else:
            nv.nvmlGpmMigSampleGet(self._handle, self._instance, newer)
        now = time.monotonic()
        then, self._taken_at = self._taken_at, now
        self._samples = (newer, older)
        if then is None:
            return {}, 0.0
        get = self._get
        get.sample1, get.sample2 = older, newer
        nv.nvmlGpmMetricsGet(get)
        means = {}
        for i, name in enumerate(GPM_METRIC_IDS):
            metric = get.metrics[i]
            # NVML may answer NaN with success (an H200's DRAM activity over the first
            # interval after start): an unknown mean is left out, never served as NaN or
            # added to a counter, which would then stay NaN for good.
            if metric.nvmlReturn == nv.NVML_SUCCESS and math.isfinite(metric.value):
                means[name] = min(max(metric.value / 100.0, 0.0), 1.0)
        return means, now - then

    def free(self) -> None:
        for sample in self._samples:
            with contextlib.suppress(self._nv.NVMLError):
                self._nv.nvmlGpmSampleFree(sample)
