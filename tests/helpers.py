"""The helpers every test file shares, each in one place: ports, polling, HTTP, /metrics
parsing, clean environments for subprocesses, the collector and exporter as programs, and
PNG sizes. Prometheus' own helpers are in tests/prometheus_helpers.py, the fake NVML driver
in tests/fake_nvml.py, the whole local stack in dask_metrics.demo.localstack."""

from __future__ import annotations

import csv
import functools
import io
import os
import shutil
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pytest
from distributed import LocalCluster
from prometheus_client.parser import text_string_to_metric_families

from dask_metrics.contract import DASK_CLUSTER, SCHEDULER_START
from dask_metrics.demo.localstack import free_port

__all__ = ["Run", "Scrape", "clean_env", "collector", "collector_process", "csv_numbers",
           "exporter_process", "free_port", "http_get", "no_nvml_env", "png_size", "processes",
           "scrape", "sidecar", "value", "values", "wait_for"]

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent


# ---- polling and HTTP ------------------------------------------------------------------------


def wait_for(probe: Callable[[], T], check: Callable[[T], object] = bool,
             timeout: float = 30.0, what: str = "condition", interval: float = 0.05) -> T:
    """Call ``probe`` until ``check`` accepts its result (by default: until it is truthy) and
    return that result; a probe that cannot connect yet is retried. Fails with ``what`` and
    the last result or error at the deadline."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            result = probe()
            if check(result):
                return result
            last = result
        except (OSError, urllib.error.URLError, ValueError, KeyError) as exc:
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}; last: {last!r}")


def http_get(url: str, timeout: float = 5.0, ca_file: str | None = None) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=ca_file) if ca_file else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


# ---- /metrics pages ----------------------------------------------------------------------------

Series = dict[tuple[tuple[str, str], ...], float]


def promtool_lint(text: str) -> None:
    """``promtool check metrics`` on a /metrics page: what Prometheus' own linter says of it
    (a family declared twice, a bad name, a counter without _total) must be nothing."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("needs promtool (Debian package prometheus; scripts/setup.sh installs it)")
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
    assert check.returncode == 0 and not check.stdout.strip(), check.stdout + check.stderr


class Scrape:
    """One parsed /metrics page: ``scrape["dask_job_dag_status"]`` maps sorted label tuples to
    values; ``samples`` holds every sample name."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[str, Series] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items()))
                self.samples.setdefault(sample.name, {})[labels] = sample.value

    def __getitem__(self, name: str) -> Series:
        return self.samples.get(name, {})

    def value(self, name: str, **labels: str) -> float | None:
        """The sample with exactly these labels, or None."""
        return self[name].get(tuple(sorted(labels.items())))

    def clusters(self) -> set[str]:
        """The dask_cluster values of the dask_gpu_*/dask_job_* samples; "" for a sample
        without the label."""
        return {dict(labels).get(DASK_CLUSTER, "") for name, series in self.samples.items()
                if name.startswith(("dask_gpu_", "dask_job_")) for labels in series}

    def of_cluster(self, cluster: str | None = None) -> Scrape:
        """This scrape with the dask_cluster and scheduler_start labels taken off, after
        checking that every dask_gpu_*/dask_job_* sample carries the first, with the value
        ``cluster`` (or any one value when None), and that the second has one value: the
        tests that are about something else compare the other labels."""
        found = self.clusters()
        assert "" not in found, f"a sample without {DASK_CLUSTER}: {self.text}"
        assert len(found) <= 1, f"samples of several clusters: {sorted(found)}"
        assert cluster is None or found <= {cluster}, f"{DASK_CLUSTER} {found} != {cluster!r}"
        lives = {v for series in self.samples.values() for labels in series
                 for k, v in labels if k == SCHEDULER_START}
        assert len(lives) <= 1, f"samples of several scheduler lives: {sorted(lives)}"
        stripped = Scrape("")
        stripped.text = self.text
        stripped.samples = {
            name: {tuple(kv for kv in labels if kv[0] not in (DASK_CLUSTER, SCHEDULER_START)): v
                   for labels, v in series.items()}
            for name, series in self.samples.items()}
        return stripped

    def rows(self, name: str, *label_names: str) -> dict[tuple[str, ...], float]:
        """The series of ``name`` keyed by the values of ``label_names`` (in that order)."""
        return {tuple(dict(labels)[n] for n in label_names): value
                for labels, value in self[name].items()}


def scrape(where: int | str) -> Scrape:
    """The /metrics page at a URL, or at ``http://127.0.0.1:PORT/metrics`` for a port."""
    url = f"http://127.0.0.1:{where}/metrics" if isinstance(where, int) else where
    status, text = http_get(url, timeout=10)
    if status != 200:
        raise ValueError(f"{url} answered {status}")
    return Scrape(text)


def values(s: Scrape, name: str, **labels: str) -> Series:
    """The samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return {lab: v for lab, v in s[name].items() if want <= set(lab)}


def value(s: Scrape, name: str, **labels: str) -> float:
    """The one sample of ``name`` whose labels include ``labels`` (KeyError if not one)."""
    found = values(s, name, **labels)
    if len(found) != 1:
        raise KeyError(f"{name}{labels}: {len(found)} samples")
    return next(iter(found.values()))


# ---- processes -------------------------------------------------------------------------------


def clean_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``base`` (by default this process's environment) for a subprocess, without what would
    change what a dask-metrics program or Dask does behind a test's back (DASK_METRICS_*,
    DASK_* and CUDA_VISIBLE_DEVICES), plus ``extra``."""
    env = {k: v for k, v in (os.environ if base is None else base).items()
           if not k.startswith("DASK_") and k != "CUDA_VISIBLE_DEVICES"}
    return {**env, **extra}


