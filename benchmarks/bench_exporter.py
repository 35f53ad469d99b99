#!/usr/bin/env python
"""Benchmark the GPU sidecar (``python -m dask_metrics.exporter``) against ``nvitop-exporter``.

Both exporters run side by side as subprocesses on the same NVML driver (the test suite's fake
one, ``tests/fake_nvml.py``, or with ``--driver real`` the machine's own) with the same
sampling interval. For each GPU count it measures:

- scrape latency: sequential GETs of ``/metrics``, one fresh TCP connection each, with the
  same raw-socket client for both (median and p99 over every scrape of every round);
- CPU per scrape: the exporter's CPU time during a burst of scrapes, minus its idle CPU rate
  times the burst's duration, divided by the number of scrapes;
- CPU per sample: CPU time over an idle window (no scrapes) divided by the sampling rounds in
  it (ours: ``dask_gpu_exporter_samples_total``; nvitop: window / interval);
- resident memory (VmRSS) after warm-up, and what one scrape returns (bytes, samples).

CPU time is the whole process's (all threads, exited ones included), read with nanosecond
resolution from the process CPU clock (``clock_gettime`` on ``~pid << 3 | 2``), falling back
to ``/proc/PID/stat``. Bursts alternate between the exporters, round after round; CPU
figures are medians over rounds. Usage::

    python benchmarks/bench_exporter.py --gpus 1,8,64 --scrapes 200 --out results.md
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import platform
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- process measurements -------------------------------------------------------------------
def _cpu_from_proc(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime, all threads


def _cpu_clock_works(pid: int) -> bool:
    try:
        time.clock_gettime_ns(((~pid) << 3) | 2)
    except OSError:
        return False
    return True


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of a whole process, threads included."""
    if _cpu_clock_works(pid):
        # CPUCLOCK_SCHED of the process: ns resolution, includes threads that have exited.
        return time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9
    return _cpu_from_proc(pid)


def cpu_ticks() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs: hypervisor steal inflates every timing here."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    return values[7] if len(values) > 7 else 0, sum(values[:8])


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise ValueError(f"no VmRSS for pid {pid}")


# -- HTTP -----------------------------------------------------------------------------------
#: Request headers: "text" asks for nothing (Prometheus text 0.0.4, uncompressed, as curl);
#: "prometheus" sends what a Prometheus server sends by default (OpenMetrics, gzip).
HEADERS = {
    "text": "",
    "prometheus": "Accept: application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,"
    "*/*;q=0.2\r\nAccept-Encoding: gzip\r\n",
}
REQUEST = {"headers": ""}


