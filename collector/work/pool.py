"""A pool of processes for the collector's per-worker work that is pure computation (the
session report's reduction of each worker, a plot's pictures), where it pays: a process
takes a few tenths of a second to start, a fleet's reduction or drawing many seconds, which
otherwise share one interpreter with the reading and decoding of the next workers'
samples."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import BrokenExecutor, Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from dask_metrics.collector.errors import CollectorError

_T = TypeVar("_T")
_P = TypeVar("_P")

FEWEST_WORKERS = 8
"""Below this many Dask workers the reduction is done in the collector's own process."""
MOST_PROCESSES = 4
"""The most processes chosen by default: beyond it the reading is what takes the time."""


def processes_for(asked: int | None, workers: int, spare: int = 1) -> int:
    """How many processes do the workers' work: ``asked`` (0: none, in this process), at
    most the CPUs this process may use (more only take turns); else the CPUs but ``spare``
    (the collector's own, where it reads meanwhile), at most MOST_PROCESSES, none for fewer
    than FEWEST_WORKERS workers, and none where the pool would be the only CPU at work (one
    process drawing while the collector waits)."""
    cpus = _usable_cpus()
    if asked is not None:
        return min(asked, cpus)
    if workers < FEWEST_WORKERS:
        return 0
    chosen = max(0, min(MOST_PROCESSES, cpus - spare))
    return chosen if chosen + spare >= 2 else 0


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


def run_in(pool: Executor | None, fn: Callable[..., _T], *args: Any
           ) -> tuple[Future[_T], Executor | None]:
    """``fn(*args)`` in ``pool``, or here where there is none or it cannot start a process
    (a limit on processes: the same result, computed here); the pool to use next (None
    once it could not start one).

    A process pool queues the work before it starts the process that fails, and its
    running processes would take it up while it is computed here too: the pool is shut
    down first, the work it was handed finished (the futures handed out keep their
    results), so the two never run at once (a picture saved twice, the same)."""
    if pool is not None:
        try:
            return pool.submit(fn, *args), pool
        except OSError:
            pool.shutdown(wait=True)
            pool = None
    done: Future[_T] = Future()
    done.set_result(fn(*args))
    return done, pool


def take_in_order(pending: deque[tuple[Future[_T], _P]], ahead: int,
                  take: Callable[[_T, _P], None], what: str) -> None:
    """``take(result, with)`` of the work in ``pending`` (futures in the order it was handed
    out, each with what goes with it), oldest first: what is back, and then as much as
    leaves at most ``ahead`` waiting (0: all, waited for). Results are taken in the order
    of the work, whichever process is quicker, and what waits stays bounded."""
    while pending and (len(pending) > ahead or pending[0][0].done()):
        done, payload = pending.popleft()
        take(outcome(done, what), payload)


def outcome(done: Future[_T], what: str) -> _T:
    """``done``'s result; a pool process that died (out of memory, killed) is a one-line
    error naming ``what`` it computed, and how to do without the pool."""
    try:
        return done.result()
    except BrokenExecutor as e:
        raise CollectorError(f"a process of the {what}'s pool ended abruptly (out of memory, "
                             f"or killed): --processes 0 computes the {what} in this one"
                             ) from e


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
