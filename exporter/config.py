"""Exporter options, one table for every way to set them.

Precedence, highest first: command-line options, ``DASK_METRICS_EXPORTER_<NAME>``
environment variables, a YAML file (``--config``) or, in a worker, the Dask config section
``dask-metrics.exporter``, then the defaults below.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dask_metrics.configfile import ConfigError, parse_bytes
from dask_metrics.contract import CLUSTER_ENV
from dask_metrics.options import Option
from dask_metrics.values import finite_number, truth, whole_number

ENV_PREFIX = "DASK_METRICS_EXPORTER_"
DEFAULT_PORT = 9446  # clear of Dask (8786/8787), node_exporter (9100), dcgm-exporter (9400)


# --simulate's ceiling. The largest nodes hold 8 GPUs (HGX/DGX; 16-20 in a few PCIe boxes),
# and MIG splits one GPU into at most 7 instances: 8 x 7 = 56 devices is as many as a node
# shows (DCGM, NVIDIA's own exporter, caps a node at 32). 64 covers all that with room; more
# is a typo (100000 simulated GPUs would be a ~100 MB page rendered at every scrape).
MAX_SIMULATED_GPUS = 64
MAX_INTERVAL = 3600.0  # one sample an hour is already useless for a live dashboard
MAX_PEAK_WINDOW = 7 * 86400.0  # a week of samples kept in memory at most
MAX_CONNECTIONS = 10_000  # one thread each: beyond this the cap does not cap anything
MAX_CONNECTION_TIMEOUT = 3600.0
MAX_SIMULATED_MEMORY = 2**40  # 1 TiB: today's largest GPUs have 192-288 GB
DEFAULT_MAX_CONNECTIONS = 64
DEFAULT_CONNECTION_TIMEOUT = 10.0


def _seconds(high: float) -> Callable[[Any], float]:
    def parse(value: Any) -> float:
        number = finite_number(value)
        if number is None or not 0 < number <= high:
            raise ValueError(f"must be a positive number of seconds, at most {high:g}")
        return number
    return parse


_positive_float = _seconds(MAX_INTERVAL)


def _int_between(low: int, high: int) -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        number = whole_number(value)
        if number is None:
            raise ValueError(f"must be a whole number {low}-{high}")
        if not low <= number <= high:
            raise ValueError(f"must be {low}-{high}")
        return number
    return parse


_simulate = _int_between(0, MAX_SIMULATED_GPUS)


def _memory(value: Any) -> float:
    number = parse_bytes(value)
    if number > MAX_SIMULATED_MEMORY:
        raise ValueError("must be at most 1TiB")
    return number


def _text(value: Any) -> str:
    """Label text: an undecodable byte (a surrogate, from a non-UTF-8 argument or file name)
    would fail every scrape's encoding."""
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{text!r} is not UTF-8 text") from None
    return text


def _list(value: Any) -> str:
    """A comma-separated list, also given as a YAML list."""
    return _text(",".join(map(str, value)) if isinstance(value, list | tuple) else value)


