"""The sidecar's HTTP surface as docs/exporter.md describes it: ``?name[]=`` filters every
series (GPU ones included), HEAD answers GET's headers without a body, OPTIONS lists the
methods, anything else is 405; against a real sidecar over the fake driver, and byte for byte
against prometheus_client's own ``name[]`` filter (the same lines)."""

from __future__ import annotations

import http.client
import io
import socket

import pytest
from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app
from prometheus_client.parser import text_string_to_metric_families

from dask_metrics.exporter.gpu_collector import GpuCollector
from dask_metrics.exporter.gpu_source import DeviceInfo, Reading
from dask_metrics.exporter.http import make_app
from dask_metrics.exporter.identity import GpuRef
from dask_metrics.exporter.sampler import GpuSnapshot, Snapshot
from tests.helpers import http_get, sidecar

FAST = ("--interval", "0.1")
WANTED = ("dask_gpu_up", "dask_gpu_busy_seconds_total", "dask_gpu_exporter_nvml_up",
          "process_cpu_seconds_total")


def sample_names(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def raw(base: str, request: str) -> bytes:
    """Send one raw HTTP/1.0 request and read the whole answer, to the connection's end."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def request(base: str, method: str, path: str) -> tuple[int, dict[str, str], bytes]:
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


@pytest.mark.integration
def test_name_filter_keeps_only_the_named_series_gpu_ones_included(fake_nvml):
    with sidecar("--worker", "w0", *FAST, env=fake_nvml.env) as base:
        query = "&".join(f"name[]={n}" for n in WANTED)
        status, text = http_get(f"{base}/metrics?{query}")
        assert status == 200
        assert sample_names(text) == set(WANTED)
        gpus = [line for line in text.splitlines() if line.startswith("dask_gpu_up{")]
        assert len(gpus) == 2  # both fake GPUs
        status, text = http_get(f"{base}/metrics?name[]=dask_gpu_memory_used_bytes")
        assert sample_names(text) == {"dask_gpu_memory_used_bytes"}
        status, text = http_get(f"{base}/metrics?name[]=no_such_series")
        assert status == 200 and text == ""
        status, unfiltered = http_get(f"{base}/metrics")
        assert {"dask_gpu_info", "process_cpu_seconds_total"} <= sample_names(unfiltered)


@pytest.mark.integration
@pytest.mark.parametrize("path", ["/metrics", "/healthz", "/metrics?name[]=dask_gpu_up"])
def test_head_answers_get_headers_without_a_body(fake_nvml, path):
    with sidecar("--worker", "w0", *FAST, env=fake_nvml.env) as base:
        answer = raw(base, f"HEAD {path} HTTP/1.0\r\nHost: x\r\n\r\n")
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 200 ") and body == b""
        headers = dict(line.split(": ", 1) for line in head.decode().split("\r\n")[1:])
        status, got, get_body = request(base, "GET", path)
        assert status == 200
        assert headers["Content-Type"] == got["Content-Type"]
        assert int(headers["Content-Length"]) > 0 and get_body


@pytest.mark.integration
def test_options_and_other_methods(fake_nvml):
    with sidecar("--worker", "w0", *FAST, env=fake_nvml.env) as base:
        for path in ("/metrics", "/healthz"):
            status, headers, body = request(base, "OPTIONS", path)
            assert (status, headers["Allow"], body) == (200, "GET, HEAD, OPTIONS", b"")
            status, headers, body = request(base, "POST", path)
            assert status == 405 and headers["Allow"] == "GET, HEAD, OPTIONS"
            assert b"method POST not allowed" in body
        status, _, body = request(base, "GET", "/nothing")
        assert status == 404 and b"try /metrics" in body


# -- the same bytes as prometheus_client's own name[] filter ---------------------------------

READING = Reading(memory_used=1.5e9, memory_total=8e10, memory_reserved=0.0, utilization=0.37,
                  memory_bandwidth=0.0, power_watts=61.25, energy_joules=1e12,
                  temperature_celsius=41, sm_clock_hertz=1.41e9, processes={42: 1e6})
SNAPSHOT = Snapshot("w1", "host", "550", False, True,
                    (GpuSnapshot(GpuRef(0, "GPU-a"), DeviceInfo("GPU-a", "A", "00:01"), True,
                                 READING, 2e9, 12.5),), 10, 0.001, 1.7e9, cluster="c1")


class _Frozen(ProcessCollector):
    """Process series, frozen so two encodings compare; with a describe() so a registry
    knows their names (the library's filter drops collectors it cannot name)."""

    def __init__(self) -> None:
        super().__init__(registry=None)
        self._families = list(super().collect())

    def collect(self):
        return self._families

    def describe(self):
        return self._families


def wsgi_get(app, query: str, accept: str, method: str = "GET") -> tuple[str, dict, bytes]:
    seen: dict = {}
    environ = {"REQUEST_METHOD": method, "PATH_INFO": "/metrics", "QUERY_STRING": query,
               "HTTP_ACCEPT": accept, "HTTP_ACCEPT_ENCODING": "", "wsgi.input": io.BytesIO()}
    body = b"".join(app(environ, lambda status, headers: seen.update(status=status,
                                                                      **dict(headers))))
    return seen["status"], seen, body


@pytest.mark.parametrize("accept", ["", "application/openmetrics-text;version=1.0.0"])
@pytest.mark.parametrize("names", [WANTED, ("dask_gpu_info",), ("process_open_fds", "x")])
def test_filter_matches_prometheus_client_byte_for_byte(accept, names):
    gpu = GpuCollector(lambda: (SNAPSHOT,))
    frozen = _Frozen()
    rest = CollectorRegistry()
    rest.register(frozen)
    reference = CollectorRegistry()
    reference.register(gpu)
    reference.register(frozen)
    query = "&".join(f"name[]={n}" for n in names)
    _, ours_headers, ours = wsgi_get(make_app(gpu, rest, lambda: (True, "ok")), query, accept)
    _, theirs_headers, theirs = wsgi_get(make_wsgi_app(reference), query, accept)
    # the library's filter yields collectors in set order: compare the lines, not their order
    assert sorted(ours.splitlines()) == sorted(theirs.splitlines()) and ours
    assert ours_headers["Content-Type"] == theirs_headers["Content-Type"]
    status, head_headers, head_body = wsgi_get(make_app(gpu, rest, lambda: (True, "ok")),
                                               query, accept, method="HEAD")
    assert (status, head_body) == ("200 OK", b"")
    assert head_headers["Content-Length"] == str(len(ours))
