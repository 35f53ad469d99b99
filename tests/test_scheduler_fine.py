"""Where the time went, in real in-process clusters: Dask's fine performance metrics per
job, DAG and prefix, each worker's resources and the prefixes executing on it, as a scrape of the
scheduler's /metrics shows them.

Tolerance: the exported numbers are Dask's own, to the last bit of float addition: per
(prefix, activity, unit) their sum over jobs equals the scheduler's
``cumulative_worker_metrics`` (relative 1e-9). Against the known durations the tolerance is
Dask's accounting: ``context_meter.meter`` times its block with ``perf_counter`` (never less
than the sleep inside, a little more for the context switch), ``thread-cpu`` is the
``thread_time`` of the whole task (at least the CPU time the task spins); both may exceed
the work by the task's own overhead, bounded here by 25% + 50 ms per task."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

import pytest
from distributed import Client, Event, get_worker, span
from distributed.metrics import context_meter

from dask_metrics.contract import OTHER_PREFIX
from dask_metrics.demo import workload
from tests.helpers import Scrape, promtool_lint, wait_for
from tests.test_scheduler_plugin import cluster, metrics, plugin_of

SLEEP, SPIN, TASKS = 0.2, 0.2, 4
SECONDS = "dask_job_activity_seconds_total"
BYTES = "dask_job_activity_bytes_total"


def read_files(i: int) -> int:
    with context_meter.meter("I/O"):
        time.sleep(SLEEP)
    context_meter.digest_metric("S3 Infrequent Access", 1000 * (i + 1), "bytes")
    context_meter.digest_metric(("files", "parquet"), 2, "Widget Count")  # a custom unit
    return i


def crunch(i: int) -> int:
    start = time.thread_time()
    while time.thread_time() - start < SPIN:
        pass
    return i


def blocked(name: str, i: int) -> int:
    Event(name).wait()
    return i


def activities(s: Scrape, name: str = SECONDS) -> dict[tuple[str, str, str, str], float]:
    """(job_id, dag_id, prefix, activity) -> value."""
    return s.rows(name, "job_id", "dag_id", "prefix", "activity")


def dask_execute_totals(client: Client) -> dict[tuple[str, str, str], float]:
    """Dask's own cumulative execute metrics: (prefix, activity, unit) -> value."""
    def read(dask_scheduler: Any) -> dict[tuple[str, str, str], float]:
        return {(str(k[1]), str(k[2]), str(k[3])): v
                for k, v in dask_scheduler.cumulative_worker_metrics.items()
                if isinstance(k, tuple) and k[0] == "execute"}
    return client.run_on_scheduler(read)


def exported_totals(s: Scrape) -> dict[tuple[str, str, str], float]:
    """Our series summed over jobs and DAGs: (prefix, activity, unit) -> value."""
    out: dict[tuple[str, str, str], float] = defaultdict(float)
    for unit, name in (("seconds", SECONDS), ("bytes", BYTES)):
        for (_, _, prefix, activity), v in activities(s, name).items():
            out[prefix, activity, unit] += v
    return dict(out)


def matches_dask(client: Client, lc: Any,
                 complete: dict[tuple[str, str, str], float] | None = None) -> Scrape | None:
    """A scrape whose totals equal Dask's own accounting, once Dask's own totals reach
    ``complete`` (every heartbeat of the work in); else None."""
    theirs = {k: v for k, v in dask_execute_totals(client).items() if k[2] in ("seconds", "bytes")}
    if any(theirs.get(k, 0.0) < v for k, v in (complete or {}).items()):
        return None
    s = metrics(lc)
    ours = exported_totals(s)
    if set(ours) != set(theirs):
        return None
    ok = all(ours[k] == pytest.approx(v, rel=1e-9, abs=1e-12) for k, v in theirs.items())
    return s if ok else None


def within(value: float, work: float) -> bool:
    return work - 1e-3 <= value <= work * 1.25 + 0.05 * TASKS


@pytest.mark.integration
def test_io_cpu_and_custom_bytes_of_two_jobs_match_the_work_and_dasks_accounting():
    with cluster() as lc, Client(lc, name="reader") as reader, \
            Client(lc, name="cruncher") as cruncher:
        assert reader.gather(reader.map(read_files, range(TASKS))) == list(range(TASKS))
        assert cruncher.gather(cruncher.map(crunch, range(TASKS))) == list(range(TASKS))

        complete = {("read_files", "I/O", "seconds"): SLEEP * TASKS,
                    ("read_files", "S3 Infrequent Access", "bytes"): 10_000,
                    ("crunch", "thread-cpu", "seconds"): SPIN * TASKS - 1e-3}
        s = wait_for(lambda: matches_dask(reader, lc, complete), what="Dask's totals exported")
        seconds = activities(s)
        assert within(seconds["0", "0", "read_files", "I/O"], SLEEP * TASKS)
        assert within(seconds["1", "0", "crunch", "thread-cpu"], SPIN * TASKS)
        assert ("1", "0", "crunch", "I/O") not in seconds
        assert seconds.get(("0", "0", "read_files", "thread-cpu"), 0.0) < SPIN * TASKS / 2
        assert activities(s, BYTES) == {("0", "0", "read_files", "S3 Infrequent Access"): 10_000}
        assert activities(s, "dask_job_activity_widget_count_total") == {
            ("0", "0", "read_files", "files:parquet"): 2 * TASKS}
        assert {j for j, *_ in seconds} == {"0", "1"}  # every second is attributed
        # the cluster-wide contexts: gathering the results read them from the workers
        cluster_rows = s.rows("dask_job_cluster_activity_seconds_total", "context", "activity")
        assert {c for c, _ in cluster_rows} <= {"gather-dep", "get-data", "memory-monitor"}
        assert all(v >= 0 for v in cluster_rows.values())