@functools.cache
def _nvml_hider() -> str:
    """A folder whose ``libnvidia-ml.so.1`` is not a library: first on LD_LIBRARY_PATH, it
    stops the dynamic loader's search there, so that a real driver installed on the machine
    (a developer's GPU box) is not found either."""
    folder = tempfile.mkdtemp(prefix="no-nvml-")
    Path(folder, "libnvidia-ml.so.1").write_text("not a library: no NVML for this test\n")
    return folder


def no_nvml_env() -> dict[str, str]:
    """A clean environment in which no NVML library, fake or real, can be found."""
    env = {k: v for k, v in clean_env().items() if k != "FAKE_NVML_STATE"}
    return {**env, "LD_LIBRARY_PATH": _nvml_hider()}


@contextmanager
def processes(*cmds: tuple[Any, ...]) -> Iterator[list[subprocess.Popen]]:
    """Run commands (argv, env[, cwd]) in the background; stop them all, whatever happens.

    Each process's output is in ``proc.output`` once the block has ended.
    """
    procs: list[subprocess.Popen] = []
    try:
        for argv, env, *cwd in cmds:
            procs.append(subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True,
                                          cwd=cwd[0] if cwd else None))
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout:
                proc.output = proc.stdout.read()  # type: ignore[attr-defined]
                proc.stdout.close()


def scheduler_and_worker(env: Mapping[str, str], name: str, *worker_args: str
                         ) -> tuple[Any, int, int]:
    """``dask scheduler`` and one ``dask worker --preload dask_metrics.worker`` (no nanny,
    one thread) on loopback ports: (the processes' context manager, the scheduler's port,
    the worker's HTTP port)."""
    dask = [sys.executable, "-m", "dask"]  # this interpreter's Dask, not whatever is on PATH
    sched_port, worker_http = free_port(), free_port()
    scheduler = [*dask, "scheduler", "--host", "127.0.0.1", "--port", str(sched_port),
                 "--dashboard-address", f"127.0.0.1:{free_port()}"]
    # the worker's comm port chosen too: a random one may be the HTTP port picked here
    # (freed, not yet bound), and its HTTP server then moves elsewhere
    worker = [*dask, "worker", f"tcp://127.0.0.1:{sched_port}", "--name", name,
              "--host", "127.0.0.1", "--worker-port", str(free_port()), "--nthreads", "1",
              "--no-nanny", "--dashboard-address", f"127.0.0.1:{worker_http}",
              "--preload", "dask_metrics.worker", *worker_args]
    return processes((scheduler, env), (worker, env)), sched_port, worker_http


def exporter_process(*args: str, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m dask_metrics.exporter ARGS`` to its end (for options that make it exit)."""
    return subprocess.run([sys.executable, "-m", "dask_metrics.exporter", *args], env=dict(env),
                          capture_output=True, text=True, timeout=60)


@contextmanager
def sidecar(*args: str, env: Mapping[str, str] | None = None, port: int | None = None,
            ca_file: str | None = None) -> Iterator[str]:
    """Run ``python -m dask_metrics.exporter`` on a loopback port; yields its base URL once
    healthy (https, trusting ``ca_file``, when that is given)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "dask_metrics.exporter", "--listen", f"127.0.0.1:{port}", *args]
    base = f"{'https' if ca_file else 'http'}://{'localhost' if ca_file else '127.0.0.1'}:{port}"
    with processes((cmd, {**os.environ, **(env or {})})) as (proc,):
        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"exporter exited {proc.returncode}: {proc.stdout.read()}")
            return http_get(base + "/healthz", ca_file=ca_file)[0] == 200

        wait_for(healthy, what="the exporter's /healthz")
        yield base


class Run(NamedTuple):
    code: int
    out: str
    err: str


def collector(*args: str) -> Run:
    """``collector ARGS`` in this process, its stdout and stderr captured."""
    from dask_metrics.collector.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return Run(code, out.getvalue(), err.getvalue())


def collector_process(*args: str, env: Mapping[str, str] | None = None,
                      timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python -m dask_metrics.collector ARGS`` as a program, in a clean environment (by
    default) from the repository's root."""
    return subprocess.run([sys.executable, "-m", "dask_metrics.collector", *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=clean_env() if env is None else dict(env), check=False)


@contextmanager
def preload_cluster(threads: int = 2) -> Iterator[LocalCluster]:
    """An in-process cluster, reachable over TCP from other processes too, whose scheduler
    has the dask-metrics preload (defaults: no Prometheus URL, DAG TTL 300 s)."""
    with LocalCluster(n_workers=1, threads_per_worker=threads, processes=False,
                      protocol="tcp://", host="127.0.0.1", dashboard_address="127.0.0.1:0",
                      scheduler_kwargs={"preload": ["dask_metrics.scheduler"]}) as lc:
        yield lc


@contextmanager
def serve_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` on a loopback port in a background thread; yields the base URL. For what
    a real server cannot be made to do on demand (hang, echo secrets, fail then recover)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.block_on_close = False
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


# ---- files -----------------------------------------------------------------------------------


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", path
    return struct.unpack(">II", head[16:24])


def read_csv(path: Path) -> list[dict[str, str]]:
    """A CSV file the collector wrote, as dicts by column name."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def csv_numbers(path: Path) -> list[list[Any]]:
    """A CSV file's rows, numbers as floats compared to 1e-12: sums taken in another order
    (an export written a chunk at a time) may differ from the whole range's in the last
    bits."""
    def cell(text: str) -> Any:
        try:
            return pytest.approx(float(text), rel=1e-12, abs=1e-9)
        except ValueError:
            return text

    with open(path, newline="", encoding="utf-8") as fh:
        return [[cell(c) for c in row] for row in csv.reader(fh)]
