"""Stretches without data (pure): where no GPU sample of a worker falls for longer than
``--max-age`` inside an export's range — Prometheus or the exporter was down, or the worker
was away. The numbers of such a stretch are missing (attribution counts nothing for it), so
an export, a report and a Monitor say so instead of showing a short job as idle."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dask_metrics.collector.model.timespec import format_rfc3339

MAX_NAMED = 5  # workers named in one warning; the rest are counted


def holes(times: Sequence[int], start: int, end: int, max_age: int) -> list[tuple[int, int]]:
    """(from, to) in ms of each stretch of [start, end] longer than ``max_age`` without a
    sample in ``times`` (sorted), the range's edges included; none for a worker with no
    sample in the range (it is not in the export). Where ``times`` hold the samples just
    outside the range, an interval across an edge is measured from that sample: longer than
    ``max_age``, it counts for nothing in the numbers, and it is a hole, from that sample."""
    found = Holes(start, end, max_age)
    found.add(times)
    return found.result()


class Holes:
    """``holes`` of a worker's samples told a piece at a time, oldest first: what an export
    that writes a long range piece by piece carries from one piece to the next."""

    def __init__(self, start: int, end: int, max_age: int) -> None:
        self.start, self.end, self.max_age = start, end, max_age
        self._last = start  # the latest sample before the next one, or the range's start
        self._after: int | None = None  # the first sample past the range
        self._inside = False
        self._found: list[tuple[int, int]] = []

    def add(self, times: Iterable[int]) -> None:
        """More samples, later than those told before."""
        for t in times:
            if t < self.start:
                self._last = t
            elif t > self.end:
                if self._after is None:
                    self._after = t
            else:
                if t - self._last > self.max_age and t > self.start:
                    self._found.append((self._last, t))
                self._last, self._inside = t, True

    def result(self) -> list[tuple[int, int]]:
        if not self._inside:
            return []
        last = self._after if self._after is not None else self.end
        tail = [(self._last, last)] if last - self._last > self.max_age \
            and self._last < self.end else []
        return [*self._found, *tail]


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