@pytest.mark.integration
def test_two_jobs_sharing_a_prefix_in_the_default_span_are_apportioned_by_tasks():
    with cluster() as lc, Client(lc, name="a") as a, Client(lc, name="b") as b:
        first = a.submit(blocked, "go", 0)  # job 0: 1 task in Dask's default span
        wait_for(lambda: metrics(lc), lambda s: s["dask_job_worker_tasks"], what="job 0 runs")
        rest = b.map(blocked, ["go"] * 3, range(1, 4))  # job 1: 3 tasks, the same span
        Event("go", client=a).set()
        assert [first.result(), *b.gather(rest)] == [0, 1, 2, 3]
        s = wait_for(lambda: matches_dask(a, lc, {("blocked", "executor", "seconds"): 0.0}),
                     lambda s: s is not None and {j for j, *_ in activities(s)} == {"0", "1"},
                     what="Dask's totals exported")
        per_job: dict[str, float] = defaultdict(float)
        for (job, dag, prefix, _), v in activities(s).items():
            assert prefix == "blocked" and dag == "0"
            per_job[job] += v
        assert per_job["0"] / (per_job["0"] + per_job["1"]) == pytest.approx(0.25)


@pytest.mark.integration
def test_span_mode_keeps_two_jobs_of_one_prefix_apart_exactly():
    with cluster(argv=("--job-mode", "span")) as lc, Client(lc) as client:
        with span("slow"):
            slow = client.map(crunch, range(TASKS))
        with span("quick"):
            quick = client.map(crunch, range(TASKS, TASKS + 1))
        client.gather([*slow, *quick])
        complete = {("crunch", "thread-cpu", "seconds"): SPIN * (TASKS + 1) - 1e-3}
        s = wait_for(lambda: matches_dask(client, lc, complete), what="both spans' metrics")
        cpu = {job: v for (job, dag, prefix, act), v in activities(s).items()
               if act == "thread-cpu"}
        assert within(cpu["0"], SPIN * TASKS) and within(cpu["1"], SPIN)


def hold(size: int) -> bytearray:
    return bytearray(b"\x01") * size  # written, so resident


@pytest.mark.integration
def test_worker_memory_follows_a_held_allocation_and_executing_tasks_show_their_prefix():
    size = 300 * 2**20
    with cluster() as lc, Client(lc, name="mem") as client:
        base = wait_for(lambda: metrics(lc), lambda s: len(s["dask_job_worker_memory_bytes"]) == 2)
        before = max(base["dask_job_worker_memory_bytes"].values())
        limits = base.rows("dask_job_worker_memory_limit_bytes", "worker")
        assert set(limits) == {("0",), ("1",)} and all(v > 0 for v in limits.values())
        assert set(base.rows("dask_job_worker_threads", "worker").values()) == {1.0}

        held = client.submit(hold, size, workers=[lc.workers[0].address])

        def holding(s: Scrape) -> bool:
            return s.value("dask_job_worker_managed_memory_bytes", worker="0") >= size \
                and max(s["dask_job_worker_memory_bytes"].values()) >= before + size * 0.9
        s = wait_for(lambda: metrics(lc), holding, what="the allocation in the gauges")
        assert s.value("dask_job_worker_stored_bytes", worker="0") >= size
        assert s.value("dask_job_worker_managed_memory_bytes", worker="1") < size / 10
        del held
        wait_for(lambda: metrics(lc),
                 lambda s: s.value("dask_job_worker_managed_memory_bytes", worker="0") < size / 10,
                 what="the allocation released")

        running = client.map(blocked, ["run"] * 2, range(2))
        s = wait_for(lambda: metrics(lc),
                     lambda s: sum(s["dask_job_worker_prefix_tasks"].values()) == 2,
                     what="two executing tasks")
        assert s.rows("dask_job_worker_prefix_tasks", "worker", "job_id", "dag_id", "prefix") \
            == {("0", "0", "1", "blocked"): 1, ("1", "0", "1", "blocked"): 1}
        assert s.rows("dask_job_worker_executing_tasks", "worker") == {("0",): 1, ("1",): 1}
        assert s.rows("dask_job_worker_processing_tasks", "worker") == {("0",): 1, ("1",): 1}
        Event("run", client=client).set()
        client.gather(running)
        wait_for(lambda: metrics(lc), lambda s: not s["dask_job_worker_prefix_tasks"],
                 what="the prefix series gone")


