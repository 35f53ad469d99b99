"""Samples read in the parts a store answers: raw samples by time chunks, grids under the
points limit, aggregates per chunk.

Raw samples come from range-selector instant queries (``metric[Δ]`` evaluated at the end
of each chunk), or where ``read_api`` asks for it and the store serves it from Prometheus'
remote-read API or VictoriaMetrics' export API (``PrometheusClient.read_raw``): the
timestamps are the real scrape times and nothing is filled in. A chunk the store refuses as
too big is halved and asked again (``refusals``)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator

from dask_metrics.collector.model.series import (
    Series,
    clip,
    grid_halver,
    halve_range,
    merge,
    plan_chunks,
    plan_step_chunks,
)
from dask_metrics.collector.query.refusals import halved, whole
from dask_metrics.collector.query.scope import UNSCOPED, Scope
from dask_metrics.collector.store.client import PrometheusClient, PrometheusError

MAX_POINTS = 11_000  # Prometheus' limit of points per series in one query_range


def _raw_run(client: PrometheusClient, expr: Callable[[str], str], start: int,
             sel: str | None = None) -> Callable[[int, int], list[Series]]:
    """A query of the window (lo, hi] ([start, hi] for the first), evaluated at hi;
    ``expr`` puts the range (``[3600000ms]``) into the PromQL. With ``sel``, the raw
    samples of that selector, by the client's faster API where it has one."""

    def run(lo: int, hi: int) -> list[Series]:
        first = lo == start
        if sel is not None:
            found = client.read_raw(sel, lo if first else lo + 1, hi)
            if found is not None:
                return clip(found, lo, hi, first)  # whole chunks: samples outside too
        window = hi - lo + (1 if first else 0)  # 1 ms more so a left-open range still has lo
        return clip(client.query(expr(f"[{window}ms]"), hi / 1000), lo, hi, first)

    return run


def _chunked(client: PrometheusClient, expr: Callable[[str], str], start: int, end: int,
             chunk: int, only: Collection[int] | None = None, sel: str | None = None,
             halve: bool = True) -> Iterator[Series]:
    """The answers of ``expr`` (see ``_raw_run``, and ``sel``) over the chunks of [start,
    end] (those of ``only``, by their place in plan_chunks, if given), a chunk the store
    refuses halved (unless not ``halve``: the refusal is then the caller's)."""
    return (s for _, s in _numbered(client, expr, start, end, chunk, only, sel, halve))


def _numbered(client: PrometheusClient, expr: Callable[[str], str], start: int, end: int,
              chunk: int, only: Collection[int] | None = None, sel: str | None = None,
              halve: bool = True) -> Iterator[tuple[int, Series]]:
    """``_chunked``'s answers with the place of the chunk each came from."""
    run = _raw_run(client, expr, start, sel)
    halver = halve_range if halve else whole
    return ((k, s) for k, (lo, hi) in enumerate(plan_chunks(start, end, chunk))
            if only is None or k in only for s in halved(run, lo, hi, halver))


def fetch_raw(client: PrometheusClient, sel: str, start: int, end: int, chunk: int,
              scope: Scope = UNSCOPED, only: Collection[int] | None = None,
              halve: bool = True) -> list[Series]:
    """Every raw sample of ``sel`` in [start, end] (ms), each exactly once (HA replicas'
    copies of a series made one by ``scope``'s replica labels); ``only``: of those chunks
    (``_chunked``), where the samples are known to be; ``halve``: whether a chunk the
    store refuses is halved here."""
    return merge(_chunked(client, lambda rng: sel + rng, start, end, chunk, only, sel, halve),
                 scope.replica_labels)


def fetch_steps(client: PrometheusClient, expr: str, start: int, end: int, step: int,
                scope: Scope = UNSCOPED, halve: bool = True) -> list[Series]:
    """``expr`` on the grid start + k*step within [start, end], in query_range chunks under
    the 11,000-points limit (``halve``: as for ``fetch_raw``)."""

    def run(lo: int, hi: int) -> list[Series]:
        return client.query_range(expr, lo / 1000, hi / 1000, step / 1000)

    halver = grid_halver(step) if halve else whole
    return merge((s for lo, hi in plan_step_chunks(start, end, step, MAX_POINTS)
                  for s in halved(run, lo, hi, halver)), scope.replica_labels)


def per_chunk(client: PrometheusClient, expr: Callable[[str], str], start: int, end: int,
               chunk: int) -> Iterator[tuple[int, Series]]:
    """(chunk's place, an answer) of ``expr`` (an aggregate over a window: ``expr`` puts
    the range into the PromQL) at the end of each chunk of [start, end]: the chunks of one
    length in range queries (on a store's compacted blocks, an instant query per chunk
    looks every series of the block up again: counting a week of a fleet's jobs took 50 s
    that way, 4 in one range query), the last, longer one alone; each window a millisecond
    wider, so that a sample on an edge is in both chunks. A store that refuses a range
    query has those chunks asked one at a time."""
    plan = plan_chunks(start, end, chunk)
    even = len(plan) - 1 if len(plan) > 1 else 0  # the last may be longer: alone
    for a in range(0, even, MAX_POINTS):
        b = min(a + MAX_POINTS, even)
        try:
            found = client.query_range(expr(f"[{chunk + 1}ms]"), plan[a][1] / 1000,
                                       plan[b - 1][1] / 1000, chunk / 1000)
        except PrometheusError as exc:
            if not exc.splittable:
                raise
            yield from _numbered(client, expr, start, end, chunk, range(a, b))
            continue
        for s in found:
            for t, v in zip(s.times, s.values, strict=True):
                yield a + round((t - plan[a][1]) / chunk), Series(s.labels, [t], [v])
    yield from _numbered(client, expr, start, end, chunk, range(even, len(plan)))
