"""What the command line shares between its commands: reading option values, the terminal
it reports to, and wording failures with its options."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from dask_metrics.collector.errors import (
    CollectorError,
    UsageError,
)
from dask_metrics.collector.errors import option as long_option
from dask_metrics.collector.model.columns import select
from dask_metrics.collector.model.timespec import (
    format_duration,
    parse_positive_duration,
    parse_when,
)
from dask_metrics.contract import REPLICA_LABELS

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130



class Terminal:
    """Progress on stderr only when it is a terminal and not --quiet; warnings always."""

    def __init__(self, quiet: bool, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = not quiet and self.stream.isatty()
        self._line = False
        self._clock = clock
        self._began: float | None = None

    def progress(self, done: float, total: int, worker: str, rows: int | None = None) -> None:
        """``worker 3/100: w-2, 1.2 M rows, 45 k rows/s, about 40 s left`` (the rows written
        so far and their rate where the command writes rows; the time left from the pace so
        far)."""
        if not self.live:
            return
        if done >= total:
            self.clear()
            self._began = None
            return
        now = self._clock()
        if self._began is None or done == 0:
            self._began = now
        left = ""
        if rows:
            left += f", {_count(rows)} rows"
            if now > self._began:
                left += f", {_count(rows / (now - self._began))} rows/s"
        if done:
            seconds = (now - self._began) / done * (total - done)
            left += f", about {_about(seconds)} left"
        self.stream.write(f"\rcollector: worker {int(done) + 1}/{total}: {worker}{left}\033[K")
        self.stream.flush()
        self._line = True

    def warning(self, message: str) -> None:
        self.clear()
        print(f"collector: warning: {message}", file=self.stream)

    def info(self, message: str) -> None:
        if not self.quiet:
            print(f"collector: {message}", file=self.stream)

    def clear(self) -> None:
        """End a progress line, so that what follows starts on a clean line."""
        if self._line:
            self.stream.write("\r\033[K")
            self._line = False



def _about(seconds: float) -> str:
    """``40 s``, ``12 min``, ``1 h 30 min``: a time left, as precise as it is worth."""
    if seconds < 90:
        return f"{max(round(seconds), 1)} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 90 else f"{minutes // 60} h {minutes % 60} min"

def _count(n: float) -> str:
    """``950``, ``45 k``, ``1.2 M``: a count on a progress line."""
    if n < 1000:
        return f"{n:.0f}"
    if n < 1e6:
        return f"{n / 1e3:.0f} k"
    return f"{n / 1e6:.1f} M" if n < 1e9 else f"{n / 1e9:.1f} G"


def words(values: Sequence[str] | None) -> list[str] | None:
    """``--metrics a b,c`` -> [a, b, c]."""
    if values is None:
        return None
    return [w for v in values for w in v.split(",") if w.strip()]


#: The longest --max-age and --peak-window: a sample a day old says nothing about now, and
#: the samples fetched before the range grow with them.
LONGEST_LOOKBACK = 86400.0
#: The shortest --chunk: a chunk is one query per series, and Prometheus answers an hour of
#: one-second samples in one.
SHORTEST_CHUNK = 60.0


def duration(text: str | None, option: str, at_most: float | None = None,
              at_least: float | None = None) -> float | None:
    if text is None:
        return None
    try:
        seconds = parse_positive_duration(text)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None
    if at_most is not None and seconds > at_most:
        raise UsageError(f"{option}: {text!r} is too long (at most {format_duration(at_most)})")
    if at_least is not None and seconds < at_least:
        raise UsageError(f"{option}: {text!r} is too short (at least "
                         f"{format_duration(at_least)})")
    return seconds


def when(text: str | None, option: str, now: float) -> float | str | None:
    if text is None:
        return None
    try:
        return parse_when(text, now)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


def options(args: argparse.Namespace) -> dict[str, Any]:
    """Parse every value that can be checked before talking to Prometheus."""
    now = time.time()
    metrics = words(getattr(args, "metrics", None))
    try:
        select(metrics)
    except ValueError as exc:
        raise UsageError(f"--metrics: {exc}") from None
    return {"now": now, "since": when(args.since, "--since", now),
            "until": when(args.until, "--until", now), "metrics": metrics,
            "workers": words(args.workers),
            "step": duration(getattr(args, "step", None), "--step"),
            "max_age": duration(args.max_age, "--max-age", LONGEST_LOOKBACK),
            "chunk": duration(args.chunk, "--chunk", at_least=SHORTEST_CHUNK),
            "cluster": getattr(args, "cluster", None),
            "replica_labels": replica_labels(args)}


def replica_labels(args: argparse.Namespace) -> tuple[str, ...]:
    """The built-in replica labels and those of --replica-label (commas work)."""
    given = words(getattr(args, "replica_label", None)) or []
    bad = [name for name in given if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name)]
    if bad:
        raise UsageError(f"--replica-label: {bad[0]!r} is not a label name")
    return tuple(dict.fromkeys([*REPLICA_LABELS, *given]))


#: Keywords of the Python API whose command-line option is spelled otherwise.
OPTION_OF = {"url": "--prometheus", "password": "--password-file",
             "bearer_token": "--bearer-token-file", "read_timeout": "--timeout",
             "connect_timeout": "--timeout"}


def cli_option(name: str) -> str:
    """The option that sets the keyword ``name`` (errors.setting)."""
    return OPTION_OF.get(name) or long_option(name)


def fail(code: int, message: object) -> int:
    text = message.worded(cli_option) if isinstance(message, CollectorError) else message
    print(f"collector: error: {text}", file=sys.stderr)
    return code


def cannot_write(exc: OSError) -> str:
    """One line for an output that cannot be written, naming it (export's --out, watch's)."""
    where = f"{exc.filename}: " if exc.filename else ""
    return f"cannot write the output: {where}{exc.strerror or exc}"
