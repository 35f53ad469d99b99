"""What the scheduler preload costs the scheduler, and proof that its memory stays bounded.

    python benchmarks/bench_scheduler.py overhead [--tasks 20000] [--pairs 8] [--workers 1]
        [--scrape-every 1.0]
    python benchmarks/bench_scheduler.py memory [--dags 100000] [--every 10000] [--tracemalloc]
        [--without-plugin]

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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import operator
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
from distributed import Client, Scheduler
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import dask_metrics.exporter
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
    args = parser.parse_args(argv)
    asyncio.run(overhead(args) if args.command == "overhead" else memory(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
