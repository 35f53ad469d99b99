"""A whole GPU-metrics stack on one machine: a Dask scheduler with the scheduler preload,
workers with the worker preload and one sidecar exporter each, and a real Prometheus
scraping them every second with its data in a folder of the user's.

It is what the demo runs, what every end-to-end test runs (StackOptions.worker_specs and env
shape its workers), and a way to try dask-metrics on a workstation or one HPC node.
Every process is stopped when the ``with`` block ends, however it ends; each one's output
is in ``<folder>/logs/``.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import requests
import yaml

from dask_metrics.atomicfile import atomic_write_text
from dask_metrics.collector.errors import CollectorError
from dask_metrics.contract import UP, WORKER_GPU_INFO
from dask_metrics.exporter.cluster import scheduler_default
from dask_metrics.exporter.scheduler import local_prometheus
from dask_metrics.exporter.scheduler.targets import scrape_jobs

HOST = "127.0.0.1"
START_TRIES = 3  # starts with fresh ports when one was taken in between


class StackError(CollectorError):
    """A part of the stack could not be started; the message says which and why."""


@dataclass(frozen=True)
class WorkerSpec:
    """One worker of the stack, with its sidecar exporter."""

    name: str
    gpus: str | None = None  # CUDA_VISIBLE_DEVICES of the worker and its sidecar (None: as is)
    simulate: int = 0  # simulated GPUs (of StackOptions.simulate_memory each); 0: GPUs via NVML
    env: Mapping[str, str] = field(default_factory=dict)  # more environment for both


@dataclass(frozen=True)
class StackOptions:
    folder: Path
    workers: int = 3
    gpus: Sequence[str] = ()  # real GPUs (UUIDs or NVML indices), dealt round-robin to workers
    simulate_memory: str = "4GiB"  # per simulated GPU, when ``gpus`` is empty
    prometheus_port: int = 0  # 0: any free port
    ready_timeout: float = 90.0
    env: Mapping[str, str] | None = None  # every process's environment (None: this process's)
    worker_specs: Sequence[WorkerSpec] = ()  # the workers exactly; (): from workers and gpus
    sample_interval: float = 0.2  # the sidecars' --interval, seconds
    cluster: str | None = None  # the scheduler's --dask-cluster (None: it derives one)
    rule_files: Sequence[Path] = ()  # Prometheus rules files to load (e.g. the dashboards')

    def worker_list(self) -> list[WorkerSpec]:
        """``worker_specs``, or ``workers`` workers named worker-0, worker-1, ... with the
        ``gpus`` dealt round-robin, or one simulated GPU each when there are none."""
        if self.worker_specs:
            return list(self.worker_specs)
        gpus = self.gpus
        return [WorkerSpec(f"worker-{i}", gpus[i % len(gpus)] if gpus else None,
                           0 if gpus else 1) for i in range(self.workers)]


_PICKED: set[int] = set()


def free_port(host: str = HOST) -> int:
    """A port free on ``host``, below the kernel's ephemeral range: the ports the kernel hands
    out by itself (a Dask worker's comm port, any server bound to port 0) are never one of
    these, so a port picked here stays free until the process it is for binds it. None is
    handed out twice in one process; the kernel's own choice where none is found."""
    below = range(max(1024, _ephemeral_low() - 16384), _ephemeral_low())
    for port in random.sample(below, min(64, len(below))):
        if port in _PICKED:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _PICKED.add(port)
        return port
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's default where unreadable)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def find_prometheus() -> str:
    """The prometheus binary, or a StackError that says how to install it."""
    try:
        return local_prometheus.find_prometheus()
    except local_prometheus.LocalPrometheusError as exc:
        raise StackError(str(exc)) from None


def scrape_config(targets_url: str, rule_files: Sequence[Path] = ()) -> dict[str, Any]:
    """Prometheus' configuration: every endpoint the scheduler lists at ``targets_url``
    (its /dask-metrics/targets), every second, and ``rule_files``."""
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(f) for f in rule_files],
        "scrape_configs": scrape_jobs(targets_url, refresh="1s"),
    }


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    argv: list[str]
    env: Mapping[str, str] | None

    def tail(self, lines: int = 5) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])


