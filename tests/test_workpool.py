"""The report's pool of processes: how many it takes, and that workers reduced there fold into
the same tally, in the export's order, as workers reduced in the collector's own process."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from dask_metrics.collector.errors import CollectorError
from dask_metrics.collector.model.columns import PEAK_METRIC, PEAK_TIME_METRIC, select
from dask_metrics.collector.model.series import Series, Timeline, WorkerInfo
from dask_metrics.collector.model.tables import GpuTable, WorkerTable
from dask_metrics.collector.model.timeline import span_timeline
from dask_metrics.collector.report.build import REPORT_METRICS
from dask_metrics.collector.report.gatherer import Gatherer
from dask_metrics.collector.report.tally import WorkerFacts
from dask_metrics.collector.work.pool import (
    FEWEST_WORKERS,
    MOST_PROCESSES,
    processes_for,
    run_in,
    worker_pool,
)

NAMES = [c.name for c in select(REPORT_METRICS)]
MAX_AGE = 120_000


def test_the_processes_asked_for_are_the_processes_taken() -> None:
    assert processes_for(0, 10_000) == 0
    assert processes_for(3, 1) == min(3, len(os.sched_getaffinity(0)))  # more only take turns


def test_by_default_a_pool_only_for_a_fleet_and_never_all_the_cpus() -> None:
    assert processes_for(None, FEWEST_WORKERS - 1) == 0
    chosen = processes_for(None, FEWEST_WORKERS)
    assert 0 <= chosen <= MOST_PROCESSES
    assert processes_for(None, 100_000) == chosen  # capped: reading is the rest of the time


def a_worker(name: str, rng: random.Random) -> tuple[WorkerInfo, dict[str, list[Series]],
                                                      Timeline, WorkerTable]:
    """A worker of one or two GPUs with random samples, two jobs and its peak series: an
    uneven amount of work, so that the pool's workers finish out of order."""
    n = rng.choice([20, 400])
    times = [k * 15_000 for k in range(n)]
    activity = span_timeline([(0, times[n // 3], ("1", "0")),
                              (times[n // 3], times[-1], ("2", "a"))], MAX_AGE)
    states = activity.at_each(times, MAX_AGE)
    gpus, series = [], {PEAK_METRIC: [], PEAK_TIME_METRIC: []}
    for g in range(rng.choice([1, 2])):
        used = [rng.uniform(1e9, 8e10) for _ in times]
        busy = [float(k) * rng.uniform(5, 15) for k in range(n)]
        energy = [float(k) * 3000 for k in range(n)]
        columns = {"total-mem": used, "mem-util": [u / 8e10 * 100 for u in used],
                   "compute-util": [rng.uniform(0, 100) for _ in times], "peak-mem": used,
                   "energy": energy, "busy-seconds": busy}
        gpus.append(GpuTable(str(g), f"GPU-{name}-{g}", times,
                             [columns.get(c, [None] * n) for c in NAMES]))
        labels = {"gpu": str(g), "uuid": f"GPU-{name}-{g}"}
        series[PEAK_METRIC].append(Series(labels, times, used))
        series[PEAK_TIME_METRIC].append(Series(labels, times,
                                               [(t - 5_000) / 1000 for t in times]))
    gpu_names = [(t.gpu, t.uuid) for t in gpus]
    return (WorkerInfo(name, gpus=gpu_names), series, activity,
            WorkerTable(gpus, times, states, states))


def gathered(workers: list[tuple[Any, ...]], pool: Executor | None) -> list[WorkerFacts]:
    seen: list[WorkerFacts] = []
    gather = Gatherer(REPORT_METRICS, MAX_AGE, 0, 3_600_000, 60_000,
                      then=lambda facts, _table: seen.append(facts), pool=pool, ahead=2)
    gather.expect([w[0] for w in workers])
    for worker in workers:
        gather(*worker)
    gather.finish()
    assert gather.tally is not None
    assert [info.name for info, _ in gather.tally.workers] == [w[0].name for w in workers]
    return seen


def test_workers_reduced_in_processes_fold_as_they_would_here_in_the_exports_order() -> None:
    rng = random.Random(7)
    workers = [a_worker(f"w-{k}", rng) for k in range(9)]
    here = gathered(workers, None)
    with worker_pool(2) as pool:
        there = gathered(workers, pool)
    assert [f.info.name for f in there] == [w[0].name for w in workers]
    assert there == here  # every use sum and peak, to the last bit
    assert any(f.dag_peaks for f in here) and any(f.usage for f in here)
    assert gathered(workers, _Done()) == here  # each done before the next comes


class _Done(Executor):
    """An executor whose work is done when it is handed: nothing is ever pending."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_result(fn(*args, **kwargs))
        return done


class _Full(_Done):
    """An executor that starts two processes and no more (a limit on processes)."""

    def __init__(self) -> None:
        self.started = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        if self.started == 2:
            raise OSError(11, "Resource temporarily unavailable")
        self.started += 1
        return super().submit(fn, *args, **kwargs)


def test_a_pool_that_cannot_start_a_process_leaves_the_rest_to_the_collector() -> None:
    rng = random.Random(3)
    workers = [a_worker(f"w-{k}", rng) for k in range(5)]
    assert gathered(workers, _Full()) == gathered(workers, None)


class _Broken(Executor):
    """An executor whose process died: what a pool hands back then."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        done: Future[Any] = Future()
        done.set_exception(BrokenExecutor("a child process terminated abruptly"))
        return done


def test_a_pool_process_that_died_is_one_clear_error() -> None:
    rng = random.Random(1)
    with pytest.raises(CollectorError, match=r"ended abruptly .* --processes 0"):
        gathered([a_worker("w-0", rng)], _Broken())


HOLDER = """
import os, signal, sys
from dask_metrics.collector.work.pool import worker_pool

if __name__ == "__main__":
    with worker_pool(1) as pool:
        pid = pool.submit(os.getpid).result()
        os.kill(pid, signal.SIGINT)  # Ctrl-C is the collector's to handle, not the pool's
        print(pid, pool.submit(os.getpid).result(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # nothing can tell the pool now
"""


def running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not ended (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux' /proc")
def test_a_pool_process_ignores_ctrl_c_and_ends_with_a_killed_collector(tmp_path: Path) -> None:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == -signal.SIGKILL, run.stderr
    first, second = map(int, run.stdout.split())
    assert first == second  # the same process served on after its Ctrl-C
    deadline = time.monotonic() + 10
    while running(first) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(first)


class _OneProcess(ProcessPoolExecutor):
    """A real pool that can start one process and no more (a limit on processes): the work
    it was handed when the second failed to start is queued all the same."""

    def _spawn_process(self) -> None:
        if self._processes:
            raise OSError(11, "Resource temporarily unavailable")
        super()._spawn_process()


def _held(log: str, name: str) -> tuple[str, float, float]:
    """``name``, when it began and ended: 0.3 s of work, noted in ``log``."""
    began = time.time()
    time.sleep(0.3)
    with open(log, "a") as out:
        out.write(f"{name} {began} {time.time()}\n")
    return name, began, time.time()


@pytest.mark.skipif(not hasattr(ProcessPoolExecutor, "_spawn_process"),
                    reason="needs ProcessPoolExecutor._spawn_process (Python 3.11)")
def test_work_a_pool_queued_but_could_not_start_is_never_done_at_once_here(
        tmp_path: Path) -> None:
    log = str(tmp_path / "log")
    pool = _OneProcess(2, mp_context=multiprocessing.get_context("spawn"))
    try:
        first, kept = run_in(pool, _held, log, "first")
        second, kept = run_in(kept, _held, log, "second")
    finally:
        pool.shutdown(wait=True)
    assert kept is None  # the rest is done here
    assert first.result()[0] == "first" and second.result()[0] == "second"
    runs = sorted(tuple(map(float, line.split()[1:]))
                  for line in Path(log).read_text().splitlines())
    # the second may have run in the pool too, but never while it ran here
    assert all(a_end <= b_begin for (_, a_end), (b_begin, _) in pairwise(runs))
    assert len(runs) >= 2
