"""Work beside the main thread, and the garbage collector out of the way: what lets a
collector command wait for Prometheus and write files at the same time."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar, cast

Item = TypeVar("Item")
Result = TypeVar("Result")


@contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off (reference counting still frees everything),
    back on afterwards only if it was on. Also a decorator: ``@gc_paused()``."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def prefetched(fetch: Callable[[Item], Result], items: Iterable[Item]) -> Iterator[Result]:
    """``fetch(item)`` of each item in order, the next one fetched in a thread while the caller
    works on this one. ``fetch`` runs in those threads only, one call at a time."""
    todo = iter(items)
    ahead = next((Background(fetch, item) for item in todo), None)
    while ahead is not None:
        value = ahead.result()
        ahead = next((Background(fetch, item) for item in todo), None)
        yield value


class Background(Generic[Item, Result]):
    """``fn(arg)`` in a daemon thread. Daemon: a request stuck on a silent server never holds
    the process's exit after SIGTERM or Ctrl-C. The wait wakes up every 0.2 s because
    Python runs signal handlers in the main thread only, and the kernel may hand the signal
    to this thread, blocked in a socket: a wait without a timeout would never see it."""

    def __init__(self, fn: Callable[[Item], Result], arg: Item) -> None:
        self._done = threading.Event()
        self._value: Result | None = None
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(fn, arg), daemon=True).start()

    def _run(self, fn: Callable[[Item], Result], arg: Item) -> None:
        try:
            self._value = fn(arg)
        except BaseException as exc:  # handed to the waiting thread, which raises it
            self._error = exc
        finally:
            self._done.set()

    def result(self) -> Result:
        while not self._done.wait(0.2):
            pass
        if self._error is not None:
            raise self._error
        return cast(Result, self._value)
