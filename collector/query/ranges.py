"""The time range of a command: its defaults and the checks every command makes of it."""

from __future__ import annotations

from dask_metrics.collector.errors import ArgumentError
from dask_metrics.collector.model.timespec import format_duration, format_rfc3339, to_ms

DEFAULT_MAX_AGE = 120.0
"""Seconds: how old a sample may be and still describe a later time (a --step grid point, or
the job/DAG state of a GPU sample). Bridges missed scrapes, not a worker restart."""
DEFAULT_CHUNK = 3600.0
"""Seconds of raw samples asked for in one query (halved automatically when too big), and
of a range an export reads, joins and writes at once (pieces)."""


def check_range(since: float, until: float) -> None:
    if not since < until:
        raise ValueError(f"the start ({format_rfc3339(to_ms(since))}) must be before the end "
                         f"({format_rfc3339(to_ms(until))})")


MAX_STEP_ROWS = 5_000_000
"""Grid points per GPU that ``--step`` may ask for: a 1 s grid over eight weeks. Finer
than that is a mistyped step (1ms for 1m), not an analysis; raw samples need no grid."""


def check_step(since: float, until: float, step: float) -> None:
    """A grid of ``step`` over [since, until] has more than one point and not millions."""
    span, points = until - since, (until - since) / step
    if points < 1:
        raise ArgumentError("step", format_duration(step),
                            f"is longer than the range ({format_duration(span)})",
                            "give a shorter step, or none for raw samples")
    if points > MAX_STEP_ROWS:
        raise ArgumentError("step", format_duration(step),
                            f"over {format_duration(span)} makes {points:,.0f} rows per GPU "
                            f"(at most {MAX_STEP_ROWS:,})",
                            "give a longer step, or none for the raw samples as scraped")
