"""A pool of processes for the collector's per-worker work that is pure computation (the
session report's reduction of each worker), where it pays: a process takes a few tenths of a
second to start, a fleet's reduction many seconds, which otherwise share one interpreter
with the reading and decoding of the next workers' samples."""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager

FEWEST_WORKERS = 8
"""Below this many Dask workers the reduction is done in the collector's own process."""
MOST_PROCESSES = 4
"""The most processes chosen by default: beyond it the reading is what takes the time."""


def processes_for(asked: int | None, workers: int) -> int:
    """How many processes reduce the workers: ``asked`` (0: none, in this process), else
    one fewer than the CPUs this process may use, at most MOST_PROCESSES, and none for
    fewer than FEWEST_WORKERS workers."""
    if asked is not None:
        return asked
    if workers < FEWEST_WORKERS:
        return 0
    return max(0, min(MOST_PROCESSES, _usable_cpus() - 1))


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # a container's or taskset's CPUs
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@contextmanager
def worker_pool(processes: int) -> Iterator[Executor | None]:
    """A pool of ``processes`` (None for 0), shut down on leaving, its work not yet begun
    cancelled. Its processes ignore Ctrl-C: the collector stops them."""
    if processes <= 0:
        yield None
        return
    # forkserver, not fork: this process reads in a thread, and a fork can copy a held lock
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_ignore_interrupt)
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ignore_interrupt() -> None:
    """A pool process leaves Ctrl-C to the collector (else each prints its traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
