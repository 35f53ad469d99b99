"""A pool of processes for the collector's per-worker work that is pure computation (the
session report's reduction of each worker), where it pays: a process takes a few tenths of a
second to start, a fleet's reduction many seconds, which otherwise share one interpreter
with the reading and decoding of the next workers' samples."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection

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
    """A pool of ``processes`` (None for 0, or where the system has none to give), shut
    down on leaving, its work not yet begun cancelled. Its processes ignore Ctrl-C (the
    collector stops them) and end once the collector is gone (killed, it cannot tell
    them)."""
    if processes <= 0:
        yield None
        return
    # forkserver, not fork: this process reads in a thread, and a fork can copy a held lock
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    # the collector alone holds ``alive``: its end closes when it ends, however it ends
    watch, alive = context.Pipe(duplex=False)
    try:
        pool = ProcessPoolExecutor(processes, mp_context=context, initializer=_serve,
                                   initargs=(watch,))
    except OSError:  # no semaphores (a container without /dev/shm): the work is done here
        alive.close()
        watch.close()
        yield None
        return
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        alive.close()
        watch.close()


def _serve(collector: Connection) -> None:
    """A pool process leaves Ctrl-C to the collector (else each prints its traceback), and
    ends with it: once it is gone (killed, it could not say so), nothing else would end
    this process, nor the forkserver, which waits for its processes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_follow, args=(collector,), daemon=True).start()


def _follow(collector: Connection) -> None:
    with suppress(EOFError, OSError):
        collector.recv_bytes()  # nothing is ever sent: this returns at the end of the pipe
    os._exit(1)
