"""Many concurrent scrapers against the sidecar and the scheduler preload, for a fixed time.

    python benchmarks/bench_load.py [--duration 5] [--concurrency 1,10,50] [--gpus 8]
        [--targets sidecar,scheduler] [--workers 3] [--dags 30] [--out FILE]
        [--pythonpath DIR]

``sidecar``: ``python -m dask_metrics.exporter --simulate GPUS`` on 127.0.0.1.
``scheduler``: ``python -m dask scheduler --preload dask_metrics.scheduler`` with ``--workers``
``dask worker`` processes (worker preload, one simulated GPU each, identity only), after
``--dags`` finished DAGs from two named clients (jobs), so its /metrics carries dask_job_*
series for jobs, DAGs and workers; scraped on its dashboard port's /metrics.

For each concurrency level, that many scrapers (asyncio, one process) GET /metrics in a
loop for ``--duration`` seconds, a fresh connection each (the servers answer HTTP/1.0),
reading each answer to its end. Reported per level: requests, throughput, p50/p99/max
latency (connect to last byte) and errors (a failed connection, a non-200 answer or no
answer within 10 s). The load generator shares the machine's cores with the server under
test, as Prometheus on the same node would; the 1-minute load average before each target is
printed too. ``--pythonpath DIR`` runs the servers on another copy of the package (a
folder holding ``dask_metrics/`` with ``exporter/`` inside it), for a before/after A/B.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ok(url: str, what: str, timeout: float = 60.0) -> bytes:
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                body = resp.read()
                if resp.status == 200:
                    return body
        except OSError as exc:
            last = exc
        time.sleep(0.1)
    raise SystemExit(f"bench_load: {what} did not answer at {url} within {timeout:g} s: {last}")


@dataclass
class Level:
    concurrency: int
    latencies: list[float]
    errors: int
    seconds: float
    body_bytes: int

    def row(self) -> str:
        lat = sorted(self.latencies)
        n = len(lat)
        p = (lambda q: lat[min(n - 1, int(q * n))] * 1e3) if n else (lambda q: float("nan"))
        return (f"| {self.concurrency} | {n + self.errors} | {n / self.seconds:.0f} | "
                f"{p(0.5):.1f} | {p(0.99):.1f} | {(lat[-1] * 1e3 if n else float('nan')):.1f} | "
                f"{self.errors} | {self.body_bytes} |")


async def _scraper(port: int, request: bytes, deadline: float, level: Level) -> None:
    while time.monotonic() < deadline:
        t0 = time.perf_counter()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port), TIMEOUT)
            try:
                writer.write(request)
                answer = await asyncio.wait_for(reader.read(), TIMEOUT)
            finally:
                writer.close()
            if not answer.startswith((b"HTTP/1.0 200", b"HTTP/1.1 200")):
                level.errors += 1
                continue
            level.latencies.append(time.perf_counter() - t0)
            level.body_bytes = len(answer.partition(b"\r\n\r\n")[2])
        except (OSError, asyncio.TimeoutError):
            level.errors += 1


async def _run_level(port: int, path: str, concurrency: int, duration: float) -> Level:
    request = f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    level = Level(concurrency, [], 0, duration, 0)
    started = time.monotonic()
    deadline = started + duration
    await asyncio.gather(*(_scraper(port, request, deadline, level)
                           for _ in range(concurrency)))
    level.seconds = time.monotonic() - started
    return level


def load_levels(port: int, path: str, levels: list[int], duration: float) -> list[Level]:
    asyncio.run(_run_level(port, path, 1, min(1.0, duration)))  # warm-up
    return [asyncio.run(_run_level(port, path, c, duration)) for c in levels]


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


PYTHONPATH = str(ROOT)  # where the servers import dask_metrics from (--pythonpath)


@contextmanager
def started(*cmds: list[str], logs: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [PYTHONPATH, os.environ.get("PYTHONPATH")]))}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, cmd in enumerate(cmds):
            log = open(logs / f"proc{i}.log", "wb")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                          cwd=logs))  # not the checkout: no shadowing
            log.close()
        yield procs
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def bench_sidecar(args: argparse.Namespace, logs: Path) -> tuple[str, list[Level]]:
    port = free_port()
    cmd = [sys.executable, "-m", "dask_metrics.exporter", "--listen", f"127.0.0.1:{port}",
           "--simulate", str(args.gpus), "--worker", "w0"]
    with started(cmd, logs=logs):
        wait_ok(f"http://127.0.0.1:{port}/healthz", "the sidecar")
        before = loadavg()
        return before, load_levels(port, "/metrics", args.concurrency, args.duration)


def _work(n: int) -> int:
    return sum(range(n))


def bench_scheduler(args: argparse.Namespace, logs: Path) -> tuple[str, list[Level]]:
    import dask
    from distributed import Client

    port, dash = free_port(), free_port()
    address = f"tcp://127.0.0.1:{port}"
    dask_cmd = [sys.executable, "-m", "dask"]
    scheduler = [*dask_cmd, "scheduler", "--host", "127.0.0.1", "--port", str(port),
                 "--dashboard-address", f"127.0.0.1:{dash}", "--preload",
                 "dask_metrics.scheduler"]
    workers = [[*dask_cmd, "worker", address, "--name", f"w{i}", "--nthreads", "1",
                "--no-nanny", "--no-dashboard", "--preload", "dask_metrics.worker",
                "--simulate", "1", "--serve-metrics", "false"] for i in range(args.workers)]
    with started(scheduler, *workers, logs=logs):
        wait_ok(f"http://127.0.0.1:{dash}/metrics", "the scheduler")
        for i, job in enumerate(("etl", "train")):
            with Client(address, name=job, timeout=60) as client:
                client.wait_for_workers(args.workers, timeout=60)
                for d in range(args.dags // 2 + (i == 0 and args.dags % 2)):
                    parts = [dask.delayed(_work)(1000 + k, dask_key_name=f"w-{job}-{d}-{k}")
                             for k in range(8)]
                    dask.delayed(sum)(parts).compute()
        body = wait_ok(f"http://127.0.0.1:{dash}/metrics", "the scheduler")
        series = sum(1 for line in body.decode().splitlines()
                     if line.startswith("dask_job_"))
        print(f"scheduler /metrics: {len(body)} bytes, {series} dask_job_* samples",
              file=sys.stderr)
        before = loadavg()
        return before, load_levels(dash, "/metrics", args.concurrency, args.duration)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0,
                        help="seconds of load per concurrency level (default 5)")
    parser.add_argument("--concurrency", default="1,10,50",
                        help="comma-separated numbers of concurrent scrapers (default 1,10,50)")
    parser.add_argument("--gpus", type=int, default=8, help="simulated GPUs of the sidecar")
    parser.add_argument("--targets", default="sidecar,scheduler",
                        help="sidecar, scheduler or both (default)")
    parser.add_argument("--workers", type=int, default=3, help="workers of the scheduler")
    parser.add_argument("--dags", type=int, default=30, help="DAGs finished before the load")
    parser.add_argument("--out", help="also write the markdown tables to this file")
    parser.add_argument("--pythonpath", help="import the servers' dask_metrics from here")
    args = parser.parse_args(argv)
    if args.pythonpath:
        global PYTHONPATH
        PYTHONPATH = str(Path(args.pythonpath).resolve())
        if not (Path(PYTHONPATH) / "dask_metrics" / "exporter").is_dir():
            parser.error(f"--pythonpath {args.pythonpath}: no dask_metrics/exporter/ in it")
    try:
        args.concurrency = [int(c) for c in args.concurrency.split(",")]
        if not all(0 < c <= 1000 for c in args.concurrency):
            raise ValueError
    except ValueError:
        parser.error(f"--concurrency {args.concurrency!r}: give numbers 1-1000, e.g. 1,10,50")
    if not 0 < args.duration <= 600:
        parser.error(f"--duration {args.duration:g}: give 0-600 seconds")
    targets = [t.strip() for t in args.targets.split(",")]
    bad = [t for t in targets if t not in ("sidecar", "scheduler")]
    if bad:
        parser.error(f"--targets: unknown {bad[0]!r}; use sidecar, scheduler or both")
    lines = [f"{os.cpu_count()} cores; load average before each target (1, 5, 15 min)."]
    header = ("| scrapers | requests | req/s | p50 ms | p99 ms | max ms | errors | "
              "body bytes |\n|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="bench_load_") as tmp:
        for target in targets:
            runner = bench_sidecar if target == "sidecar" else bench_scheduler
            before, levels = runner(args, Path(tmp))
            title = (f"sidecar, --simulate {args.gpus}" if target == "sidecar"
                     else f"scheduler preload, {args.workers} workers, {args.dags} DAGs")
            lines += ["", f"{title} (load average {before}):", "", header,
                      *(lv.row() for lv in levels)]
            print("\n".join(lines[-len(levels) - 4:]), flush=True)
    text = "\n".join(lines) + "\n"
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
