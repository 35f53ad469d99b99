"""The rules of activities.csv, gpu_by_prefix.csv and the worker columns, without a server:
counter increases (baseline, resets, series born in the range), the split of a GPU's busy
seconds and energy among the task prefixes that executed, and the as-of join of a worker's
series to its GPU samples."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from dask_metrics.collector.attribution.activities import (
    Increases,
    activity_rows,
    unit_of,
)
from dask_metrics.collector.attribution.gpu_by_prefix import PrefixUses, prefix_rows, seen_by
from dask_metrics.collector.attribution.prefix_scrapes import attribute, prefix_timeline
from dask_metrics.collector.attribution.prefix_use import PrefixUse
from dask_metrics.collector.model.columns import select, source_metrics, worker_metrics
from dask_metrics.collector.model.counters import increase, steps
from dask_metrics.collector.model.series import Series, WorkerInfo, clip, cluster_timeline
from dask_metrics.collector.model.tables import as_of, joined_by_metric, worker_table
from dask_metrics.collector.model.timeline import span_timeline, worker_timeline
from dask_metrics.collector.output.csv_lines import seed_lines, tidy_lines
from dask_metrics.contract import (
    ACTIVITY_COLUMNS,
    GPU_BY_PREFIX_COLUMNS,
    activity_spec,
)

S = 1000  # ms


def _s(labels: dict[str, str], points: dict[int, float]) -> Series:
    return Series(labels, list(points), list(points.values()))


# ---- counter increases ------------------------------------------------------------------------


def test_increase_baseline_is_the_value_at_the_start() -> None:
    # existed before the start (10 at 0 s): only what it grew after the start counts
    assert increase([0, 5 * S, 10 * S], [10.0, 14.0, 19.0], 2 * S) == 9.0
    # a sample exactly at the start is the baseline
    assert increase([2 * S, 5 * S], [10.0, 14.0], 2 * S) == 4.0


def test_increase_of_a_series_born_in_the_range_counts_from_zero() -> None:
    assert increase([5 * S, 10 * S], [3.0, 7.0], 2 * S) == 7.0


def test_increase_survives_resets_and_nan() -> None:
    # 10 -> 14 (+4), reset to 2 (+2: counted from 0), 5 (+3), NaN skipped, 6 (+1)
    values = [10.0, 14.0, 2.0, 5.0, math.nan, 6.0]
    assert increase([0, 1, 2, 3, 4, 5], values, 0) == 10.0


def test_infinite_samples_are_skipped_not_turned_into_nan() -> None:
    # an older preload exported an infinite digest as +Inf for the counter's whole life
    assert increase([0, 1, 2], [math.inf] * 3, 0) == 0.0
    assert increase([0, 1, 2, 3], [1.0, math.inf, 3.0, -math.inf], 0) == 2.0


@pytest.mark.parametrize("seed", range(100))
def test_increases_told_a_piece_at_a_time_are_the_whole_ranges_to_the_bit(seed: int) -> None:
    """Counters that reset, skip NaN and infinite samples, start before, at or after the
    start, or only in a later piece: folded in random pieces of the range (the chunks an
    export reads a few at a time), each counter's increase is ``increase``'s over the whole
    range, bit for bit."""
    rng = random.Random(seed)
    start = 50 * S
    series = []
    for k in range(6):
        times = sorted(rng.sample(range(rng.choice([0, 40, 60]) * S, 400 * S, S),
                              rng.randrange(1, 60)))
        value, values = rng.uniform(0, 10), []
        for _ in times:
            value = rng.uniform(0, 3) if rng.random() < 0.1 else value + rng.uniform(0, 7)
            values.append(rng.choice([math.nan, math.inf]) if rng.random() < 0.05 else value)
        series.append(Series({"__name__": "dask_job_activity_seconds_total", "job_id": "1",
                              "dag_id": str(k), "prefix": "p", "activity": "a"},
                             times, values))
    cuts = sorted(rng.sample(range(1, 400), rng.randrange(0, 6)))
    fold = Increases(start)
    for lo, hi in zip([0, *cuts], [*cuts, 400], strict=True):
        fold.add(clip(series, lo * S, hi * S - 1, True))
    assert {k[1]: v for k, v in fold.result().items()} == {
        s.labels["dag_id"]: increase(s.times, s.values, start) for s in series
        if any(map(math.isfinite, s.values))}


def test_activity_rows_add_pieces_drop_zeros_and_sort() -> None:
    seconds, custom = activity_spec("seconds").name, activity_spec("Flops/s").name
    assert unit_of(custom) == "flops_s"
    base = {"__name__": seconds, "job_id": "10", "dag_id": "0", "prefix": "load",
            "activity": "thread-cpu"}
    series = [
        _s(base, {0: 5.0, 2 * S: 8.0}),
        _s({**base, "instance": "moved:8787"}, {3 * S: 2.0}),  # a moved scheduler: +2
        _s({**base, "job_id": "2", "dag_id": ""}, {0: 1.0, 2 * S: 4.0}),
        _s({**base, "job_id": "2", "activity": "idle"}, {0: 1.0, 2 * S: 1.0}),  # no growth
        _s({**base, "__name__": custom, "job_id": "2", "dag_id": ""}, {2 * S: 0.5}),
    ]
    fold = Increases(S)
    fold.add(series)
    totals = fold.result()
    rows = activity_rows(totals, {"2": "etl"})
    assert [tuple(r[c] for c in ACTIVITY_COLUMNS) for r in rows] == [
        ("2", "etl", "", "load", "thread-cpu", "flops_s", 0.5, ""),
        ("2", "etl", "", "load", "thread-cpu", "seconds", 3.0, ""),
        ("10", "", "0", "load", "thread-cpu", "seconds", 5.0, ""),
    ]


# ---- GPU time per task prefix ------------------------------------------------------------------


def _tasks(prefix: str, points: dict[int, float], job: str = "0", dag: str = "0") -> Series:
    return _s({"worker": "w", "job_id": job, "dag_id": dag, "prefix": prefix}, points)


def test_counter_steps_are_reset_safe_and_skip_gaps() -> None:
    times = [0, 5 * S, 10 * S, 15 * S, 200 * S, 205 * S]
    values = [0.0, 4.0, 1.0, 3.0, 50.0, 51.0]  # reset at 10 s; a 185 s gap
    assert steps((times, values), 120 * S) == ([1, 2, 3, 5], [4.0, 1.0, 2.0, 1.0])
    assert steps(([0, S, 2 * S], [1.0, math.nan, 3.0]), 120 * S) == ([], [])


def test_busy_seconds_and_energy_are_split_per_executing_task() -> None:
    scrapes = [0, 5 * S, 10 * S, 15 * S]
    # at 5 s: 3 tasks of "train" and 1 of "load"; at 10 s: only "load"; at 15 s: nothing
    prefixes = prefix_timeline(scrapes, [_tasks("train", {5 * S: 3}),
                                         _tasks("load", {5 * S: 1, 10 * S: 1}, dag="1")],
                               120 * S)
    uses: dict = {}
    busy = ([0, 5 * S, 10 * S, 15 * S], [0.0, 4.0, 4.5, 8.5])
    energy = ([0, 5 * S, 10 * S, 15 * S], [100.0, 500.0, 600.0, 1000.0])
    used = ([0, 5 * S, 10 * S, 15 * S], [1.0, 7.0, 3.0, 9.0])
    attribute(uses, prefixes, busy, energy, used, 120 * S)
    train, load = uses["0", "0", "train"], uses["0", "1", "load"]
    assert (train.gpu_seconds, train.energy, train.peak_mem) == (3.0, 300.0, 7.0)
    assert (load.gpu_seconds, load.energy, load.peak_mem) == (1.0 + 0.5, 100.0 + 100.0, 7.0)
    # the idle interval (10, 15] went to nobody: 4 s and 400 J unattributed
    assert sum(u.gpu_seconds for u in uses.values()) == 4.5


def test_idle_gpu_gives_zero_and_missing_energy_stays_empty() -> None:
    prefixes = prefix_timeline([0, 5 * S, 6 * S], [_tasks("cpu_only", {5 * S: 2, 6 * S: 2})],
                               120 * S)
    uses: dict = {}
    used = ([0, 5 * S, 6 * S], [1.0, 2.0, math.nan])  # a NaN sample is never the peak
    attribute(uses, prefixes, ([0, 5 * S], [10.0, 10.0]), None, used, 120 * S)
    rows = prefix_rows(uses, {"0": "job"})
    assert [tuple(r[c] for c in GPU_BY_PREFIX_COLUMNS) for r in rows] == [
        ("0", "job", "0", "cpu_only", 0.0, 2.0, None, "")]


def test_a_state_expires_max_age_after_its_scrape() -> None:
    prefixes = prefix_timeline([0, 10 * S], [_tasks("a", {0: 1}), _tasks("b", {10 * S: 1})],
                               3 * S)
    names = [[k[2] for k, _ in prefixes.states[i]]
             for i in prefixes.ids_at([0, 3 * S, 3 * S + 1, 9 * S, 10 * S, 14 * S])]
    assert names == [["a"], ["a"], [], [], ["b"], []]
    assert prefixes.ids_at([-1]) == [0]  # before the first scrape: idle


def test_prefix_state_is_as_of_and_not_carried_past_max_age_or_empty_scrapes() -> None:
    # "train" seen at 0 s only; the scrape at 10 s has no series: nothing executed then
    prefixes = prefix_timeline([0, 10 * S], [_tasks("train", {0: 1})], 120 * S)
    uses: dict = {}
    busy = ([0, 4 * S, 12 * S], [0.0, 4.0, 12.0])
    attribute(uses, prefixes, busy, None, None, 120 * S)
    assert uses["0", "0", "train"].gpu_seconds == 4.0  # (0, 4] as of 0 s; (4, 12] as of 10 s
    stale: dict = {}
    attribute(stale, prefix_timeline([0], [_tasks("train", {0: 1})], 3 * S), busy, None, None,
              3 * S)
    assert stale == {}  # the only scrape is older than max_age at every busy increment


def test_add_worker_joins_a_worker_s_gpus() -> None:
    def gpu(g: str, points: dict[int, float]) -> Series:
        return _s({"gpu": g, "uuid": f"U{g}"}, points)

    series = {"dask_gpu_busy_seconds_total": [gpu("0", {0: 0.0, 5 * S: 5.0}),
                                              gpu("1", {0: 0.0, 5 * S: 1.0})],
              "dask_gpu_memory_used_bytes": [gpu("0", {5 * S: 2.0}), gpu("1", {5 * S: 9.0})]}
    uses = PrefixUses(120 * S)
    uses.add_worker([0, 5 * S], [_tasks("train", {5 * S: 1})], series)
    assert uses.result() == {("0", "0", "train"): PrefixUse(6.0, 9.0, None)}
    none = PrefixUses(120 * S)
    none.add_worker([0, 5 * S], [], series)  # nothing executed on this worker
    assert none.result() == {}


def test_a_gpu_two_workers_see_is_split_once_among_both_workers_tasks() -> None:
    """GPU U0 is seen by worker a (running 'train') and worker b (running 'load'): its 6
    busy seconds are split once among the two tasks (3 each), not counted once per worker
    (12); b's own GPU U1 stays b's alone."""
    def gpu(g: str, uuid: str, points: dict[int, float]) -> Series:
        return _s({"gpu": g, "uuid": uuid}, points)

    a = {"dask_gpu_busy_seconds_total": [gpu("0", "U0", {0: 0.0, 5 * S: 6.0})]}
    b = {"dask_gpu_busy_seconds_total": [gpu("0", "U0", {0: 0.0, 5 * S: 6.0}),
                                         gpu("1", "U1", {0: 0.0, 5 * S: 2.0})]}
    workers = [WorkerInfo("a", gpus=[("0", "U0")]),
               WorkerInfo("b", gpus=[("0", "U0"), ("1", "U1")])]
    assert seen_by(workers) == {"U0": 2, "U1": 1}
    uses = PrefixUses(120 * S, seen_by(workers))
    uses.add_worker([0, 5 * S], [_tasks("train", {5 * S: 1})], a)
    uses.add_worker([0, 5 * S], [_tasks("load", {5 * S: 1})], b)
    found = uses.result()
    assert (found["0", "0", "train"].gpu_seconds, found["0", "0", "load"].gpu_seconds) == (
        3.0, 3.0 + 2.0)
    alone = PrefixUses(120 * S, seen_by(workers))  # b had nothing executed: a's view alone
    alone.add_worker([0, 5 * S], [_tasks("train", {5 * S: 1})], a)
    assert alone.result()["0", "0", "train"].gpu_seconds == 6.0


# ---- the worker's columns -----------------------------------------------------------------------


def test_worker_columns_are_joined_as_of_to_each_gpu_sample() -> None:
    columns = select(["total-mem", "worker-mem", "worker-cpu"])
    assert source_metrics(columns) == ["dask_gpu_memory_used_bytes"]
    assert worker_metrics(columns) == ["dask_job_worker_memory_bytes", "dask_job_worker_cpu_ratio"]
    assert [c.unit for c in columns] == ["bytes used", "bytes", "% of one core"]
    used = [_s({"gpu": "0", "uuid": "U0"}, {1 * S: 5.0, 2 * S: 6.0, 300 * S: 7.0}),
            _s({"gpu": "1", "uuid": "U1"}, {1 * S: 8.0})]
    resources = joined_by_metric({
        "dask_job_worker_memory_bytes": [_s({"worker": "w"}, {500: 100.0, 1500: 200.0}),
                                         _s({"worker": "w", "instance": "b"}, {1800: 300.0})],
        "dask_job_worker_cpu_ratio": [_s({"worker": "w"}, {2 * S: 1.5})]})
    table = worker_table({"dask_gpu_memory_used_bytes": used}, columns,
                         cluster_timeline([], []), worker_timeline([], []), 120 * S, resources)
    assert list(tidy_lines("w", table, 0)) == [
        "1.000,1970-01-01T00:00:01.000Z,w,0,U0,,,,,5,100,",
        "1.000,1970-01-01T00:00:01.000Z,w,1,U1,,,,,8,100,",
        "2.000,1970-01-01T00:00:02.000Z,w,0,U0,,,,,6,300,150",
        "300.000,1970-01-01T00:05:00.000Z,w,0,U0,,,,,7,,"]  # older than max_age: empty
    assert next(iter(seed_lines(table, 0))) == ',,1.000,"5, 8","100, 100","NaN, NaN"'


def test_only_worker_columns_still_give_a_row_per_gpu_sample() -> None:
    columns = select(["worker-tasks"])
    assert source_metrics(columns) == ["dask_gpu_memory_used_bytes"]
    used = [_s({"gpu": "0", "uuid": "U0"}, {1 * S: 5.0})]
    table = worker_table({"dask_gpu_memory_used_bytes": used}, columns,
                         cluster_timeline([], []), worker_timeline([], []), 120 * S,
                         {"dask_job_worker_executing_tasks": ([0], [4.0])})
    assert list(tidy_lines("w", table, 0)) == ["1.000,1970-01-01T00:00:01.000Z,w,0,U0,,,,,4"]


@pytest.mark.parametrize(("t", "expected"), [(999, None), (1000, 1.0), (1100, 1.0),
                                              (1101, None), (2000, 2.0), (2101, None)])
def test_as_of(t: int, expected: float | None) -> None:
    assert as_of(([1000, 2000], [1.0, 2.0]), [t], 100) == [expected]


def test_counter_steps_fast_and_careful_paths_agree() -> None:
    rng = random.Random(5)
    for case in range(200):
        n = rng.randrange(0, 30)
        times = sorted(rng.sample(range(0, 400 * S, S), n))
        values = [float(rng.randrange(0, 50)) if rng.random() > 0.03 else math.nan
                  for _ in range(n)]
        if case % 2:  # counters that only grow, the usual case
            values = list(itertools.accumulate(abs(v) if v == v else v for v in values))
        careful = [(i, (v1 - v0 if v1 >= v0 else v1))
                   for i, (t0, t1, v0, v1) in enumerate(zip(times, times[1:], values, values[1:],
                                                            strict=False), 1)
                   if t1 - t0 <= 120 * S and v0 == v0 and v1 == v1]
        got = steps((times, values), 120 * S)
        assert got == ([i for i, _ in careful], [d for _, d in careful]), (times, values)


def test_scaled_columns_round_each_value_as_alone() -> None:
    compute = next(c for c in select(["compute-util"]))
    shared = [0.29, -0.0, 0.0, math.nan, 1.0]
    raw = [shared[i % 5] for i in range(50)] + [None]  # one object per distinct value
    expected = [None if r is None else round(r * 100, 6) for r in raw]
    got = compute.values(raw, [None] * len(raw))
    assert [repr(v) for v in got] == [repr(v) for v in expected]  # -0.0 stays -0.0, NaN NaN


def test_at_each_is_not_fooled_by_a_list_changed_in_place() -> None:
    timeline = cluster_timeline([_s({}, {0: 1.0, 10 * S: 2.0})], [_s({}, {0: 0.0, 10 * S: 0.0})])
    times = [5 * S, 11 * S]
    first = timeline.at_each(times, 120 * S)
    times[1] = 1 * S
    assert timeline.at_each(times, 120 * S) == [first[0], first[0]] != first


# ---- gpu_by_prefix by the DAGs' own times ---------------------------------------------------


def _prefix(job: str, dag: str, prefix: str, points: dict[int, float]) -> Series:
    return _s({"__name__": "dask_job_worker_prefix_tasks", "job_id": job, "dag_id": dag,
               "prefix": prefix, "worker": "w"}, points)


def _gpu(metric: str, points: dict[int, float]) -> Series:
    return _s({"__name__": metric, "gpu": "0", "uuid": "GPU-a", "worker": "w"}, points)


def _exact_uses(spans, prefixes, busy: dict[int, float], window=None, used=None):
    uses = PrefixUses(120 * S, window=window)
    series = {"dask_gpu_busy_seconds_total": [_gpu("dask_gpu_busy_seconds_total", busy)]}
    if used:
        series["dask_gpu_memory_used_bytes"] = [_gpu("dask_gpu_memory_used_bytes", used)]
    uses.add_worker([], prefixes, series, span_timeline(spans, 120 * S))
    return uses.result()


def test_each_dag_gets_its_own_time_of_a_scrape_interval_whatever_the_scrapes_saw() -> None:
    # busy 1 s per s; GPU samples every 15 s; DAG 1 from 2 s to 9 s, DAG 2 from 9 s to 40 s;
    # the scheduler's scrapes (every 15 s) never saw DAG 1 executing
    busy = {t * S: float(t) for t in (0, 15, 30, 45)}
    spans = [(2 * S, 9 * S, ("0", "1")), (9 * S, 40 * S, ("0", "2"))]
    prefixes = [_prefix("0", "2", "train", {15 * S: 2.0, 30 * S: 2.0}),
                _prefix("0", "2", "score", {30 * S: 1.0})]
    got = {k: round(u.gpu_seconds, 9) for k, u in _exact_uses(spans, prefixes, busy).items()}
    # DAG 1: its 7 s under an empty prefix (no scrape saw which function ran); DAG 2: each
    # piece under the mix of the last scrape at or before the piece's end: 9..15 s train
    # alone, 15..30 s and 30..40 s two train tasks and one score task
    assert got == {("0", "1", ""): 7.0, ("0", "2", "train"): round(6 + 25 * 2 / 3, 9),
                   ("0", "2", "score"): round(25 / 3, 9)}


def test_the_range_edges_cut_the_intervals_that_straddle_them() -> None:
    busy = {t * S: float(t) for t in (0, 15, 30, 45)}
    spans = [(0, 45 * S, ("0", "1"))]
    prefixes = [_prefix("0", "1", "f", {15 * S: 1.0})]
    got = _exact_uses(spans, prefixes, busy, window=(10 * S, 32 * S))
    assert {k: round(u.gpu_seconds, 9) for k, u in got.items()} == {("0", "1", "f"): 22.0}


def test_a_peak_belongs_to_the_dag_that_ran_at_its_sample() -> None:
    spans = [(0, 10 * S, ("0", "1")), (10 * S, 20 * S, ("0", "2"))]
    prefixes = [_prefix("0", "1", "a", {5 * S: 1.0}), _prefix("0", "2", "b", {15 * S: 1.0})]
    used = {9 * S: 7.0, 10 * S: 3.0, 19 * S: 5.0, 21 * S: 100.0}  # 21 s: nothing ran
    got = _exact_uses(spans, prefixes, {0: 0.0, 20 * S: 20.0}, used=used)
    assert {k: u.peak_mem for k, u in got.items()} == {("0", "1", "a"): 7.0,
                                                       ("0", "2", "b"): 5.0}


def test_dag_totals_are_conserved_against_a_brute_force_integral() -> None:
    rng = random.Random(7)
    for _ in range(200):
        samples = sorted(rng.sample(range(0, 200), 12))
        rates = [rng.uniform(0, 1) for _ in samples]  # busy rate over the interval ending there
        busy, total = {}, 0.0
        for i, t in enumerate(samples):
            total += rates[i] * (t - samples[i - 1]) if i else 0.0
            busy[t * S] = total
        edges = sorted(rng.sample(range(1, 199), 6))
        spans = [(a * S, b * S, ("0", str(k))) for k, (a, b) in
                 enumerate(zip(edges[::2], edges[1::2], strict=True))]
        lo, hi = sorted(rng.sample(range(0, 200), 2))
        got = _exact_uses(spans, [], busy, window=(lo * S, hi * S))

        for a, b, (job, dag) in spans:  # the integral of the rate over the DAG's time
            x, y = max(a // S, lo), min(b // S, hi)
            want = sum(rates[i] * max(0, min(y, t1) - max(x, t0))
                       for i, (t0, t1) in enumerate(itertools.pairwise(samples), start=1)
                       if t1 - t0 <= 120)
            have = got.get((job, dag, ""))
            assert (have.gpu_seconds if have else 0.0) == pytest.approx(want, abs=1e-9)


def _mix_at(scrapes: dict[int, dict[str, float]], t: int) -> dict[str, float]:
    """A DAG's prefixes executing at its last scrape at or before ``t`` that showed any,
    else at its first one (the rule of gpu_by_prefix by the DAGs' own times)."""
    seen = sorted(s for s, mix in scrapes.items() if mix)
    if not seen:
        return {"": 1.0}
    before = [s for s in seen if s <= t]
    return scrapes[before[-1] if before else seen[0]]


def test_runs_of_intervals_give_what_each_interval_alone_gives() -> None:
    # a DAG's mix repeats over many scrapes and changes now and then; the sum and the peak per
    # prefix are those of taking every interval on its own, cut where the DAG changed
    rng = random.Random(11)
    for _ in range(60):
        gpu_times = sorted(rng.sample(range(0, 600), 40))
        busy, used, total = {}, {}, 0.0
        for t in gpu_times:
            total += rng.uniform(0, 15)
            busy[t * S], used[t * S] = total, float(rng.randrange(100))
        edges = sorted(rng.sample(range(1, 599), 6))
        spans = [(a * S, b * S, ("0", str(k))) for k, (a, b) in
                 enumerate(zip(edges[::2], edges[1::2], strict=True))]
        scrapes: dict[str, dict[int, dict[str, float]]] = {}
        for _, _, (_, dag) in spans:
            mix: dict[str, float] = {}
            for t in range(0, 600, 15):
                if rng.random() < 0.3:  # the mix changes at a third of the scrapes
                    mix = {p: float(rng.randint(1, 3)) for p in rng.sample("abc", 2)}
                scrapes.setdefault(dag, {})[t * S] = mix
        prefixes = [_prefix("0", dag, p, {t: by[p] for t, by in mixes.items() if p in by})
                    for dag, mixes in scrapes.items() for p in "abc"]
        got = _exact_uses(spans, prefixes, busy, used=used)

        def dag_at(t: int, spans: list = spans) -> str | None:
            return next((dag for a, b, (_, dag) in spans if a <= t < b), None)

        want: dict[tuple[str, str, str], list[float]] = {}
        times = sorted(busy)
        for t0, t1 in itertools.pairwise(times):
            if t1 - t0 > 120 * S:
                continue
            rise = busy[t1] - busy[t0]
            cuts = sorted({t0, t1, *(x for a, b, _ in spans for x in (a, b) if t0 < x < t1)})
            for x, y in itertools.pairwise(cuts):
                dag = dag_at(x)
                if dag is None:
                    continue
                mix = _mix_at(scrapes.get(dag, {}), y)
                for p, n in mix.items():
                    cell = want.setdefault(("0", dag, p), [0.0, -math.inf])
                    cell[0] += rise * (y - x) / (t1 - t0) * n / sum(mix.values())
        for t, v in used.items():
            dag = dag_at(t)
            if dag is not None:
                for p in _mix_at(scrapes.get(dag, {}), t):
                    cell = want.setdefault(("0", dag, p), [0.0, -math.inf])
                    cell[1] = max(cell[1], v)
        assert set(got) == set(want)
        for key, (seconds, peak) in want.items():
            assert got[key].gpu_seconds == pytest.approx(seconds, rel=1e-12, abs=1e-9), key
            assert got[key].peak_mem == (None if peak == -math.inf else peak), key


def _shared_uses(views, busy: dict[int, float], used=None, window=None):
    """One GPU (GPU-a) seen by every worker of ``views`` ((name, spans, prefixes) each)."""
    workers = [WorkerInfo(name, gpus=[("0", "GPU-a")]) for name, _, _ in views]
    uses = PrefixUses(120 * S, seen_by(workers), window=window)
    for _, spans, prefixes in views:
        series = {"dask_gpu_busy_seconds_total": [_gpu("dask_gpu_busy_seconds_total", busy)]}
        if used:
            series["dask_gpu_memory_used_bytes"] = [_gpu("dask_gpu_memory_used_bytes", used)]
        ran = span_timeline(spans, 120 * S) if spans else worker_timeline([], [])
        uses.add_worker([], prefixes, series, ran)
    return uses.result()


def test_a_gpu_two_workers_see_is_split_by_their_dags_own_times() -> None:
    # busy 1 s per s, sampled every 15 s; worker a runs DAG 1 (its scrapes saw 'train') from
    # 0 to 30 s, worker b DAG 2 from 10 to 20 s, which no scheduler scrape saw executing
    busy = {t * S: float(t) for t in (0, 15, 30, 45)}
    used = {15 * S: 4.0, 30 * S: 9.0, 45 * S: 50.0}
    a = ("a", [(0, 30 * S, ("0", "1"))], [_prefix("0", "1", "train", {15 * S: 1.0})])
    b = ("b", [(10 * S, 20 * S, ("0", "2"))], [])
    got = _shared_uses([a, b], busy, used)
    # 0..10 s a's alone, 10..20 s half each, 20..30 s a's: each second of the device once
    assert {k: round(u.gpu_seconds, 9) for k, u in got.items()} == {
        ("0", "1", "train"): 25.0, ("0", "2", ""): 5.0}
    assert {k: u.peak_mem for k, u in got.items()} == {("0", "1", "train"): 4.0,
                                                       ("0", "2", ""): 4.0}
    idle = ("c", [], [])  # a third worker that ran nothing changes nobody's share
    again = _shared_uses([a, b, idle], busy, used)
    assert {k: round(u.gpu_seconds, 9) for k, u in again.items()} == {
        ("0", "1", "train"): 25.0, ("0", "2", ""): 5.0}


def test_a_shared_gpu_s_time_is_counted_once_whoever_held_it() -> None:
    """Against a brute-force integral: the rows of all DAGs on a GPU that three workers see
    add up to its busy time while any of them held a DAG, each DAG getting an equal share of
    the seconds it held a worker beside the others."""
    rng = random.Random(5)
    for _ in range(100):
        samples = sorted(rng.sample(range(0, 300), 15))
        rates = [rng.uniform(0, 1) for _ in samples]
        busy, total = {}, 0.0
        for i, t in enumerate(samples):
            total += rates[i] * (t - samples[i - 1]) if i else 0.0
            busy[t * S] = total
        views = []
        for w in "abc":
            edges = sorted(rng.sample(range(1, 299), 4))
            spans = [(x * S, y * S, ("0", f"{w}{k}")) for k, (x, y) in
                     enumerate(zip(edges[::2], edges[1::2], strict=True))]
            views.append((w, spans, []))
        got = _shared_uses(views, busy)

        def holders(t: float, views: list = views) -> list[str]:
            return [dag for _, spans, _ in views for x, y, (_, dag) in spans
                    if x <= t * S < y]

        want: dict[str, float] = {}
        for i, (t0, t1) in enumerate(itertools.pairwise(samples), start=1):
            if t1 - t0 > 120:
                continue
            cuts = sorted({t0, t1, *(v // S for _, spans, _ in views for x, y, _ in spans
                                     for v in (x, y) if t0 < v // S < t1)})
            for x, y in itertools.pairwise(cuts):
                held = holders(x)
                for dag in held:
                    want[dag] = want.get(dag, 0.0) + rates[i] * (y - x) / len(held)
        have = {dag: u.gpu_seconds for (_, dag, _), u in got.items()}
        assert set(have) == {d for d, v in want.items() if v} | {
            d for d in have if not want.get(d)}
        for dag, seconds in want.items():
            assert have.get(dag, 0.0) == pytest.approx(seconds, abs=1e-9), dag
        union = sum(rates[i] * sum(1 for s in range(t0, t1) if holders(s + 0.5))
                    for i, (t0, t1) in enumerate(itertools.pairwise(samples), start=1)
                    if t1 - t0 <= 120)
        assert sum(have.values()) == pytest.approx(union, abs=1e-9)
