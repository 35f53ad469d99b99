"""``--prometheus local``: a Prometheus beside the scheduler, for one machine with none.

It runs the ``prometheus`` binary on PATH, scraping the scheduler's own
``/dask-metrics/targets``, on a loopback port, with its data in a folder of its own that is
kept after the cluster stops (a later ``collector`` command reads it). It dies with the
scheduler's process (Linux: the parent-death signal) and is stopped with the plugin.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import IO

import yaml

from dask_metrics.atomicfile import atomic_write_text
from dask_metrics.exporter.scheduler.targets import scrape_jobs

logger = logging.getLogger(__name__)

LOCAL = "local"
HOST = "127.0.0.1"
SCRAPE = "5s"  # one machine: fine enough for a notebook, light on its CPU
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
INSTALL = ("Prometheus is not installed: 'sudo apt-get install prometheus' (Debian/Ubuntu), "
           "or put a prometheus binary on PATH")


class LocalPrometheusError(ValueError):
    """A local Prometheus that cannot run; the message is one line saying why."""


def find_prometheus() -> str:
    """The prometheus binary, or a LocalPrometheusError that says how to install it."""
    found = shutil.which("prometheus")
    if not found:
        raise LocalPrometheusError(INSTALL)
    return found


def default_folder(cluster: str) -> Path:
    """Where a cluster's local Prometheus keeps its data unless told: one folder per
    cluster, under the system's temporary directory."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", cluster) or "cluster"
    return Path(tempfile.gettempdir()) / "dask-metrics-prometheus" / safe


def config(targets_url: str) -> dict[str, object]:
    return {"global": {"scrape_interval": SCRAPE, "scrape_timeout": SCRAPE,
                       "evaluation_interval": SCRAPE},
            "scrape_configs": scrape_jobs(targets_url, refresh=SCRAPE)}


class LocalPrometheus:
    """One Prometheus process for ``targets_url`` with its data in ``folder``, on ``port``
    (0: a free one)."""

    def __init__(self, targets_url: str, folder: Path, port: int = 0) -> None:
        self.targets_url, self.folder, self.port = targets_url, Path(folder), port
        self._process: subprocess.Popen[bytes] | None = None
        self._held: IO[bytes] | None = None

    @classmethod
    def of_cluster(cls, targets_url: str | None, cluster: str, folder: str | None,
                   port: int) -> LocalPrometheus:
        """The local Prometheus of ``cluster``: in ``folder`` (default: the cluster's own)."""
        if not targets_url:
            raise LocalPrometheusError("--prometheus local scrapes the scheduler's "
                                       "/dask-metrics/targets: the scheduler needs its HTTP "
                                       "server (the dashboard)")
        return cls(targets_url, Path(folder) if folder else default_folder(cluster), port)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        """Start it and wait until it is ready; LocalPrometheusError (one line) where it
        cannot run, with nothing left running."""
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the process (from the thread that lives as long as the scheduler: the
        parent-death signal follows the thread that started it)."""
        binary = find_prometheus()
        self.port = _free_port(self.port)
        data = self.folder / "data"
        try:
            data.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise LocalPrometheusError(f"the local Prometheus' folder {self.folder}: "
                                       f"{exc.strerror}") from None
        self._held = _lock(self.folder)
        atomic_write_text(self.folder / "prometheus.yml", yaml.safe_dump(config(self.targets_url)))
        log = open(self.folder / "prometheus.log", "ab")  # noqa: SIM115 (the child's, closed below)
        with log:
            self._process = subprocess.Popen(
                [binary, f"--config.file={self.folder / 'prometheus.yml'}",
                 f"--storage.tsdb.path={data}", f"--web.listen-address={HOST}:{self.port}",
                 "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent, cwd=self.folder)

    def wait_ready(self) -> None:
        """Wait until it answers /-/ready (READY_TIMEOUT at most); stopped where it fails."""
        try:
            self._poll_ready()
        except LocalPrometheusError:
            self.stop()
            raise
        # said at warning level: the one line that tells where the data is, shown by default
        logger.warning("dask-metrics: a local Prometheus at %s scrapes this cluster every %s, "
                       "data in %s (kept after the cluster stops)", self.url, SCRAPE,
                       self.folder)

    def _poll_ready(self) -> None:
        log = self.folder / "prometheus.log"
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise LocalPrometheusError(f"the local Prometheus exited at its start; its "
                                           f"log: {log}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
            time.sleep(0.2)
        raise LocalPrometheusError(f"the local Prometheus was not ready after "
                                   f"{READY_TIMEOUT:g} s; its log: {log}")

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        held, self._held = self._held, None
        if held is not None:
            held.close()  # the lock goes with it


def _lock(folder: Path) -> IO[bytes]:
    """Hold ``folder`` for this process: two Prometheus on one data folder corrupt it, and
    not every Prometheus build locks it itself. The kernel lets go when the process ends."""
    handle = open(folder / "dask-metrics.lock", "ab")  # noqa: SIM115 (held until stop())
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise LocalPrometheusError(
            f"a Prometheus already runs on {folder}: another local Prometheus of this "
            "cluster; stop it, or give --local-prometheus-dir another folder") from None
    return handle


def _free_port(port: int) -> int:
    """``port`` where it is free on the loopback (0: one the system picks); one line where
    it is taken."""
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError as exc:
            raise LocalPrometheusError(f"the local Prometheus cannot listen on {HOST}:{port} "
                                       f"({exc.strerror}): give --local-prometheus-port "
                                       "another port, or 0") from None
        return probe.getsockname()[1]


def _die_with_parent() -> None:
    """In the child: SIGTERM when the scheduler's process dies, however it dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
