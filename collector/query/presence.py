"""What a range holds without reading its samples: whether a series has a sample,
where its data begins and ends, the label values and label sets of its series."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from dask_metrics.collector.model.series import merge
from dask_metrics.collector.query.promql import narrower
from dask_metrics.collector.query.reads import per_chunk
from dask_metrics.collector.query.refusals import LabelParts, joined, parts_of
from dask_metrics.collector.query.scope import UNSCOPED, Scope, split_label
from dask_metrics.collector.store.client import PrometheusClient
from dask_metrics.contract import INFO, UUID

_T = TypeVar("_T")


def _none_in_long(client: PrometheusClient, sel: str, start: int, end: int, chunk: int
                  ) -> bool:
    """Whether a range longer than TRIM_ABOVE_CHUNKS chunks holds no sample of ``sel``: one
    query says so, where the chunks would cost one each (a year: 8,760)."""
    return end - start > TRIM_ABOVE_CHUNKS * chunk and not any_sample(client, sel, start, end)


def fetch_label_sets(client: PrometheusClient, sel: str, start: int, end: int, chunk: int,
                     scope: Scope = UNSCOPED) -> list[dict[str, str]]:
    """The label sets of the series of ``sel`` with a sample in [start, end], without
    transferring their samples (``last_over_time`` keeps one per series and chunk)."""
    if _none_in_long(client, sel, start, end, chunk):
        return []
    found = merge((s for _, s in per_chunk(client, lambda rng: f"last_over_time({sel}{rng})",
                                             start, end, chunk)), scope.replica_labels)
    return [s.labels for s in found]


def label_values(client: PrometheusClient, sel: str, name: str, start: int, end: int,
                 chunk: int) -> set[str]:
    """The values of the label ``name`` of the series of ``sel`` with a sample in [start,
    end]: one series per value comes back (``count by``), however many series hold it."""
    if _none_in_long(client, sel, start, end, chunk):
        return set()
    return {s.labels.get(name, "") for _, s in per_chunk(
        client, lambda rng: f"count by ({name}) (last_over_time({sel}{rng}))", start, end,
        chunk)}


TRIM_ABOVE_CHUNKS = 4
"""Ranges longer than this many chunks are first narrowed to where the GPU series have
samples: ``--since 1y`` over a week of data costs a week's queries, not a year's."""


def gpu_parts(client: PrometheusClient, sel: str, start: int, end: int,
              ask: Callable[[Sequence[str]], list[_T]]) -> list[_T]:
    """``ask(matchers)`` about every GPU series of ``sel`` in [start, end] (ms), joined:
    asked whole, or where a store will not count them at once for a limit on series, by
    parts of their UUIDs (``refusals``)."""
    return joined(parts_of(client, sel, UUID, start, end), ask)


def any_sample(client: PrometheusClient, sel: str, start: int, end: int,
               parts: LabelParts | None = None) -> bool:
    """Whether the series of ``sel`` have a sample in [start, end] (ms): one instant query
    (series that a store will not count at once for a limit on series: by ``parts``, until
    one has a sample)."""
    window = max(end - start, 1) + 1

    def ask(more: Sequence[str]) -> bool:
        return bool(client.query(f"count(last_over_time({narrower(sel, more)}[{window}ms]))",
                                 end / 1000))

    return ask(()) if parts is None else any(parts.answers(ask))


def present(client: PrometheusClient, metrics: Sequence[str], start: int, end: int,
            scope: Scope = UNSCOPED) -> set[str]:
    """The ``metrics`` with a sample in [start, end] (ms): one instant query each (by parts
    of their GPUs or workers where a store's limit on series is below them)."""
    return {m for m in metrics if any_sample(client, scope.of(m), start, end, parts_of(
        client, scope.of(m), split_label(m), start, end))}


def data_span(client: PrometheusClient, start: int, end: int, chunk: int,
              step: int | None = None, scope: Scope = UNSCOPED) -> tuple[int, int]:
    """[start, end] (ms) narrowed to the first and last GPU sample in it, give or take a
    resolution of chunk/64: never past a sample. A ``step`` grid keeps its points on start
    + k*step. The range is returned as it is when short, or when it holds nothing (the
    caller says so)."""
    if end - start <= TRIM_ABOVE_CHUNKS * chunk:
        return start, end
    sel = scope.of(INFO.name)
    found = _narrowed(client, sel, start, end, max(chunk // 64, 1000),
                      parts_of(client, sel, UUID, start, end))
    if found is None:
        return start, end
    return on_grid(found[0], start, step), found[1]


def read_span(first: int, last: int, start: int, end: int, margin: int,
              step: int | None = None) -> tuple[int, int]:
    """Where the series of GPU data from ``first`` to ``last`` (data_span) are read: from
    ``margin`` ms before it to as much after, within [start, end], the start on the
    ``step`` grid. What the intervals at its edges need is read: the scheduler's scrapes of
    what ran then. A range read whole and one narrowed to its data then answer alike."""
    return on_grid(max(start, first - margin), start, step), min(end, last + margin)


def on_grid(t: int, start: int, step: int | None) -> int:
    """``t``, or with a ``step`` the grid point start + k*step at or before it."""
    return start + (t - start) // step * step if step else t


def span_of(client: PrometheusClient, sel: str, start: int, end: int, chunk: int
            ) -> tuple[int, int] | None:
    """[start, end] (ms) narrowed to the samples of ``sel`` in it, within a chunk of the
    first and the last (None: there are none): a long range is read there, the same
    samples at the cost of the data rather than of the range (a short one as it is,
    unasked)."""
    if end - start <= TRIM_ABOVE_CHUNKS * chunk:
        return start, end
    return _narrowed(client, sel, start, end, chunk)


def _narrowed(client: PrometheusClient, sel: str, start: int, end: int, resolution: int,
              parts: LabelParts | None = None) -> tuple[int, int] | None:
    """From at most ``resolution`` ms before the first sample of ``sel`` in [start, end] to
    as much after the last (None: there is none), by bisection with instant queries whose
    cost follows the samples they cover (``any_sample``'s ``parts``)."""

    def any_in(lo: int, hi: int) -> bool:  # a sample in (lo, hi]
        return any_sample(client, sel, lo + 1, hi, parts)

    # no sample is from the future (a minute allowed for clocks apart): --until 2099 costs
    # no bisection of the years to come
    end = max(start, min(end, round(time.time() * 1000) + 60_000))
    if not any_in(start - 1, end):
        return None
    lo, hi = start - 1, end  # the first sample is in (lo, hi]
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if any_in(start - 1, mid) else (mid, hi)
    first = max(start, lo)
    lo, hi = first, end + 1  # the last sample is in [lo, hi)
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if any_in(mid - 1, end) else (lo, mid)
    return first, min(end, hi)


def lookahead(end: int, by: int) -> int:
    """``end`` + ``by`` (ms), never past now: how far a range's scheduler series are read to
    see what the scheduler recorded about it at its next scrape (an outcome, an end)."""
    return min(end + by, max(round(time.time() * 1000), end))
