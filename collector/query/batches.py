"""How many workers one query asks for: a fleet's workers are read in batches (``worker=~"a|b"``),
so that the queries are fewer than the workers, while each answer stays small enough for
the server's limits and for the collector's memory, whatever the number of workers (and,
``batches_of``, how many jobs' activity counters).

The size of an answer is learnt from the data (how many samples a GPU's series hold per
query window), not assumed from a scrape interval."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from dask_metrics.collector.model.series import WorkerInfo, plan_chunks
from dask_metrics.collector.query.presence import gpu_parts
from dask_metrics.collector.query.reads import MAX_POINTS
from dask_metrics.collector.query.scope import ATTRIBUTION_METRICS, Scope
from dask_metrics.collector.store.client import PrometheusClient, PrometheusError
from dask_metrics.contract import INFO

_T = TypeVar("_T")

SAMPLES_PER_QUERY = 250_000
"""The samples one batch's query may hold: about 8 MB of JSON, some 140 MB while it is
decoded and 5 MB kept, far under Prometheus' --query.max-samples (50 M) and the collector's
answer cap; a worker whose own answer is larger is a batch alone (its time chunks halve as
before)."""
MAX_BATCH = 200
"""Workers in one batch at most: the regular expression of their names stays short."""
WIDEST_CHUNKS = 24
"""Time chunks one query of a batch may span at most (``batch_chunk``): a day of hours."""
PROBE_WINDOW = 600_000
"""ms of the range's end in which the samples per GPU are counted."""


def worker_batches(workers: Sequence[WorkerInfo], samples_per_gpu: float,
                   limit: int = SAMPLES_PER_QUERY, most: int = MAX_BATCH
                   ) -> list[list[WorkerInfo]]:
    """``workers`` in order, cut into consecutive batches whose GPUs' samples add up to at
    most ``limit`` (``samples_per_gpu``: what one GPU's series hold in one query) and of at
    most ``most`` workers; every batch holds at least one worker."""
    return batches_of([(w, max(len(w.gpus), 1) * samples_per_gpu) for w in workers], limit,
                      most)


def range_batches(workers: Sequence[WorkerInfo], samples_per_gpu: float, lo: int, hi: int,
                  chunk: int) -> list[list[WorkerInfo]]:
    """``worker_batches`` for a command that holds a batch's whole range [lo, hi] (ms) at
    once (``peaks``, the report): the samples of every time chunk of the range count, so
    that a long range is held a worker or a few at a time, not a query's worth of workers
    times its chunks (a day: 24 times the hour's)."""
    return worker_batches(workers, samples_per_gpu * len(plan_chunks(lo, hi, chunk)))


def batch_chunk(batch: Sequence[WorkerInfo], samples_per_gpu: float, chunk: int,
                limit: int = SAMPLES_PER_QUERY) -> int:
    """The time chunk (ms) of a batch's queries over a range held whole: as many of
    ``chunk`` as keep an answer within ``limit`` samples, so that a worker read alone over
    a day costs a few queries, not one per hour (a store that finds one too big has it
    halved, as any). At most WIDEST_CHUNKS of them: the samples per GPU are counted at the
    range's end, and a fleet denser before would fill a wider answer as many times over."""
    held = sum(max(len(w.gpus), 1) for w in batch) * samples_per_gpu
    return chunk * min(max(1, int(limit // max(held, 1.0))), WIDEST_CHUNKS)


def batches_of(sized: Sequence[tuple[_T, float]], limit: float = SAMPLES_PER_QUERY,
               most: int = MAX_BATCH) -> list[list[_T]]:
    """The items of (item, samples) in order, cut into consecutive batches whose samples add
    up to at most ``limit``, of at most ``most`` items; every batch holds at least one."""
    batches: list[list[_T]] = []
    held = 0.0
    for item, size in sized:
        if batches and held + size <= limit and len(batches[-1]) < most:
            batches[-1].append(item)
            held += size
        else:
            batches.append([item])
            held = size
    return batches


def samples_per_gpu(client: PrometheusClient, lo: int, hi: int, chunk: int, metrics: int,
                    step: int | None, scope: Scope) -> float:
    """What one GPU's series hold in one query of [lo, hi] (ms): raw, ``metrics`` series of
    as many samples as its most frequently scraped GPU has in the range's last
    ``PROBE_WINDOW`` (one instant query, or one per part of the GPUs where a store's limit
    on series is below them: ``gpu_parts``), scaled to a query's time chunk; with ``step``, a
    metric's grid points per query, or gpu_by_prefix's raw counters if more. A range with no
    sample there, or a count the store finds too big, counts as one sample per second (the
    most a query can then hold is the 1 s scrape's)."""
    span = max(min(chunk, hi - lo + 1), 1)
    window = min(PROBE_WINDOW, max(hi - lo, 0)) + 1  # 1 ms more: a left-open window too
    try:
        found = gpu_parts(client, scope.of(INFO.name), hi - window, hi,
                          lambda more: client.query(f"max(count_over_time("
                                                    f"{scope.of(INFO.name, more)}[{window}ms]))",
                                                    hi / 1000))
    except PrometheusError as exc:
        if not exc.splittable:  # the store is unreachable or refuses: the next query says so
            raise
        found = []  # too big for the store's limits: the most a query can then hold
    count = max((s.values[-1] for s in found if s.values), default=0.0)
    raw = max((count if count > 0 else window / 1000) / window * span, 1.0)
    if step:
        return max(float(min(span // step + 1, MAX_POINTS)), raw * len(ATTRIBUTION_METRICS))
    return raw * metrics