def _pids(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    try:
        return tuple(int(p) for p in (str(i).strip() for i in items) if p)
    except ValueError:
        raise ValueError(f"must be process ids, comma-separated (got {value!r})") from None


def _bool(value: Any) -> bool:
    found = truth(value)
    if found is None:
        raise ValueError("must be true or false")
    return found


def parse_listen(value: Any) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (all interfaces) or ``[IPV6]:PORT``."""
    text = str(value).strip()
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError("must look like HOST:PORT, :PORT or [::1]:PORT")
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise ValueError("port must be a number 0-65535 (0: any free port)")
    return host.strip("[]") or "0.0.0.0", number


_CREDENTIALS = re.compile(r"//[^/@\s]*@")


def _metrics_url(value: Any) -> str:
    """Where GPU series are served: a URL, or ``HOST:PORT`` for ``http://HOST:PORT/metrics``."""
    text = _text(value).strip()
    url = urlsplit(text if "://" in text else f"http://{text}")
    try:
        port = url.port
    except ValueError:
        port = None
    if url.scheme not in ("http", "https") or not url.hostname or port is None:
        raise ValueError("must look like HOST:PORT or http(s)://HOST:PORT/PATH")
    if url.username is not None or url.password is not None:  # served to anyone who asks
        raise ValueError("must hold no credentials: they go in Prometheus' scrape config")
    return urlunsplit((url.scheme, url.netloc, url.path or "/metrics", "", ""))


def _listen(value: Any) -> str:
    parse_listen(value)
    return str(value).strip()


def _level(value: Any) -> str:
    text = str(value).upper()
    if text not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError("must be debug, info, warning or error")
    return text


@dataclass(frozen=True)
class ExporterConfig:
    listen: str = f":{DEFAULT_PORT}"
    interval: float = 0.5
    peak_window: float = 30.0
    peak_window_max: float = 600.0
    energy_interval: float = 5.0
    gpus: str | None = None
    worker: str | None = None
    worker_info_file: str | None = None
    pids: tuple[int, ...] = ()
    simulate: int = 0
    simulate_memory: float = 16 * 2**30
    serve_metrics: bool = True
    nvml: bool | None = None  # worker preload: None follows distributed.diagnostics.nvml
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    connection_timeout: float = DEFAULT_CONNECTION_TIMEOUT
    dask_cluster: str | None = None
    scheduler: str | None = None
    metrics_url: str | None = None
    log_level: str = "INFO"

    def __post_init__(self) -> None:
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("--tls-cert-file and --tls-key-file go together")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise ConfigError("--tls-client-ca-file needs --tls-cert-file and --tls-key-file")
        if self.peak_window < self.interval:
            raise ConfigError(
                f"peak-window ({self.peak_window:g} s) must be at least the interval "
                f"({self.interval:g} s)"
            )


OPTIONS: tuple[Option, ...] = (
    Option("listen", _listen, f"address to serve /metrics and /healthz on (default "
           f":{DEFAULT_PORT}, all interfaces)", "ADDR:PORT"),
    Option("interval", _positive_float, "seconds between two NVML samples "
           f"(default {ExporterConfig.interval:g})", "S"),
    Option("peak_window", _seconds(MAX_PEAK_WINDOW), "the shortest trailing window of "
           "dask_gpu_memory_peak_bytes; it grows to cover each scraper's gap between two "
           f"scrapes (default {ExporterConfig.peak_window:g})", "S"),
    Option("peak_window_max", _seconds(MAX_PEAK_WINDOW), "the longest the peak window grows "
           f"to (default {ExporterConfig.peak_window_max:g}; --peak-window or less: fixed)",
           "S"),
    Option("energy_interval", _positive_float, "seconds between two reads of NVML's energy "
           "counter, which costs ~4 ms of CPU per GPU on an H100; in between it advances by "
           f"power x time (default {ExporterConfig.energy_interval:g}; at most --interval: every "
           "sample)", "S"),
    Option("gpus", _list, "GPUs of the worker: NVML indices, GPU-/MIG- UUIDs, comma-separated, "
           "or 'all' (every device CUDA_VISIBLE_DEVICES lists; default: its first, as "
           "dask-cuda's workers use, else the worker-info file, else every GPU)", "LIST"),
    Option("worker", _text, "the worker label (default: DASK_WORKER_NAME, else the "
           "worker-info file, else the host name)", "NAME"),
    Option("worker_info_file", _text, "worker-info file the worker preload writes (sidecar: "
           "read it; worker: write it)", "PATH"),
    Option("pids", _pids, "pids whose GPU memory is exported per process, comma-separated",
           "PIDS"),
    Option("simulate", _simulate, "serve N simulated GPUs instead of NVML (labelled "
           f"simulated=\"true\", N at most {MAX_SIMULATED_GPUS}); attached to a worker, they "
           "mirror its CPU and memory use", "N"),
    Option("simulate_memory", _memory, "memory of each simulated GPU (default "
           f"{ExporterConfig.simulate_memory / 2**30:g}GiB)",
           "BYTES"),
    Option("serve_metrics", _bool, "worker preload only: sample and serve GPU series on the "
           "worker's /metrics (false: only publish the identity, for a sidecar)", "BOOL"),
    Option("nvml", _bool, "worker preload only: true starts NVML even when Dask's "
           "distributed.diagnostics.nvml is False, false never starts it (default: as Dask)",
           "BOOL"),
    Option("tls_cert_file", _text, "sidecar: serve HTTPS with this PEM certificate (chain)",
           "PATH"),
    Option("tls_key_file", _text, "sidecar: the PEM private key of --tls-cert-file", "PATH"),
    Option("tls_client_ca_file", _text, "sidecar: require client certificates signed by these "
           "PEM CAs (mutual TLS)", "PATH"),
    Option("max_connections", _int_between(1, MAX_CONNECTIONS), "sidecar: connections served "
           f"at once (default {DEFAULT_MAX_CONNECTIONS}); one more waits up to 1 s for a free "
           "slot, then gets 503 (HTTPS: is closed)", "N"),
    Option("connection_timeout", _seconds(MAX_CONNECTION_TIMEOUT), "sidecar: seconds a "
           "client has for the TLS handshake and its request, and for each write of the answer "
           f"(default {DEFAULT_CONNECTION_TIMEOUT:g})", "S"),
    Option("dask_cluster", _text, "the dask_cluster label of every series (default: "
           "DASK_METRICS_CLUSTER, else Dask config dask-metrics.cluster, else what the "
           "scheduler says, through the worker-info file)", "NAME"),
    Option("scheduler", _text, "sidecar: the Dask scheduler's address, to learn the "
           "dask_cluster name from when no worker-info file names it (default: "
           "DASK_SCHEDULER_ADDRESS)", "ADDRESS"),
    Option("metrics_url", _metrics_url, "worker preload only: where this worker's GPU series "
           "are served when a sidecar serves them (HOST:PORT or URL), listed in the "
           "scheduler's /dask-metrics/targets (default: the worker's own /metrics where the "
           "preload serves them there)", "URL"),
    Option("log_level", _level, "debug, info, warning or error (default "
           f"{ExporterConfig.log_level.lower()})", "LEVEL"),
)


assert {o.name for o in OPTIONS} == {f.name for f in fields(ExporterConfig)}


def resolve(
    cli: Mapping[str, Any],
    environ: Mapping[str, str] = os.environ,
    file_data: Mapping[str, Any] | None = None,
    origin: str = "config file",
) -> ExporterConfig:
    """Merge the layers; ``cli`` holds only options the user gave (no ``None`` values)."""
    known = {o.name: o for o in OPTIONS}
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if file_data:
        normalised = {str(k).replace("-", "_"): v for k, v in file_data.items()}
        unknown = sorted(set(normalised) - set(known))
        if unknown:
            raise ConfigError(f"{origin}: unknown option {unknown[0]!r}")
        layers.append((origin, normalised))
    layers.append((
        "environment",
        {o.name: environ[o.env(ENV_PREFIX)] for o in OPTIONS if environ.get(o.env(ENV_PREFIX))},
    ))
    if environ.get(CLUSTER_ENV, "").strip():  # the name shared with the scheduler preload
        layers[-1][1].setdefault("dask_cluster", environ[CLUSTER_ENV])
    layers.append(("command line", {k: v for k, v in cli.items() if v is not None}))
    values: dict[str, Any] = {}
    for origin_name, layer in layers:
        for name, raw in layer.items():
            if raw is None:
                continue
            try:
                values[name] = known[name].parse(raw)
            except (TypeError, ValueError) as exc:
                where = {
                    "environment": known[name].env(ENV_PREFIX),
                    "command line": known[name].flag,
                }.get(origin_name, name)
                shown = _CREDENTIALS.sub("//***@", str(raw))  # a URL's, never echoed
                raise ConfigError(f"{where}={shown!r} ({origin_name}): {exc}") from None
    return ExporterConfig(**values)
