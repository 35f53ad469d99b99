"""What the scheduler preload costs the scheduler, and proof that its memory stays bounded.

    python benchmarks/bench_scheduler.py overhead [--tasks 20000] [--pairs 8] [--workers 1]
        [--scrape-every 1.0]
    python benchmarks/bench_scheduler.py memory [--dags 100000] [--every 10000] [--tracemalloc]
        [--without-plugin]
    python benchmarks/bench_scheduler.py fleet [--scales 100,300,1000] [--workers 1000]
        [--gpus 8] [--jobs 100] [--prefixes 50] [--finished 0] [--activities 6] [--tight ...]

``overhead`` runs the same graph (a tree reduction of ``--tasks`` tasks) alternately
without and with the plugin (ABBA order, so drift cancels), each run on a fresh scheduler
and workers, and reports wall-time and scheduler-thread CPU ratios (medians, minima and
adjacent pairs); one more run with the hooks timed gives the CPU spent inside the plugin
and its cost per transition, per worker heartbeat (the fine performance metrics it takes
from the spans extension) and per scrape. Both arms are scraped every ``--scrape-every``
seconds on the scheduler's thread, as Prometheus would (Dask's own series, and the
plugin's with it).
``memory`` pushes ``--dags`` one-task DAGs through a scheduler with the plugin, from a new
client every ``--client-every`` DAGs, and prints process memory (``--tracemalloc``: also
the part allocated by exporter/ code), the tracker's table sizes and the number of
exported dask_job_* series at intervals; ``--without-plugin`` is the same run on Dask alone.
The scheduler and clients run in this process; workers are ``dask worker`` processes.
``fleet`` needs no cluster: it attaches the plugin to a stand-in scheduler (the attributes
``dask_internals`` reads), feeds it through the plugin's own hooks (add_worker, update_graph,
transition, the spans extension's heartbeat it taps) a fleet of ``--workers`` workers with
``--gpus`` GPUs each, ``--jobs`` connected clients with a running DAG of ``--prefixes``
prefixes (every prefix has reported ``--activities`` activity/unit pairs; each worker executes
``--executing`` tasks of as many prefixes at the scrape) and ``--finished`` DAGs per job that
finished in the last ``--history`` seconds; then renders one scrape as ``--metrics-port``
serves it and prints series per family, bytes (text, gzip, OpenMetrics) and render time,
with the settings at their defaults and ``--tight``. Timestamps come from a fake clock, so
series and bytes repeat exactly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import operator
import os
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
from distributed import Client, Scheduler
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest
from prometheus_client.parser import text_string_to_metric_families

import dask_metrics.exporter
from dask_metrics.exporter.identity import STARTUP_KEY
from dask_metrics.exporter.scheduler.families import SourceCollector
from dask_metrics.exporter.scheduler.plugin import PLUGIN_NAME, JobPlugin
from dask_metrics.exporter.scheduler.settings import Settings

EXPORTER_FILES = str(Path(dask_metrics.exporter.__file__).resolve().parent / "*")


def inc(x: int) -> int:
    return x + 1


def tree_graph(tasks: int, tag: str) -> tuple[dict[Any, Any], Any]:
    """A reduction tree of about ``tasks`` tasks: half leaves, then pairwise sums."""
    width = (tasks + 1) // 2
    dsk: dict[Any, Any] = {(f"leaf-{tag}", i): (inc, i) for i in range(width)}
    level, names = 0, [(f"leaf-{tag}", i) for i in range(width)]
    while len(names) > 1:
        level += 1
        pairs = [names[i : i + 2] for i in range(0, len(names), 2)]
        names = []
        for i, pair in enumerate(pairs):
            key = (f"sum{level}-{tag}", i)
            dsk[key] = (operator.add, *pair) if len(pair) == 2 else (operator.pos, pair[0])
            names.append(key)
    return dsk, names[0]


@contextlib.asynccontextmanager
async def cluster(n_workers: int) -> AsyncIterator[Scheduler]:
    async with Scheduler(host="127.0.0.1", dashboard_address="127.0.0.1:0") as scheduler:
        cmd = [sys.executable, "-m", "dask", "worker", scheduler.address, "--nthreads", "1",
               "--no-nanny", "--no-dashboard"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        workers = [
            subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL) for _ in range(n_workers)
        ]
        try:
            while len(scheduler.workers) < n_workers:
                await asyncio.sleep(0.05)
            yield scheduler
        finally:
            for proc in workers:
                proc.terminate()
            for proc in workers:
                proc.wait()


class HookTimer:
    """Time spent inside the plugin's hooks. The timing window also holds a perf_counter
    call and the call into the hook: ``overhead()`` measures that on a no-op hook so it can
    be subtracted. ``heartbeat`` is the ledger's share of a worker heartbeat (the spans
    extension's tap calls it through the plugin), ``collect`` a scrape of the plugin."""

    HOOKS = ("transition", "update_graph", "log_event", "add_worker", "remove_worker",
             "remove_client", "collect", "heartbeat")  # fmt: skip

    def __init__(self, plugin: Any) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(self.HOOKS, 0.0)
        self.calls: dict[str, int] = dict.fromkeys(self.HOOKS, 0)
        for name in self.HOOKS:
            owner, attr = (plugin.ledger, "add") if name == "heartbeat" and hasattr(
                plugin, "ledger") else (plugin, name)
            setattr(owner, attr, self._timed(name, getattr(owner, attr)))

    def _timed(self, name: str, hook: Any) -> Any:
        seconds, calls = self.seconds, self.calls

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return hook(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - start
                calls[name] += 1

        return timed

    @classmethod
    def overhead(cls, calls: int = 200_000) -> float:
        """Seconds the timing window adds to one hook call (measured on a no-op hook)."""
        noop = type("NoOp", (), {h: lambda *a, **k: None for h in cls.HOOKS})()
        timer = cls(noop)
        for i in range(calls):
            noop.transition(i, "waiting", "processing", stimulus_id="s")
        return timer.seconds["transition"] / calls

    def net(self, overhead: float) -> dict[str, float]:
        return {h: max(0.0, s - overhead * self.calls[h]) for h, s in self.seconds.items()}


async def scraping(every: float) -> None:
    """Scrape the default registry (Dask's series and the plugin's) every ``every`` s, on
    the scheduler's thread, like Prometheus' requests to the dashboard port."""
    while True:
        await asyncio.sleep(every)
        generate_latest(REGISTRY)


async def one_run(scheduler: Scheduler, client: Client, tasks: int, tag: str,
                  scrape_every: float = 0.0) -> dict[str, float]:
    dsk, root = tree_graph(tasks, tag)
    transitions = scheduler.transition_counter
    scraper = asyncio.ensure_future(scraping(scrape_every)) if scrape_every > 0 else None
    cpu, wall = time.thread_time(), time.perf_counter()
    future = client.get(dsk, root, sync=False)
    result = await future
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    if scraper is not None:
        scraper.cancel()
    expected = sum(range(1, (tasks + 1) // 2 + 1))
    assert result == expected, (result, expected)
    del future
    while scheduler.tasks:  # let the scheduler forget the graph before the next run
        await asyncio.sleep(0.01)
    return {"wall": wall, "cpu": cpu, "transitions": scheduler.transition_counter - transitions}


async def measured_run(args: argparse.Namespace, i: int, plugin: str) -> dict[str, float]:
    """One run on a fresh scheduler and workers: a long-lived scheduler slows down from run
    to run by itself, which would blur a difference of a few percent. ``plugin``: "none",
    "plain", or "timed" (hooks wrapped by HookTimer, for the accounting only)."""
    async with (
        cluster(args.workers) as scheduler,
        Client(scheduler.address, asynchronous=True) as client,
    ):
        job_plugin, timer = None, None
        if plugin != "none":
            job_plugin = JobPlugin(Settings.from_config())
            await scheduler.register_scheduler_plugin(job_plugin, name=PLUGIN_NAME, idempotent=True)
            timer = HookTimer(job_plugin) if plugin == "timed" else None
        await one_run(scheduler, client, 1000, f"warmup{i}")
        run = await one_run(scheduler, client, args.tasks, f"r{i}", args.scrape_every)
        if timer is not None:
            net = timer.net(HookTimer.overhead())
            run["hooks"] = sum(net.values())
            run["hook_us"] = net["transition"] / timer.calls["transition"] * 1e6
            for hook in ("heartbeat", "collect", "update_graph"):
                run[f"{hook}_us"] = net[hook] / max(1, timer.calls[hook]) * 1e6
                run[f"{hook}_calls"] = timer.calls[hook]
        if job_plugin is not None:
            await job_plugin.close()
    print(f"run {i:2d} plugin {plugin:5s}: {run['wall']:.3f} s wall, {run['cpu']:.3f} s cpu, "
          f"{run['transitions']} transitions", flush=True)  # fmt: skip
    return run


async def overhead(args: argparse.Namespace) -> None:
    order = [False, True, True, False] * args.pairs  # ABBA: drift cancels
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    await measured_run(args, -1, "none")  # not counted: the first run in a process is slower
    for i, with_plugin in enumerate(order[: 2 * args.pairs]):
        runs[with_plugin].append(await measured_run(args, i, "plain" if with_plugin else "none"))
    timed = await measured_run(args, 2 * args.pairs, "timed")

    def stat(fn: Any, key: str, with_plugin: bool) -> float:
        return float(fn(r[key] for r in runs[with_plugin]))

    flat = {False: iter(runs[False]), True: iter(runs[True])}
    paired = [{arm: next(flat[arm]) for arm in order[2 * k : 2 * k + 2]} for k in range(args.pairs)]
    print()
    print(f"graph: {args.tasks} tasks, {int(timed['transitions'])} transitions per run, "
          f"{args.workers} worker process(es), {args.pairs} runs each")  # fmt: skip
    print("| | without | with | ratio with/without |")
    print("|---|---|---|---|")
    for key, name in (("wall", "wall time, s"), ("cpu", "scheduler-thread CPU, s")):
        for fn, fn_name in ((statistics.median, "median"), (min, "min")):
            a, b = stat(fn, key, False), stat(fn, key, True)
            print(f"| {name} ({fn_name}) | {a:.2f} | {b:.2f} | {b / a:.3f} |")
        ratios = sorted(p[True][key] / p[False][key] for p in paired)
        print(f"| {name}: adjacent pairs | | | {ratios[0]:.2f} to {ratios[-1]:.2f} "
              f"(median {statistics.median(ratios):.3f}) |")  # fmt: skip
    print(f"| 1 + CPU inside the plugin's hooks / scheduler-thread CPU (extra timed run) "
          f"| | | {1 + timed['hooks'] / timed['cpu']:.3f} |")  # fmt: skip
    print(f"| inside the transition hook, µs per transition (extra timed run) "
          f"| | {timed['hook_us']:.2f} | |")  # fmt: skip
    for hook, what in (("heartbeat", "worker heartbeat (fine metrics to the ledger)"),
                       ("collect", "scrape of the plugin's series"),
                       ("update_graph", "graph submission")):
        print(f"| inside the plugin, µs per {what} (extra timed run, "
              f"{int(timed[f'{hook}_calls'])} calls) | | {timed[f'{hook}_us']:.1f} | |")


def traced_mib() -> tuple[float, float]:
    """Python memory traced in the whole process, and the part allocated by exporter/ code."""
    snapshot = tracemalloc.take_snapshot()
    ours = snapshot.filter_traces([tracemalloc.Filter(True, EXPORTER_FILES)])
    total = tracemalloc.get_traced_memory()[0]
    return total / 2**20, sum(s.size for s in ours.statistics("filename")) / 2**20


def dask_job_series() -> int:
    families = text_string_to_metric_families(generate_latest(REGISTRY).decode())
    return sum(len(f.samples) for f in families if f.name.startswith("dask_job"))


async def memory(args: argparse.Namespace) -> None:
    if args.tracemalloc:
        tracemalloc.start()
    proc = psutil.Process()
    async with cluster(args.workers) as scheduler:
        plugin = None
        if not args.without_plugin:
            plugin = JobPlugin(Settings.from_config())
            await scheduler.register_scheduler_plugin(plugin, name=PLUGIN_NAME, idempotent=True)
        print("| DAGs | s | RSS MiB | traced MiB: all | traced MiB: plugin | retained DAGs "
              "| jobs | tracked tasks | dask_job series |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|")
        start, done, client = time.perf_counter(), 0, None
        try:
            while done < args.dags:
                if client is None or done % args.client_every == 0:
                    if client is not None:
                        await client.close()
                    client = await Client(scheduler.address, asynchronous=True)
                left_for_client = args.client_every - done % args.client_every
                batch = min(args.batch, args.dags - done, left_for_client)
                futures = [client.submit(inc, i, pure=False) for i in range(batch)]
                await client.gather(futures)
                del futures
                done += batch
                if done % args.every == 0 or done == args.dags:
                    series = dask_job_series()  # a scrape: finished DAGs count as exported
                    traced, ours = traced_mib() if args.tracemalloc else (0.0, 0.0)
                    rss = proc.memory_info().rss / 2**20
                    elapsed = time.perf_counter() - start
                    row = [done, f"{elapsed:.0f}", f"{rss:.0f}", f"{traced:.1f}", f"{ours:.2f}"]
                    if plugin is not None:
                        stats = plugin.tracker.stats()
                        dags = stats["finished_dags"] + stats["unfinished_dags"]
                        row += [dags, stats["jobs"], stats["tasks"], series]
                    else:
                        row += ["-", "-", "-", series]
                    print("| " + " | ".join(map(str, row)) + " |", flush=True)
        finally:
            if client is not None:
                await client.close()
            if plugin is not None:
                await plugin.close()


# -- fleet: one scrape of a big fleet, without a cluster ---------------------------------------

#: (activity, unit) pairs Dask's execute context reports, commonest first: every task
#: (thread-cpu, thread-noncpu, executor, other; memory-read of its inputs), spilling
#: (disk-*, (de)serialize, (de)compress), cancelled or failed tasks. ``--activities N``
#: takes the first N.
EXECUTE_ACTIVITIES = (
    ("thread-cpu", "seconds"), ("thread-noncpu", "seconds"), ("executor", "seconds"),
    ("other", "seconds"), ("memory-read", "count"), ("memory-read", "bytes"),
    ("disk-read", "seconds"), ("disk-read", "count"), ("disk-read", "bytes"),
    ("disk-write", "seconds"), ("disk-write", "count"), ("disk-write", "bytes"),
    ("serialize", "seconds"), ("deserialize", "seconds"), ("compress", "seconds"),
    ("decompress", "seconds"), ("cancelled", "seconds"), ("failed", "seconds"),
)  # fmt: skip
#: Scheduler.cumulative_worker_metrics keys outside task execution (exported cluster-wide),
#: plus execute and p2p keys, which the preload leaves out there.
CLUSTER_KEYS = (
    ("gather-dep", "network", "seconds"), ("gather-dep", "decompress", "seconds"),
    ("gather-dep", "deserialize", "seconds"), ("gather-dep", "other", "seconds"),
    ("get-data", "network", "seconds"), ("get-data", "serialize", "seconds"),
    ("get-data", "compress", "seconds"), ("get-data", "memory-read", "count"),
    ("get-data", "memory-read", "bytes"), ("memory-monitor", "disk-write", "seconds"),
    ("memory-monitor", "disk-write", "count"), ("memory-monitor", "disk-write", "bytes"),
    ("memory-monitor", "serialize", "seconds"),
    ("execute", "sum-chunk", "thread-cpu", "seconds"), ("p2p", "shard", "seconds"),
)  # fmt: skip
#: Task prefix stems (key_split results); a job's prefix k is f"{stem}-{k:02d}"
PREFIX_STEMS = ("read_parquet", "getitem", "assign", "astype", "merge", "groupby-chunk",
                "groupby-agg", "sum-chunk", "sum-aggregate", "to_parquet")  # fmt: skip
#: The settings that bound cardinality, tightened (--tight)
TIGHT = ("max_prefixes_per_job=10", "max_finished_dags=100", "finished_dag_ttl=60s",
         "max_jobs=100")
T0 = 1_764_000_000.0  # the synthetic scheduler's start (unix seconds)


class FakeClock:
    """The tracker's clock: set by the benchmark, so every timestamp (and byte) repeats."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FakeTask:
    """What dask_internals reads of a TaskState: .key, .state, .group.span_id, .prefix.name,
    .processing_on."""

    __slots__ = ("group", "key", "prefix", "processing_on", "state")

    def __init__(self, key: Any, prefix: str, span_id: str) -> None:
        self.key, self.state, self.processing_on = key, "waiting", None
        self.group = SimpleNamespace(span_id=span_id)
        self.prefix = SimpleNamespace(name=prefix)


class FakeWorker:
    """What dask_internals reads of a WorkerState, as the worker's last heartbeat left it."""

    def __init__(self, index: int, gpus: int, threads: int, rng: random.Random) -> None:
        self.address = f"tcp://10.{index // 250}.{index % 250}.{7 + index % 3}:{40000 + index}"
        self.name = f"dask-worker-{index:04d}"
        uuids = [str(uuid.UUID(int=(index << 8) + g)) for g in range(gpus)]
        self.extra = {STARTUP_KEY: {
            "name": self.name, "address": self.address, "pid": 1000 + index,
            "host": f"gpu-node-{index:04d}", "cluster": "",
            "gpus": [{"index": g, "uuid": f"GPU-{u}"} for g, u in enumerate(uuids)]}}
        gib = 2**30
        self.memory = SimpleNamespace(process=int(rng.uniform(4, 40) * gib),
                                      managed=int(rng.uniform(1, 30) * gib),
                                      spilled=int(rng.uniform(0, 4) * gib))
        self.memory_limit = 64 * gib
        self.nthreads = threads
        self.occupancy = rng.uniform(0, 60)
        self.nbytes = int(rng.uniform(1, 30) * gib)
        self.executing: dict[FakeTask, float] = {}
        self.processing: set[FakeTask] = set()
        rmm = {"rmm-used": int(rng.uniform(1, 70) * gib), "rmm-total": 72 * gib} if gpus else None
        self.metrics: dict[str, Any] = {"cpu": rng.uniform(50, 800), "task_counts": {},
                                        **({"rmm": rmm} if rmm else {})}


class FakeSpans:
    """The spans extension: the plugin taps its heartbeat (Dask's adds to its spans)."""

    def heartbeat(self, ws: Any, data: dict[Any, float]) -> None:
        pass


class FakeScheduler:
    """The scheduler attributes dask_internals reads: nothing runs, the benchmark sets them."""

    def __init__(self, rng: random.Random) -> None:
        self.address = "tcp://10.0.0.1:8786"
        self.handlers: dict[str, Any] = {}
        self.stream_handlers: dict[str, Any] = {}
        self.extensions = {"spans": FakeSpans()}
        self.tasks: dict[Any, FakeTask] = {}
        self.workers: dict[str, FakeWorker] = {}
        self.cumulative_worker_metrics = {key: rng.uniform(1, 1e6) for key in CLUSTER_KEYS}


@dataclass(frozen=True)
class Fleet:
    workers: int
    gpus: int  # per worker: dask_job_worker_gpu_info series
    threads: int
    executing: int  # tasks each worker executes at the scrape, each of another prefix
    jobs: int
    prefixes: int  # per job: every one has reported activity by the scrape
    dags: int  # running DAGs per job
    finished: int  # finished DAGs per job, in the last ``history`` seconds
    history: float
    activities: int  # (activity, unit) pairs of EXECUTE_ACTIVITIES reported per prefix
    tasks_per_prefix: int


class FleetFeed:
    """Feeds a JobPlugin attached to a FakeScheduler through the plugin's own hooks, the way
    Dask calls them: add_worker at attach, update_graph per DAG, transition per task state
    change, the spans extension's heartbeat (tapped by the plugin) per worker heartbeat."""

    def __init__(self, fleet: Fleet, plugin: JobPlugin, scheduler: FakeScheduler,
                 clock: FakeClock, rng: random.Random) -> None:
        self.f, self.plugin, self.s, self.clock, self.rng = fleet, plugin, scheduler, clock, rng
        self.addresses = list(scheduler.workers)
        self.heartbeats = 0
        self.transitions = 0

    def prefix(self, k: int) -> str:
        return f"{PREFIX_STEMS[k % len(PREFIX_STEMS)]}-{k:02d}"

    def client(self, job: int) -> str:
        return f"Client-etl-job-{job:03d}-{uuid.UUID(int=job)}"

    def workers_of(self, job: int) -> list[str]:
        """The workers that run the job's tasks: every jobs-th worker (one at least)."""
        return self.addresses[job % len(self.addresses) :: self.f.jobs] or [
            self.addresses[job % len(self.addresses)]]

    def submit(self, job: int, tag: str, per_prefix: dict[int, int]) -> list[FakeTask]:
        """One DAG of ``job`` in a span of its own: per_prefix[k] tasks of prefix k, the last
        prefix's wanted; returns its tasks by prefix order."""
        span = f"span-{job}-{tag}"
        tasks = [FakeTask((f"{self.prefix(k)}-{job}-{tag}", i), self.prefix(k), span)
                 for k in range(self.f.prefixes) for i in range(per_prefix.get(k, 0))]
        for ts in tasks:
            self.s.tasks[ts.key] = ts
        wanted = [ts.key for ts in tasks if ts.prefix.name == self.prefix(self.f.prefixes - 1)]
        self.plugin.update_graph(self.s, client=self.client(job), keys=wanted,
                                 tasks=[ts.key for ts in tasks])
        return tasks

    def transition(self, ts: FakeTask, finish: str, worker: FakeWorker | None = None) -> None:
        start = ts.state
        if start == "processing" and ts.processing_on is not None:
            ts.processing_on.processing.discard(ts)
            ts.processing_on.executing.pop(ts, None)
            ts.processing_on = None
        ts.state = finish
        if finish == "processing":
            assert worker is not None
            ts.processing_on = worker
            worker.processing.add(ts)
        if finish == "forgotten":
            del self.s.tasks[ts.key]
        self.plugin.transition(ts.key, start, finish, stimulus_id="bench")
        self.transitions += 1

    def heartbeat(self, address: str, pairs: list[tuple[str, str]]) -> None:
        """One worker heartbeat's spans data: every activity of each (span, prefix)."""
        acts = EXECUTE_ACTIVITIES[: self.f.activities]
        data = {("execute", span, prefix, activity, unit): self.rng.uniform(0.01, 50.0)
                * (2**20 if unit == "bytes" else 1.0) for span, prefix in pairs
                for activity, unit in acts}  # fmt: skip
        self.s.extensions["spans"].heartbeat(self.s.workers[address], data)
        self.heartbeats += 1

    def finished_dag(self, job: int, n: int, start: float, end: float) -> None:
        """A DAG submitted at ``start`` that ran every prefix on the job's workers, reported
        its activity and finished at ``end``; then the client released its results."""
        self.clock.now = start
        tasks = self.submit(job, f"f{n}", dict.fromkeys(range(self.f.prefixes),
                                                        self.f.tasks_per_prefix))
        where = self.workers_of(job)
        for i, ts in enumerate(tasks):
            self.transition(ts, "processing", self.s.workers[where[i % len(where)]])
        for k in range(self.f.prefixes):
            self.heartbeat(where[k % len(where)], [(f"span-{job}-f{n}", self.prefix(k))])
        self.clock.now = end
        for ts in tasks:
            self.transition(ts, "memory")
        for ts in tasks:
            self.transition(ts, "forgotten")

    def running_dags(self) -> None:
        """Every job's running DAGs: submitted at T0, each worker executing ``executing``
        tasks of as many prefixes now, and every prefix of every DAG reported so far."""
        f = self.f
        executing: dict[str, list[tuple[int, int, int]]] = {}  # worker -> (job, dag, prefix)
        need: dict[tuple[int, int, int], int] = {}
        for job in range(f.jobs):
            for rank, address in enumerate(self.workers_of(job)):
                dag = rank % f.dags
                for t in range(f.executing):
                    k = (rank // f.dags * f.executing + t) % f.prefixes
                    executing.setdefault(address, []).append((job, dag, k))
                    need[job, dag, k] = need.get((job, dag, k), 0) + 1
        self.clock.now = T0
        free: dict[tuple[int, int, int], list[FakeTask]] = {}
        for job in range(f.jobs):
            for dag in range(f.dags):
                counts = {k: max(f.tasks_per_prefix, need.get((job, dag, k), 0))
                          for k in range(f.prefixes)}
                for ts in self.submit(job, f"r{dag}", counts):
                    k = int(ts.prefix.name.rsplit("-", 1)[1])
                    free.setdefault((job, dag, k), []).append(ts)
        for job in range(f.jobs):
            for dag in range(f.dags):
                where = self.workers_of(job)
                for k in range(f.prefixes):
                    self.heartbeat(where[k % len(where)], [(f"span-{job}-r{dag}", self.prefix(k))])
        self.clock.now = T0 + 1.0
        for address, running in executing.items():
            ws = self.s.workers[address]
            for job, dag, k in running:
                ts = free[job, dag, k].pop()
                self.transition(ts, "processing", ws)
                ws.executing[ts] = self.rng.uniform(0.1, 30.0)
            ws.metrics["task_counts"] = {"executing": len(ws.executing)}


def fleet_settings(overrides: list[str]) -> Settings:
    """The preload's settings with ``KEY=VALUE`` overrides (names as in SETTINGS)."""
    values = dict(item.split("=", 1) for item in overrides)
    return Settings.from_config(cluster="bench-fleet", **values)


async def fleet_scrape(fleet: Fleet, settings: Settings, renders: int) -> dict[str, Any]:
    """Build the preload's state for ``fleet`` and render one scrape ``renders`` times."""
    rng = random.Random(20_240_101)
    scheduler = FakeScheduler(rng)
    for w in range(fleet.workers):
        ws = FakeWorker(w, fleet.gpus, fleet.threads, rng)
        scheduler.workers[ws.address] = ws
    clock = FakeClock(T0)
    plugin = JobPlugin(settings)
    plugin.tracker._clock = clock  # deterministic timestamps: the same bytes every run
    build = time.perf_counter()
    plugin.attach(scheduler)  # add_worker for every worker, taps the spans' heartbeat
    plugin.started = T0 - 3600.0
    feed = FleetFeed(fleet, plugin, scheduler, clock, rng)
    feed.running_dags()
    total = fleet.jobs * fleet.finished
    now = T0 + fleet.history + 10.0
    for n in range(total):  # finished evenly over the last `history` seconds before `now`
        end = now - fleet.history + fleet.history * n / max(1, total)
        feed.finished_dag(n % fleet.jobs, n // fleet.jobs, end - 5.0, end)
    clock.now = now
    plugin.tracker.snapshot()  # the scrapes before: they saw every finished DAG
    plugin.tracker.evict()  # what the plugin's evictor does every few seconds
    build = time.perf_counter() - build
    registry = CollectorRegistry()
    registry.register(SourceCollector(plugin))  # the --metrics-port registry: dask_job_* only
    text = generate_latest(registry)  # the first scrape of this state (its side effects)
    times, collects = [], []
    for _ in range(renders):
        start = time.perf_counter()
        again = generate_latest(registry)
        times.append(time.perf_counter() - start)
        start = time.perf_counter()
        plugin.collect()
        collects.append(time.perf_counter() - start)
        assert again == text, "a scrape of unchanged state changed"
    start = time.perf_counter()
    packed = gzip.compress(text, compresslevel=6, mtime=0)  # tornado's gzip level
    gzip_s = time.perf_counter() - start
    openmetrics = openmetrics_latest(registry)
    per_family: dict[str, int] = {}
    for m in plugin.collect():
        if m.samples:  # a counter's samples are named <family>_total
            per_family[m.name + ("_total" if m.type == "counter" else "")] = len(m.samples)
    lines = sum(1 for line in text.splitlines() if line and not line.startswith(b"#"))
    assert lines == sum(per_family.values()), (lines, per_family)
    assert not any(plugin.errors.values()), plugin.errors  # every hook took its input
    stats = plugin.tracker.stats()
    await plugin.close()
    return {
        "series": lines, "per_family": per_family, "bytes": len(text), "gzip": len(packed),
        "openmetrics": len(openmetrics), "render": statistics.median(times),
        "collect": statistics.median(collects), "gzip_s": gzip_s, "build": build,
        "load": os.getloadavg()[0], "dags": stats["finished_dags"] + stats["unfinished_dags"],
        "jobs": stats["jobs"], "ledger": plugin.ledger.stats()["counters"],
        "heartbeats": feed.heartbeats, "transitions": feed.transitions,
    }


async def fleet(args: argparse.Namespace) -> None:
    scales = [int(s) for s in args.scales.split(",")] if args.scales else [args.workers]
    profiles = {"defaults": fleet_settings([])}
    if args.tight:
        profiles["tightened"] = fleet_settings(args.tight)
    results: dict[tuple[int, str], dict[str, Any]] = {}
    acts = ", ".join(f"{a} {u}" for a, u in EXECUTE_ACTIVITIES[: args.activities])
    print(f"jobs {args.jobs} (client mode, clients connected), {args.prefixes} prefixes per job, "
          f"{args.dags} running DAG(s) per job (each in a span of its own), {args.finished} "
          f"finished DAG(s) per job in the last {args.history:g} s, {args.gpus} GPU(s) and "
          f"{args.threads} thread(s) per worker, {args.executing} executing per worker at the "
          f"scrape; activities: {acts}")  # fmt: skip
    print(f"tightened: {', '.join(args.tight) or '-'}; load average at start "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    for workers in scales:
        f = Fleet(workers, args.gpus, args.threads, min(args.executing, args.threads), args.jobs,
                  args.prefixes, args.dags, args.finished, args.history, args.activities,
                  args.tasks_per_prefix)  # fmt: skip
        for name, settings in profiles.items():
            r = results[workers, name] = await fleet_scrape(f, settings, args.renders)
            print(f"{workers} workers, {name}: {r['series']} series, {r['bytes']} bytes, "
                  f"render {r['render'] * 1e3:.0f} ms (built in {r['build']:.1f} s: "
                  f"{r['heartbeats']} heartbeats, {r['transitions']} transitions)", flush=True)
    print()
    print("| workers | settings | series | biggest families | bytes | gzip bytes | OpenMetrics "
          "bytes | render ms (median) | of which collect ms | gzip ms | load | DAGs kept "
          "| ledger counters |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (workers, name), r in results.items():
        top = sorted(r["per_family"].items(), key=lambda kv: -kv[1])[:3]
        biggest = ", ".join(f"{n.removeprefix('dask_job_')} {c}" for n, c in top)
        print(f"| {workers} | {name} | {r['series']} | {biggest} | {r['bytes']} | {r['gzip']} "
              f"| {r['openmetrics']} | {r['render'] * 1e3:.0f} | {r['collect'] * 1e3:.0f} "
              f"| {r['gzip_s'] * 1e3:.0f} | {r['load']:.2f} | {r['dags']} | {r['ledger']} |")
    print()
    keys = list(results)
    print("| family | " + " | ".join(f"{w} w, {n}" for w, n in keys) + " |")
    print("|---|" + "---|" * len(keys))
    families_seen = sorted({fam for r in results.values() for fam in r["per_family"]},
                           key=lambda fam: (-max(r["per_family"].get(fam, 0)
                                                 for r in results.values()), fam))
    for fam in families_seen:
        counts = [str(results[k]["per_family"].get(fam, 0)) for k in keys]
        print(f"| {fam} | " + " | ".join(counts) + " |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    o = sub.add_parser("overhead", help="scheduler time with and without the plugin")
    o.add_argument("--tasks", type=int, default=20_000)
    o.add_argument("--pairs", type=int, default=8, help="runs with and without the plugin")
    o.add_argument("--workers", type=int, default=1)
    o.add_argument("--scrape-every", type=float, default=1.0,
                   help="seconds between scrapes during a run (0: none)")
    m = sub.add_parser("memory", help="many small DAGs: memory and series over time")
    m.add_argument("--dags", type=int, default=100_000)
    m.add_argument("--every", type=int, default=10_000, help="print a row every N DAGs")
    m.add_argument("--batch", type=int, default=500, help="DAGs in flight at once")
    m.add_argument("--client-every", type=int, default=100, help="a new client every N DAGs")
    m.add_argument("--workers", type=int, default=2)
    m.add_argument("--tracemalloc", action="store_true", help="also trace Python allocations")
    m.add_argument("--without-plugin", action="store_true", help="baseline: Dask alone")
    f = sub.add_parser("fleet", help="one scrape of a big fleet: series, bytes, render time "
                       "(synthetic state, no cluster)")
    f.add_argument("--workers", type=int, default=1000)
    f.add_argument("--scales", default="", help="worker counts, e.g. 100,300,1000 "
                   "(instead of --workers)")
    f.add_argument("--gpus", type=int, default=8, help="GPUs each worker's identity lists")
    f.add_argument("--threads", type=int, default=2, help="threads per worker")
    f.add_argument("--executing", type=int, default=2,
                   help="tasks (of as many prefixes) each worker executes at the scrape")
    f.add_argument("--jobs", type=int, default=100, help="jobs (clients), all connected")
    f.add_argument("--prefixes", type=int, default=50, help="task prefixes per job")
    f.add_argument("--dags", type=int, default=1, help="running DAGs per job")
    f.add_argument("--finished", type=int, default=0,
                   help="finished DAGs per job, finished in the last --history seconds")
    f.add_argument("--history", type=float, default=240.0)
    f.add_argument("--activities", type=int, default=6,
                   choices=range(1, len(EXECUTE_ACTIVITIES) + 1), metavar="N",
                   help="(activity, unit) pairs each prefix reports: the first N of "
                   "thread-cpu, thread-noncpu, executor, other, memory-read count/bytes, "
                   "disk-read..., up to 18")  # fmt: skip
    f.add_argument("--tasks-per-prefix", type=int, default=2)
    f.add_argument("--renders", type=int, default=5, help="timed scrapes (median)")
    f.add_argument("--tight", action="append", metavar="SETTING=VALUE",
                   help="a second run with these settings (repeat; default: "
                   + " ".join(TIGHT) + "; none: --tight ''")  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "fleet":
        args.tight = [t for t in (TIGHT if args.tight is None else args.tight) if t]
        asyncio.run(fleet(args))
        return 0
    asyncio.run(overhead(args) if args.command == "overhead" else memory(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