@dataclass
class LocalStack:
    """``with LocalStack(options) as stack:`` everything is up and scraped inside the block."""

    options: StackOptions
    scheduler_address: str = ""
    dashboard_url: str = ""
    prometheus_url: str = ""
    worker_names: list[str] = field(default_factory=list)
    _processes: list[_Process] = field(default_factory=list)
    _started: float = 0.0

    @property
    def started(self) -> float:
        """When start() began (Unix time): every series of this run is newer."""
        return self._started

    def pid(self, name: str) -> int:
        """The process id of ``name``: "prometheus", "scheduler", a worker's name, or
        "<worker>-exporter"."""
        return next(p.popen.pid for p in self._processes if p.name == name)

    @property
    def cluster(self) -> str:
        """The dask_cluster label of this stack's series: the scheduler's --dask-cluster, else
        what it derives (<host>-<scheduler port>), which its workers and sidecars learn."""
        return self.options.cluster or scheduler_default(self.scheduler_address)

    @property
    def logs(self) -> Path:
        return self.options.folder / "logs"

    @property
    def prometheus_data(self) -> Path:
        return self.options.folder / "prometheus"

    def __enter__(self) -> LocalStack:
        attempt = 1
        while True:
            try:
                self.start()
                return self
            except StackError:
                again = attempt < START_TRIES and self._port_taken()
                self.stop()
                if not again:
                    raise
                attempt += 1
            except BaseException:
                self.stop()
                raise

    def _port_taken(self) -> bool:
        """Whether a process that exited lost its port: free_port() hands out a port that
        is free when asked, and another program may take it before ours binds it."""
        for proc in self._processes:
            if proc.popen.poll() is not None:
                with contextlib.suppress(OSError):
                    if "Address already in use" in proc.log.read_text(errors="replace"):
                        return True
        return False

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        opts = self.options
        prometheus = find_prometheus()
        self._started = time.time()
        for folder in (self.logs, self.prometheus_data):
            folder.mkdir(parents=True, exist_ok=True)
        sched_port, dash_port = free_port(), free_port()
        prom_port = opts.prometheus_port or free_port()
        self.scheduler_address = f"tcp://{HOST}:{sched_port}"
        self.dashboard_url = f"http://{HOST}:{dash_port}"
        self.prometheus_url = f"http://{HOST}:{prom_port}"
        specs = opts.worker_list()
        self.worker_names = [spec.name for spec in specs]
        sidecars = {name: free_port() for name in self.worker_names}

        config = opts.folder / "prometheus.yml"
        targets = f"{self.dashboard_url}/dask-metrics/targets"
        atomic_write_text(config, yaml.safe_dump(scrape_config(targets, opts.rule_files)))
        self._spawn("prometheus", [
            prometheus, f"--config.file={config}", f"--storage.tsdb.path={self.prometheus_data}",
            f"--web.listen-address={HOST}:{prom_port}", "--storage.tsdb.retention.time=7d",
            "--log.level=warn"])
        dask = [sys.executable, "-m", "dask"]
        self._spawn("scheduler", [
            *dask, "scheduler", "--host", HOST, "--port", str(sched_port),
            "--dashboard-address", f"{HOST}:{dash_port}", "--pid-file",
            str(self.logs / "scheduler.pid"), "--preload", "dask_metrics.scheduler",
            "--prometheus-url", self.prometheus_url,
            *(["--dask-cluster", opts.cluster] if opts.cluster else [])])
        for spec in specs:
            name = spec.name
            info = self.logs / f"{name}.identity.json"
            info.unlink(missing_ok=True)  # an earlier run's: its pid is gone
            env = dict(spec.env)
            if spec.gpus is not None:
                env["CUDA_VISIBLE_DEVICES"] = spec.gpus
            simulate = ["--simulate", str(spec.simulate), "--simulate-memory",
                        opts.simulate_memory] if spec.simulate else []
            self._spawn(name, [
                *dask, "worker", self.scheduler_address, "--name", name, "--nthreads", "1",
                "--nworkers", "1", "--no-nanny", "--host", HOST, "--dashboard-address",
                f"{HOST}:{free_port()}", "--preload", "dask_metrics.worker",
                "--worker-info-file", str(info), "--serve-metrics", "false",
                "--metrics-url", f"{HOST}:{sidecars[name]}", *simulate], env)
            self._spawn(f"{name}-exporter", [
                sys.executable, "-m", "dask_metrics.exporter",
                "--listen", f"{HOST}:{sidecars[name]}", "--worker-info-file", str(info),
                "--interval", f"{opts.sample_interval:g}", *simulate], env)
        self.wait(f"Prometheus at {self.prometheus_url}", self._prometheus_ready)
        self.wait(f"{len(specs)} worker(s) with their GPU series in Prometheus",
                   self._all_scraped)

    def _spawn(self, name: str, argv: list[str], env: Mapping[str, str] | None = None,
               again: bool = False) -> None:
        log = self.logs / f"{name}.log"
        base = os.environ if self.options.env is None else self.options.env
        with open(log, "ab" if again else "wb") as out:  # a restart's log follows the first
            popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env={**base, **(env or {})})
        self._processes.append(_Process(name, popen, log, argv, env))

    def restart(self, name: str) -> None:
        """Stop process ``name`` (SIGTERM, then SIGKILL after 15 s) and start it again as it
        was started, on the same port: a restarted scheduler, sidecar or Prometheus."""
        proc = next(p for p in self._processes if p.name == name)
        proc.popen.terminate()
        try:
            proc.popen.wait(15)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait()
        self._processes.remove(proc)
        self._spawn(name, proc.argv, proc.env, again=True)

    def wait(self, what: str, ready: Callable[[], bool]) -> None:
        """Poll ``ready`` until it holds; fail early, naming the process, if one exits."""
        deadline = time.monotonic() + self.options.ready_timeout
        while True:
            for proc in self._processes:
                if proc.popen.poll() is not None:
                    raise StackError(f"{proc.name} exited with {proc.popen.returncode} while "
                                     f"waiting for {what}: {proc.tail()} (log: {proc.log})")
            try:
                if ready():
                    return
            except (requests.RequestException, ValueError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise StackError(f"timed out after {self.options.ready_timeout:g} s waiting "
                                 f"for {what}; logs in {self.logs}")
            time.sleep(0.2)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant PromQL query."""
        resp = requests.get(f"{self.prometheus_url}/api/v1/query", params={"query": expr},
                            timeout=5)
        resp.raise_for_status()
        return list(resp.json()["data"]["result"])

    def _prometheus_ready(self) -> bool:
        return requests.get(f"{self.prometheus_url}/-/ready", timeout=2).status_code == 200

    def scraped_since(self, metric: str, since: float, value: float | None = None) -> bool:
        """Whether Prometheus holds a sample of ``metric`` (equal to ``value``, if given) for
        every worker taken after ``since``: the data folder also holds earlier runs' series,
        still within Prometheus' 5-minute lookback, so only fresh samples count. timestamp()
        of a bare selector is its sample's time; of an expression (``m == 1``) it would be
        the query's own time, fresh whatever was scraped, hence the comparison apart."""
        expr = f"timestamp({metric}) > {since}"
        if value is not None:
            expr += f" and {metric} == {value!r}"
        return set(self.worker_names) <= {r["metric"].get("worker") for r in self.query(expr)}

    def _all_scraped(self) -> bool:
        """Every worker's GPUs up at its sidecar and known to the scheduler, this run."""
        return (self.scraped_since(UP.name, self._started, 1)
                and self.scraped_since(WORKER_GPU_INFO.name, self._started))

    def stop(self) -> None:
        """Workers first, closed by the scheduler (a worker stopped by a signal drops its
        connection, and the scheduler logs the broken comm with a traceback), then the
        sidecars, the scheduler, and Prometheus last (it keeps its data). SIGTERM for what is
        still running, then SIGKILL for what is still there after 15 s."""
        self._close_workers()
        first = [p for p in self._processes if p.name not in ("scheduler", "prometheus")]
        for wave in (first, *([p for p in self._processes if p.name == name]
                              for name in ("scheduler", "prometheus"))):
            for proc in wave:
                if proc.popen.poll() is None:
                    proc.popen.terminate()
            deadline = time.monotonic() + 15
            for proc in wave:
                try:
                    proc.popen.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.popen.kill()
                    proc.popen.wait()
        self._processes.clear()

    def _close_workers(self, timeout: float = 10.0) -> None:
        """Ask the scheduler to close every worker, as a cluster manager does, and give the
        worker processes ``timeout`` seconds to exit; best effort: signals follow anyway."""
        scheduler = next((p for p in self._processes if p.name == "scheduler"), None)
        if scheduler is None or scheduler.popen.poll() is not None:
            return
        from distributed import Client  # the demo has it loaded; a stack without it is odd

        workers = [p for p in self._processes if p.name in self.worker_names]
        try:
            with Client(self.scheduler_address, timeout=timeout, set_as_default=False) as client:
                client.retire_workers(close_workers=True)
        except Exception:  # a scheduler that cannot do it: the signals below stop them
            return
        deadline = time.monotonic() + timeout
        for proc in workers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
