"""Stretches without data (pure): where no GPU sample of a worker falls for longer than
``--max-age`` inside an export's range — Prometheus or the exporter was down, or the worker
was away. The numbers of such a stretch are missing (attribution counts nothing for it), so
an export, a report and a Monitor say so instead of showing a short job as idle."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise

from dask_metrics.collector.timespec import format_rfc3339

MAX_NAMED = 5  # workers named in one warning; the rest are counted


def holes(times: Sequence[int], start: int, end: int, max_age: int) -> list[tuple[int, int]]:
    """(from, to) in ms of each stretch of [start, end] longer than ``max_age`` without a
    sample in ``times`` (sorted), the range's edges included; none for a worker with no
    sample in the range (it is not in the export). Where ``times`` hold the samples just
    outside the range, an interval across an edge is measured from that sample: longer than
    ``max_age``, it counts for nothing in the numbers, and it is a hole, from that sample."""
    inside = [t for t in times if start <= t <= end]
    if not inside:
        return []
    before = [t for t in times if t < start]
    after = [t for t in times if t > end]
    edges = [before[-1] if before else start, *inside, after[0] if after else end]
    return [(a, b) for a, b in pairwise(edges) if b - a > max_age and b > start and a < end]


def warnings_of(found: Iterable[tuple[str, tuple[int, int]]], max_age: int) -> list[str]:
    """One line per stretch, overlapping stretches of several workers as one (Prometheus
    down: every worker at once), naming the workers and the longest stretch."""
    merged: list[tuple[int, int, list[str], int]] = []  # (from, to, workers, longest)
    for worker, (a, b) in sorted(found, key=lambda item: item[1]):
        if merged and a <= merged[-1][1]:
            lo, hi, workers, longest = merged[-1]
            merged[-1] = (lo, max(hi, b), [*workers, worker], max(longest, b - a))
        else:
            merged.append((a, b, [worker], b - a))
    lines = []
    for lo, hi, workers, longest in merged:
        names = ", ".join(sorted(set(workers))[:MAX_NAMED])
        more = len(set(workers)) - MAX_NAMED
        who = f"{len(set(workers))} worker(s) ({names}{f', and {more} more' if more > 0 else ''})"
        lines.append(f"no GPU sample of {who} for up to {longest / 1000:.0f} s between "
                     f"{format_rfc3339(lo)} and {format_rfc3339(hi)} (more than --max-age "
                     f"{max_age / 1000:g} s): Prometheus or the exporter was down, or the "
                     "worker away; that stretch counts for nothing in the numbers")
    return lines
