"""The sidecar's /metrics is byte for byte what prometheus_client writes, in every format a
scraper can negotiate, with and without gzip."""

from __future__ import annotations

import gzip
import io

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

from dask_metrics.exporter.gpu_collector import GpuCollector
from dask_metrics.exporter.gpu_source import DeviceInfo, Reading
from dask_metrics.exporter.http import make_app
from dask_metrics.exporter.identity import GpuRef
from dask_metrics.exporter.sampler import GpuSnapshot, Snapshot

READING = Reading(memory_used=1.5e9, memory_total=8e10, memory_reserved=0.0, utilization=0.37,
                  memory_bandwidth=0.0, power_watts=61.25, energy_joules=1e12,
                  temperature_celsius=41, sm_clock_hertz=1.41e9, processes={42: 1e6, 7: 2.0})
GPUS = (
    GpuSnapshot(GpuRef(0, "GPU-a"), DeviceInfo("GPU-a", 'A "q" \\ \n é', "00:01"), True,
                READING, 2e9, 12.5),
    GpuSnapshot(GpuRef(1, "MIG-b"), DeviceInfo("MIG-b", "B", "00:02"), False, None, None, 0.0),
)
SNAPSHOTS = (
    Snapshot('w"1\\', "host", "550", False, True, GPUS, 10, 0.001, 1.7e9,
             {("power", "UNKNOWN"): 3}),
    Snapshot("w2", "host", "550", True, False),
)
ACCEPT = [
    "",
    "text/plain;version=0.0.4",
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",  # Prometheus 2.x
    "application/openmetrics-text",
    "text/plain;version=1.0.0;escaping=allow-utf-8",
]


class _Frozen(ProcessCollector):
    """The process series, frozen, so two encodings of them can be compared."""

    def __init__(self) -> None:
        super().__init__(registry=None)
        self._families = list(super().collect())

    def collect(self):
        return self._families


def get(app, accept: str, encoding: str = "") -> tuple[str, bytes]:
    seen = {}
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "QUERY_STRING": "",
               "HTTP_ACCEPT": accept, "HTTP_ACCEPT_ENCODING": encoding,
               "wsgi.input": io.BytesIO()}
    body = b"".join(app(environ, lambda status, headers: seen.update(headers)))
    if seen.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    return seen["Content-Type"], body


@pytest.mark.parametrize("accept", ACCEPT)
@pytest.mark.parametrize("encoding", ["", "gzip"])
@pytest.mark.parametrize("n", [0, 1, 2])
def test_same_bytes_as_prometheus_client(accept: str, encoding: str, n: int) -> None:
    gpu = GpuCollector(lambda: SNAPSHOTS[:n])
    rest = CollectorRegistry()
    rest.register(_Frozen())
    reference = CollectorRegistry()
    reference.register(gpu)
    reference.register(rest)
    ours = get(make_app(gpu, rest, lambda: (True, "ok")), accept, encoding)
    theirs = get(make_wsgi_app(reference), accept, encoding)
    assert ours == theirs
    assert b"dask_gpu_exporter_nvml_up" in ours[1] or n == 0
