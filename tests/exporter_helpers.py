"""Start real exporter processes and scrape them, polling for readiness with deadlines."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0, ca_file: str | None = None) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=ca_file) if ca_file else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


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


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """All samples of a /metrics page, keyed by (sample name, sorted labels)."""
    status, text = http_get(url)
    if status != 200:
        raise ValueError(f"{url} answered {status}")
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def values(samples: Samples, name: str, **labels: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return {lab: v for (n, lab), v in samples.items() if n == name and want <= set(lab)}


def value(samples: Samples, name: str, **labels: str) -> float:
    found = values(samples, name, **labels)
    if len(found) != 1:
        raise KeyError(f"{name}{labels}: {len(found)} samples")
    return next(iter(found.values()))


@contextmanager
def sidecar(
    *args: str,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
    ca_file: str | None = None,
) -> Iterator[str]:
    """Run ``python -m dask_metrics.exporter`` on a loopback port; yields its base URL once healthy
    (https, trusting ``ca_file``, when that is given)."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "dask_metrics.exporter", "--listen", f"127.0.0.1:{port}", *args]
    proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"{'https' if ca_file else 'http'}://{'localhost' if ca_file else '127.0.0.1'}:{port}"
    try:
        def healthy() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"exporter exited {proc.returncode}: {proc.stdout.read()}")
            return http_get(base + "/healthz", ca_file=ca_file)[0] == 200

        wait_for(healthy, what="the exporter's /healthz")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()


@contextmanager
def processes(*cmds: tuple[list[str], Mapping[str, str]]) -> Iterator[list[subprocess.Popen]]:
    """Run commands (argv, env) in the background; stop them all, whatever happens.

    Each process's output is in ``proc.output`` once the block has ended.
    """
    procs: list[subprocess.Popen] = []
    try:
        for argv, env in cmds:
            procs.append(subprocess.Popen(argv, env=dict(env), stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True))
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