def get_metrics(port: int, timeout: float = 10.0) -> tuple[float, int, bytes, int]:
    """One GET /metrics over a fresh connection: (seconds, status, decoded body, wire bytes).

    A raw socket keeps the client's own overhead small and identical for both exporters.
    """
    request = (f"GET /metrics HTTP/1.0\r\nHost: {HOST}:{port}\r\n{REQUEST['headers']}\r\n"
               ).encode()  # fmt: skip
    chunks = []
    t0 = time.perf_counter()
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(request)
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    elapsed = time.perf_counter() - t0
    raw = b"".join(chunks)
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(None, 2)[1]) if head.startswith(b"HTTP/") else 0
    if re.search(rb"(?im)^content-encoding:\s*gzip", head):
        body = gzip.decompress(body)
    return elapsed, status, body, len(raw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def sample_lines(body: bytes) -> list[bytes]:
    return [ln for ln in body.splitlines() if ln and not ln.startswith(b"#")]


def metric_value(body: bytes, name: str) -> float | None:
    m = re.search(rb"^" + re.escape(name.encode()) + rb"(?:\{[^}]*\})? (\S+)", body, re.M)
    return float(m.group(1)) if m else None


# -- the two exporters ----------------------------------------------------------------------
@dataclass
class Exporter:
    """One exporter under test: how to start it and how to read it."""

    name: str
    argv: Callable[[int, float], list[str]]
    per_gpu_metric: str  # one series per GPU: readiness = N of them
    samples_metric: str | None  # a samples counter, when the exporter has one
    round_marker: str  # a value that changes at every sampling round
    exports: str
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    latencies: list[float] = field(default_factory=list)
    cpu_per_scrape: list[float] = field(default_factory=list)
    cpu_per_sample: list[float] = field(default_factory=list)
    idle_rate: list[float] = field(default_factory=list)
    last_body: bytes = b""
    last_wire: int = 0
    rss: float = 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


OURS_COMMAND = [sys.executable, "-m", "dask_metrics.exporter"]


def _ours(port: int, interval: float) -> list[str]:
    return [*OURS_COMMAND, "--listen", f"{HOST}:{port}",
            "--interval", str(interval), "--worker", "bench", "--log-level", "warning"]  # fmt: skip


def _nvitop(port: int, interval: float) -> list[str]:
    # nvitop-exporter samples in its main thread: a round starts every `interval` seconds,
    # or right after the previous one when a round takes longer than that.
    return [sys.executable, "-m", "nvitop_exporter", "--bind-address", HOST,
            "--port", str(port), "--interval", str(interval)]  # fmt: skip


def make_exporters() -> list[Exporter]:
    return [
        Exporter("ours", _ours, "dask_gpu_up", "dask_gpu_exporter_samples_total",
                 "dask_gpu_exporter_last_sample_timestamp_seconds",
                 "dask_gpu_* (info, up, memory used/total/reserved/peak, utilisation, busy "
                 "seconds, memory bandwidth, power, energy, temperature, SM clock; SM, tensor, "
                 "DRAM and FP-pipe activity where GPM is) + "
                 "dask_gpu_exporter_* + process_*"),
        Exporter("nvitop-exporter", _nvitop, "gpu_memory_used_MiB", None, "host_uptime_Second",
                 "gpu_* (22 per-GPU gauges: utilisation, encoder/decoder, memory, clocks, "
                 "power/limit, temperature, fan, PCIe and NVLink throughput; NaN where the "
                 "driver lacks the call) + host_* (CPU, memory, swap, load, net, disk via "
                 "psutil) + process_* + python_*"),
    ]


FAKE_GPU0_UUID = "GPU-00000000-0000-0000-0000-000000000000"


def fake_driver(workdir: Path, gpus: int, gpm: bool = False) -> dict[str, str]:
    """Write a fake NVML state of ``gpus`` busy-looking A100s (H100s with GPM activity when
    ``gpm``); return the environment."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.fake_nvml import FakeGPU, FakeNVML, GiB, build_fake_nvml

    lib_dir = build_fake_nvml(workdir)
    devices = [
        FakeGPU(memory_used=(i % 8 + 1) * GiB, gpu_util=(17 * i) % 101,
                memory_util=(7 * i) % 101, temperature_c=40 + i % 30, gpm=gpm,
                sm_active=(13 * i) % 101, tensor_active=(5 * i) % 101,
                name="NVIDIA H100 80GB HBM3" if gpm else "NVIDIA A100-SXM4-80GB")
        for i in range(gpus)
    ]
    fake = FakeNVML(workdir / f"nvml_state_{gpus}", lib_dir, gpus=devices)
    fake.write()
    env = fake.env
    for key in list(env):
        if key == "CUDA_VISIBLE_DEVICES" or key.startswith("DASK_METRICS_"):
            del env[key]
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def wait_ready(ex: Exporter, gpus: int, timeout: float = 60.0) -> None:
    """Poll until every GPU is served and a few sampling rounds have run."""
    deadline = time.monotonic() + timeout
    marks: set[float] = set()
    pattern = ex.per_gpu_metric.encode() + b"{"
    while time.monotonic() < deadline:
        assert ex.proc is not None
        if ex.proc.poll() is not None:
            raise RuntimeError(f"{ex.name} exited with {ex.proc.returncode}: see {ex.log}")
        with contextlib.suppress(OSError, ValueError, IndexError):
            _, status, body, _ = get_metrics(ex.port, timeout=5.0)
            if status == 200 and sum(ln.startswith(pattern) for ln in sample_lines(body)) == gpus:
                mark = metric_value(body, ex.round_marker)
                if mark is not None:
                    marks.add(mark)
                if len(marks) >= 3:  # three distinct rounds seen: warm
                    return
        time.sleep(0.05)
    raise RuntimeError(f"{ex.name} not ready after {timeout:g} s: see {ex.log}")


@contextlib.contextmanager
def running(exporters: list[Exporter], env: dict[str, str], interval: float, gpus: int,
            workdir: Path) -> Iterator[None]:  # fmt: skip
    try:
        for ex in exporters:
            ex.port = free_port()
            ex.log = workdir / f"{ex.name}-{gpus}.log"
            with open(ex.log, "wb") as log:
                ex.proc = subprocess.Popen(ex.argv(ex.port, interval), env=env, cwd=ROOT,
                                           stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        for ex in exporters:
            wait_ready(ex, gpus)
        yield
    finally:
        for ex in exporters:
            if ex.proc is not None and ex.proc.poll() is None:
                ex.proc.terminate()
                try:
                    ex.proc.wait(10)
                except subprocess.TimeoutExpired:
                    ex.proc.kill()
                    ex.proc.wait()


# -- measuring ------------------------------------------------------------------------------
def burst(ex: Exporter, scrapes: int) -> tuple[float, float, list[float]]:
    """``scrapes`` sequential scrapes: (CPU seconds, wall seconds, latencies)."""
    latencies = []
    c0, t0 = cpu_seconds(ex.pid), time.perf_counter()
    for _ in range(scrapes):
        seconds, status, body, wire = get_metrics(ex.port)
        if status != 200:
            raise RuntimeError(f"{ex.name} answered {status}")
        latencies.append(seconds)
    t1, c1 = time.perf_counter(), cpu_seconds(ex.pid)
    ex.last_body, ex.last_wire = body, wire
    return c1 - c0, t1 - t0, latencies


def idle_window(exporters: list[Exporter], seconds: float, interval: float) -> list[float]:
    """CPU rate of each exporter over the same scrape-free window; records CPU per sample."""
    before = {ex.name: metric_value(get_metrics(ex.port)[2], ex.samples_metric)
              for ex in exporters if ex.samples_metric}  # fmt: skip
    c0 = [cpu_seconds(ex.pid) for ex in exporters]
    t0 = time.perf_counter()
    time.sleep(seconds)  # the measurement window itself, not a readiness wait
    c1 = [cpu_seconds(ex.pid) for ex in exporters]
    wall = time.perf_counter() - t0
    rates = []
    for ex, a, b in zip(exporters, c0, c1, strict=True):
        rates.append((b - a) / wall)
        if ex.samples_metric:
            after = metric_value(get_metrics(ex.port)[2], ex.samples_metric)
            # the counter read after the window may include one round past its end: fine
            rounds = (after or 0) - (before[ex.name] or 0)
        else:
            rounds = wall / interval
        ex.idle_rate.append(rates[-1])
        ex.cpu_per_sample.append((b - a) / max(rounds, 1))
    return rates


def real_driver() -> tuple[dict[str, str], list[str]]:
    """The machine's own NVML: the environment and every GPU's UUID, in NVML's order."""
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
        uuids = [pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
                 for i in range(count)]
    finally:
        pynvml.nvmlShutdown()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_METRICS_")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env, [u.decode() if isinstance(u, bytes) else u for u in uuids]


def measure(exporters: list[Exporter], gpus: int, args: argparse.Namespace,
            workdir: Path, env: dict[str, str]) -> None:  # fmt: skip
    with running(exporters, env, args.interval, gpus, workdir):
        for ex in exporters:  # warm-up: first scrapes, allocator, code paths
            burst(ex, args.warmup)
        for r in range(args.rounds):
            rates = idle_window(exporters, args.idle, args.interval)
            order = list(zip(exporters, rates, strict=True))
            for ex, rate in order if r % 2 == 0 else order[::-1]:
                cpu, wall, lat = burst(ex, args.scrapes)
                ex.latencies += lat
                ex.cpu_per_scrape.append((cpu - rate * wall) / args.scrapes)
            print(f"  {gpus} GPUs, round {r + 1}/{args.rounds} done", file=sys.stderr)
        for ex in exporters:
            ex.rss = rss_mib(ex.pid)


# -- reporting ------------------------------------------------------------------------------
def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def summarize(ex: Exporter, uuid: str) -> dict[str, Any]:
    lines = sample_lines(ex.last_body)
    gpu0 = f'uuid="{uuid}"'.encode()
    return {
        "scrape latency, median (ms)": statistics.median(ex.latencies) * 1e3,
        "scrape latency, p99 (ms)": p99(ex.latencies) * 1e3,
        "CPU per scrape (ms)": statistics.median(ex.cpu_per_scrape) * 1e3,
        "CPU per sampling round (ms)": statistics.median(ex.cpu_per_sample) * 1e3,
        "idle CPU (% of a core)": statistics.median(ex.idle_rate) * 100,
        "RSS after warm-up (MiB)": ex.rss,
        "response size (KiB)": len(ex.last_body) / 1024,
        "bytes on the wire (KiB)": ex.last_wire / 1024,
        "samples per scrape": len(lines),
        "samples per GPU": sum(gpu0 in ln for ln in lines),
        "NaN samples": sum(ln.endswith(b" NaN") for ln in lines),
    }


def health_notes(exporters: list[Exporter], gpus: int, interval: float) -> list[str]:
    """What a reader must know to trust the numbers: missing NVML calls, saturated rounds."""
    notes = []
    for ex in exporters:
        text = ex.log.read_text(errors="replace") if ex.log and ex.log.exists() else ""
        missing = sorted(set(re.findall(r"undefined symbol: (\w+)", text)))
        if missing:
            notes.append(f"{ex.name} logged a traceback once per NVML call the fake driver lacks "
                         f"({', '.join(missing)}), exported NaN for it and kept serving.")
        round_cpu = statistics.median(ex.cpu_per_sample)
        if ex.samples_metric is None and round_cpu > 0.8 * interval:
            notes.append(f"{ex.name} at {gpus} GPUs: a sampling round takes about "
                         f"{round_cpu:.2f} s of CPU, near the {interval} s interval: rounds run "
                         "back to back, so its CPU per sample is underestimated.")
    return notes


def steal_percent(before: tuple[int, int]) -> str:
    steal, total = (b - a for a, b in zip(before, cpu_ticks(), strict=True))
    return f"{100 * steal / total:.0f} %" if total else "unknown"


def fmt(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"


def table(results: dict[int, list[dict[str, Any]]], names: list[str]) -> str:
    head = f"| GPUs | measure | {names[0]} | {names[1]} | {names[0]}/{names[1]} |"
    rows = [head, "|---:|---|---:|---:|---:|"]
    for gpus, (a, b) in results.items():
        for key in a:
            ratio = f"{a[key] / b[key]:.2f}" if b[key] else "n/a"
            rows.append(f"| {gpus} | {key} | {fmt(a[key])} | {fmt(b[key])} | {ratio} |")
    return "\n".join(rows)


def versions() -> str:
    def v(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "not installed"

    return (f"nproc {os.cpu_count()}, Python {platform.python_version()}, "
            f"{platform.system()} {platform.release()}; nvitop-exporter "
            f"{v('nvitop-exporter')}, nvitop {v('nvitop')}, prometheus-client "
            f"{v('prometheus-client')}, nvidia-ml-py {v('nvidia-ml-py')}, "
            f"dask-metrics {v('dask-metrics')}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", default="1,8,64", help="GPU counts (default 1,8,64)")
    parser.add_argument("--scrapes", type=int, default=200, help="scrapes per burst (200)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per GPU count (5)")
    parser.add_argument("--interval", type=float, default=0.5,
                        help="sampling interval of both exporters, s (0.5)")
    parser.add_argument("--idle", type=float, default=4.0,
                        help="idle window per round for the idle CPU rate, s (4)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up scrapes (20)")
    parser.add_argument("--ours-command", metavar="CMD",
                        help="command line of our exporter, to A/B a patch "
                        "(default: python -m dask_metrics.exporter)")
    parser.add_argument("--accept", choices=sorted(HEADERS), default="text",
                        help="text: plain GET, Prometheus text format (default); prometheus: "
                        "Prometheus' default Accept headers (OpenMetrics, gzip)")
    parser.add_argument("--out", type=Path, help="also write the markdown table here")
    parser.add_argument("--workdir", type=Path, help="fake driver and logs (default: a temp dir)")
    parser.add_argument("--gpm", action="store_true",
                        help="fake driver: H100s with GPM (SM/tensor activity read every "
                        "round) instead of A100s without")
    parser.add_argument("--driver", choices=("fake", "real"), default="fake",
                        help="fake: the test suite's fake NVML with --gpus busy A100s "
                        "(default); real: this machine's NVML and every GPU it has")
    args = parser.parse_args(argv)
    REQUEST["headers"] = HEADERS[args.accept]
    if args.ours_command:
        OURS_COMMAND[:] = shlex.split(args.ours_command)
    counts = [int(n) for n in args.gpus.split(",") if n.strip()]
    if args.driver == "real":
        real_env, real_uuids = real_driver()
        counts = [len(real_uuids)]

    started, load_before, ticks_before = time.monotonic(), os.getloadavg()[0], cpu_ticks()
    results: dict[int, list[dict[str, Any]]] = {}
    notes: list[str] = []
    names: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-exporter-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        for gpus in counts:
            exporters = make_exporters()
            names = [ex.name for ex in exporters]
            if args.driver == "real":
                env, uuid = real_env, real_uuids[0]
            else:
                env, uuid = fake_driver(workdir, gpus, args.gpm), FAKE_GPU0_UUID
            measure(exporters, gpus, args, workdir, env)
            results[gpus] = [summarize(ex, uuid) for ex in exporters]
            notes += health_notes(exporters, gpus, args.interval)
    exports = "\n".join(f"- {ex.name}: {ex.exports}" for ex in make_exporters())
    text = (
        f"{table(results, names)}\n\n"
        f"Machine: {versions()}.\n"
        f"Driver: {args.driver} NVML{' (fake H100s with GPM)' if args.gpm else ''}. "
        f"Request headers: {args.accept!r}. "
        f"Interval {args.interval} s for both; "
        f"{args.rounds} rounds x {args.scrapes} scrapes per exporter and GPU count; latency "
        f"over all scrapes, CPU figures medians of rounds; run took "
        f"{time.monotonic() - started:.0f} s; 1-min load average {load_before:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after; CPU steal during the run {steal_percent(ticks_before)}."
        f"\n\nWhat each exports:\n{exports}\n"
    )
    if notes:
        text += "\nNotes:\n" + "\n".join(f"- {n}" for n in dict.fromkeys(notes)) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
