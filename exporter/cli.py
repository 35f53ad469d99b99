"""``dask-metrics-exporter``: the GPU sidecar, one per Dask worker."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import ssl
import sys
import threading
import time

from prometheus_client import CollectorRegistry, ProcessCollector

from dask_metrics import __version__
from dask_metrics.configfile import ConfigError, load_yaml
from dask_metrics.exporter.cluster import sidecar_start
from dask_metrics.exporter.config import (
    DEFAULT_PORT,
    ENV_PREFIX,
    OPTIONS,
    ExporterConfig,
    parse_listen,
    resolve,
)
from dask_metrics.exporter.gpu_collector import GpuCollector
from dask_metrics.exporter.gpu_source import GpuSource, SourceUnavailable
from dask_metrics.exporter.http import make_app, serve, tls_context
from dask_metrics.exporter.learn_cluster import learn_in_background
from dask_metrics.exporter.nvml_source import NvmlSource
from dask_metrics.exporter.sampler import Sampler
from dask_metrics.exporter.scrapes import ScrapeLog
from dask_metrics.exporter.simulated import SimulatedSource
from dask_metrics.exporter.target import TargetSource
from dask_metrics.options import add_arguments

EXIT_USAGE = 2
EXIT_NO_NVML = 3
# worker-preload options, not the sidecar's
WORKER_ONLY = ("serve_metrics", "nvml", "metrics_url")

logger = logging.getLogger("dask_metrics.exporter")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dask-metrics-exporter",
        description="Serve NVML GPU metrics of one Dask worker for Prometheus "
        f"(/metrics and /healthz, port {DEFAULT_PORT} by default).",
        epilog=f"Every option can also be set as {ENV_PREFIX}<NAME> (e.g. {ENV_PREFIX}INTERVAL)"
        " or in the --config YAML file; the command line wins, then the environment.",
    )
    parser.add_argument("--config", metavar="PATH",
                        help=f"YAML file of options (or {ENV_PREFIX}CONFIG)")
    add_arguments(parser, [o for o in OPTIONS if o.name not in WORKER_ONLY])
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def load_config(argv: list[str] | None) -> ExporterConfig:
    args = vars(build_parser().parse_args(argv))
    path = args.pop("config") or os.environ.get(ENV_PREFIX + "CONFIG")
    file_data = load_yaml(path) if path else None
    return resolve(args, os.environ, file_data, origin=path or "config file")


def make_sampler(config: ExporterConfig, target: TargetSource, unnamed: bool = False,
                 scrapes: ScrapeLog | None = None) -> Sampler:
    """The sampler of the sidecar and of the worker preload: NVML, or simulated GPUs, its
    peak window following ``scrapes`` (those of the /metrics that serves it).

    Simulated GPUs take their UUIDs from the host and the worker label, so a worker preload
    and its sidecar agree; ``unnamed`` (a sidecar told no worker name, whose label is only
    the host name) adds the pid, so two such sidecars on one host still differ."""

    def instance() -> tuple[str, str]:
        t = target()
        return t.hostname, f"{t.worker} pid {os.getpid()}" if unnamed else t.worker

    source: GpuSource = (SimulatedSource(config.simulate, config.simulate_memory, instance)
                         if config.simulate else NvmlSource())
    return Sampler(source, target, interval=config.interval, peak_window=config.peak_window,
                   energy_interval=config.energy_interval, scrapes=scrapes,
                   longest_window=config.peak_window_max)


def fail(code: int, message: str) -> int:
    print(f"dask-metrics-exporter: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    try:
        config = load_config(argv)
        host, port = parse_listen(config.listen)
    except (ConfigError, ValueError) as exc:
        return fail(EXIT_USAGE, str(exc))
    logging.basicConfig(level=config.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # --simulate N serves N simulated GPUs: the worker-info file's GPU list (the worker's
    # real GPUs, none on a machine without any) gives way; its name and pid still count.
    scheduler = config.scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    start = sidecar_start(config.dask_cluster, config.worker_info_file, scheduler)
    target = TargetSource(worker=config.worker, gpus=config.gpus,
                          pids=frozenset(config.pids), info_file=config.worker_info_file,
                          file_gpus=not config.simulate, cluster=start)
    unnamed = not (config.worker or os.environ.get("DASK_WORKER_NAME")
                   or config.worker_info_file)
    scrapes = ScrapeLog()
    sampler = make_sampler(config, target, unnamed=unnamed, scrapes=scrapes)
    try:
        sampler.source.start()
    except SourceUnavailable as exc:
        return fail(EXIT_NO_NVML, f"{exc}. Run with --simulate N to serve simulated GPUs on "
                    "a machine without any.")
    first = sampler.sample_once()
    if config.simulate:
        logger.warning("serving %d SIMULATED GPU(s): not real measurements", config.simulate)

    process = CollectorRegistry()
    ProcessCollector(registry=process)
    gpu = GpuCollector(lambda: (sampler.snapshot,))
    stale_after = max(5 * config.interval, 5.0)

    def healthy() -> tuple[bool, str]:
        age = time.time() - sampler.snapshot.timestamp
        if not sampler.alive or age > stale_after:
            return False, f"sampler stalled: last sample {age:.1f} s ago"
        return True, "ok" if sampler.snapshot.nvml_up else "ok (NVML unavailable, retrying)"

    try:
        tls = None
        if config.tls_cert_file and config.tls_key_file:
            tls = tls_context(config.tls_cert_file, config.tls_key_file,
                              config.tls_client_ca_file)
    except (OSError, ssl.SSLError) as exc:
        return fail(EXIT_USAGE, f"cannot load the TLS certificate or key: {exc}")
    # Sampling before serving: a /healthz answered in between would say "stalled" (503).
    sampler.start()
    try:
        app = make_app(gpu, process, healthy, version=lambda: sampler.snapshot,
                       scraped=scrapes.scraped)
        httpd, _ = serve(host, port, app, tls, max_connections=config.max_connections,
                         timeout=config.connection_timeout)
    except OSError as exc:
        sampler.stop(timeout=2.0)
        return fail(1, f"cannot listen on {config.listen}: {exc.strerror or exc}")
    logger.info("serving %d GPU(s) of worker %r on %s://%s:%d/metrics", len(first.gpus),
                first.worker, "https" if tls else "http",
                f"[{host}]" if ":" in host else host, httpd.server_port)
    if start is None and not config.worker_info_file and scheduler:
        def learned(name: str) -> None:
            target.set_cluster(name)
            logger.info("dask_cluster %r, from the scheduler at %s", name, scheduler)

        learn_in_background(scheduler, learned)
        logger.info("asking the scheduler at %s for the dask_cluster name: no GPU series "
                    "until it answers (or give --dask-cluster)", scheduler)
    elif first.cluster is None:  # series only once the worker-info file names the cluster
        logger.warning("dask_cluster not known yet: no GPU series until the worker-info file "
                       "names it (or give --dask-cluster)")

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # HUP: a closed terminal
        signal.signal(sig, lambda *_: stop.set())
    # Not a bare stop.wait(): the kernel hands SIGTERM to any thread, and Python runs the
    # handler only in the main thread once it wakes; blocked for good, it never did (under
    # load, with many threads, the signal rarely lands on the main one). Wake up to look.
    while not stop.wait(1.0):  # once a second: a stop within 1 s, idle wake-ups few
        pass
    # Bounded all the way: the accept loop stops within a poll (0.5 s) plus the 1 s a
    # connection over the cap may wait; answers under way get 2 s to finish; connection
    # threads are daemons, so a stuck client never holds the exit.
    logger.info("shutting down")
    httpd.shutdown()
    httpd.server_close()
    if not httpd.drain(timeout=2.0):
        logger.info("leaving unfinished connections behind")
    sampler.stop(timeout=2.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