def tiny(x: int) -> int:
    return x


def odd_digests(cluster_value: float) -> float:
    """Units ending in "total", a non-finite value, and a cluster-wide (non-execute)
    metric of the given value, as user code can digest them."""
    context_meter.digest_metric("tally", 12.0, "seconds_total")
    context_meter.digest_metric("count", 11.0, "total")
    context_meter.digest_metric("forever", math.inf, "seconds")
    get_worker().digest_metric(("custom-context", "work", "seconds"), cluster_value)
    return cluster_value


def dask_cluster_sum(client: Client) -> float:
    return client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.cumulative_worker_metrics
                                   .get(("custom-context", "work", "seconds"), 0.0))


@pytest.mark.integration
def test_odd_units_and_values_keep_the_page_valid_and_the_counters_monotonic():
    custom = "dask_job_cluster_activity_seconds_total"
    with cluster() as lc, Client(lc) as client:
        assert client.submit(odd_digests, 5.0, pure=False).result() == 5.0
        s = wait_for(lambda: metrics(lc), lambda s: s.value(
            custom, context="custom-context", activity="work") == 5.0, what="+5 exported")
        # Dask's own sum goes down, then is NaN for good: the counter stays where it was
        client.submit(odd_digests, -100.0, pure=False).result()
        wait_for(lambda: dask_cluster_sum(client), lambda v: v == -95.0, what="Dask's -95")
        client.submit(odd_digests, math.nan, pure=False).result()
        wait_for(lambda: dask_cluster_sum(client), math.isnan, what="Dask's sum NaN")
        s = metrics(lc)
        assert s.value(custom, context="custom-context", activity="work") == 5.0
        promtool_lint(s.text)  # no family declared twice, no NaN or negative counter
        # three DAGs of one job, each its own series
        tally = activities(s, "dask_job_activity_seconds_total_unit_total")
        assert tally == {("0", dag, "odd_digests", "tally"): 12.0 for dag in "012"}
        count = activities(s, "dask_job_activity_total_unit_total")
        assert count == {("0", dag, "odd_digests", "count"): 11.0 for dag in "012"}
        assert not {a for *_, a in activities(s)} & {"forever", "tally", "count"}  # inf; units


@pytest.mark.integration
def test_ten_thousand_prefixes_keep_the_series_of_a_job_within_the_cap():
    cap = 20
    config = {"dask-metrics.scheduler.max-prefixes-per-job": cap}
    with cluster(config=config) as lc, Client(lc, name="many") as client:
        # Dask itself slows down quadratically with the prefixes in flight (10,000 at once:
        # minutes, with or without the preload): 500 at a time
        for start in range(0, 10_000, 500):
            numbers = range(start, start + 500)
            futures = client.map(tiny, numbers, key=[f"prefix{i}-0" for i in numbers])
            assert client.gather(futures) == list(numbers)
            del futures

        def all_counted(s: Scrape) -> bool:
            ours = sum(v for (j, _, p, a), v in activities(s).items() if a == "executor")
            theirs = sum(v for (p, a, u), v in dask_execute_totals(client).items()
                         if a == "executor" and u == "seconds")
            return ours == pytest.approx(theirs, rel=1e-9)
        s = wait_for(lambda: metrics(lc), all_counted, what="every prefix counted")
        prefixes = {p for (j, _, p, _) in activities(s) if j == "0"}
        assert len(prefixes) == cap + 1 and OTHER_PREFIX in prefixes
        per_dag: dict[tuple[str, str], int] = defaultdict(int)  # (DAG, activity) -> series
        for (_, dag, _, act) in activities(s):
            per_dag[dag, act] += 1
        assert {dag for dag, _ in per_dag} == {str(i) for i in range(20)}  # one per batch
        assert per_dag["0", "executor"] == cap + 1  # the first batch had 500 prefixes
        assert {n for (dag, _), n in per_dag.items() if dag != "0"} == {1}  # only "other"
        assert plugin_of(lc).ledger.stats()["jobs"] == 1


@pytest.mark.integration
def test_the_demos_three_steps_come_apart_by_activity():
    with cluster() as lc, Client(lc, name="demo") as client:
        for step in (workload.read_input, workload.transform, workload.gpu_kernel):
            client.gather(client.map(step, [0.3] * 2, range(2), pure=False))
        complete = {("read_input", "I/O", "seconds"): 0.6, ("gpu_kernel", "gpu", "seconds"): 0.6,
                    ("transform", "thread-cpu", "seconds"): 0.6 - 1e-3}
        s = wait_for(lambda: matches_dask(client, lc, complete), what="the three steps")
        per_prefix: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for (_, _, prefix, activity), v in activities(s).items():
            per_prefix[prefix][activity] = v
        assert {p for p, acts in per_prefix.items() if acts["I/O"]} == {"read_input"}
        assert {p for p, acts in per_prefix.items() if acts["gpu"]} == {"gpu_kernel"}
        cpu = {p: acts["thread-cpu"] for p, acts in per_prefix.items()}
        assert within(cpu["transform"], 0.6) and cpu["read_input"] < 0.3
