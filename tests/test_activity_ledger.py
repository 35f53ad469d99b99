"""Where the time went: the attribution of Dask's fine performance metrics to jobs, DAGs and
task prefixes, their bounds, and the scrape-time counts, fed by hand (no Dask)."""

from __future__ import annotations

import math

import dask
import pytest

from dask_metrics.contract import OTHER_PREFIX
from dask_metrics.exporter.activity_ledger import ActivityLedger, activity_label
from dask_metrics.exporter.job_model import Dag
from dask_metrics.exporter.job_tracker import JobTracker
from dask_metrics.exporter.scheduler.fine import ClusterTotals, count_prefix_tasks
from dask_metrics.exporter.scheduler.settings import Settings

SPAN = "span-1"


def submit(tracker: JobTracker, client: str, keys: list[str]) -> Dag:
    return tracker.submit(client=client, tasks=keys, wanted=keys, state_of=lambda k: None)


def execute(prefix: str, activity: str, value: float, unit: str = "seconds",
            span: str = SPAN) -> dict[tuple[str, str, str, str, str], float]:
    return {("execute", span, prefix, activity, unit): value}


def table(ledger: ActivityLedger) -> dict[tuple[str, str, str, str, str], float]:
    """(unit, job_id, dag_id, prefix, activity) -> value."""
    return {tuple(a[:5]): a.value for a in ledger.series()}  # type: ignore[misc]


def test_a_prefix_one_dag_put_in_a_span_is_that_dags_exactly():
    tracker, ledger = JobTracker(), ActivityLedger()
    dag = submit(tracker, "alice", ["load-1", "load-2"])
    ledger.observe(dag, {(SPAN, "load"): 2})
    ledger.add(execute("load", "I/O", 1.5))
    ledger.add(execute("load", "I/O", 0.5))
    ledger.add(execute("load", "thread-cpu", 0.25))
    assert table(ledger) == {("seconds", "0", "0", "load", "I/O"): 2.0,
                             ("seconds", "0", "0", "load", "thread-cpu"): 0.25}


def test_the_tracker_is_told_of_each_counter_a_dag_gains_once():
    """What keeps the series budget of finished DAGs exact: one call per new counter of a
    DAG, none for a counter that grows, none for the job's own (no DAG)."""
    tracker, told = JobTracker(), []
    ledger = ActivityLedger(on_new_series=told.append)
    dag = submit(tracker, "alice", ["load-1"])
    ledger.observe(dag, {(SPAN, "load"): 1})
    ledger.add(execute("load", "I/O", 1.5))
    ledger.add(execute("load", "I/O", 0.5))
    ledger.add(execute("load", "thread-cpu", 0.25, unit="bytes"))
    ledger.add(execute("other", "I/O", 1.0))  # no DAG owns it: nobody's series
    assert told == [dag, dag] and ledger.counters_of(dag) == 2


def test_several_dags_of_one_job_share_the_job_with_no_dag():
    tracker, ledger = JobTracker(), ActivityLedger()
    first, second = submit(tracker, "alice", ["inc-1"]), submit(tracker, "alice", ["inc-2"])
    other_prefix = submit(tracker, "alice", ["dec-1"])
    ledger.observe(first, {(SPAN, "inc"): 1})
    ledger.observe(second, {(SPAN, "inc"): 1})
    ledger.observe(other_prefix, {(SPAN, "dec"): 1})
    ledger.add({**execute("inc", "thread-cpu", 3.0), **execute("dec", "thread-cpu", 1.0)})
    assert table(ledger) == {("seconds", "0", "", "inc", "thread-cpu"): 3.0,
                             ("seconds", "0", "2", "dec", "thread-cpu"): 1.0}


def test_several_jobs_in_one_span_and_prefix_are_apportioned_by_their_tasks():
    tracker, ledger = JobTracker(), ActivityLedger()
    alice = submit(tracker, "alice", ["inc-1"])
    bob = submit(tracker, "bob", ["inc-2", "inc-3", "inc-4"])
    ledger.observe(alice, {(SPAN, "inc"): 1})
    ledger.observe(bob, {(SPAN, "inc"): 3})
    ledger.add(execute("inc", "thread-cpu", 8.0))
    got = table(ledger)
    assert got == {("seconds", "0", "0", "inc", "thread-cpu"): 2.0,
                   ("seconds", "1", "0", "inc", "thread-cpu"): 6.0}
    # a different span of the same prefix stays exact
    late = submit(tracker, "alice", ["inc-5"])
    ledger.observe(late, {("span-2", "inc"): 1})
    ledger.add(execute("inc", "thread-cpu", 1.0, span="span-2"))
    assert table(ledger)["seconds", "0", "1", "inc", "thread-cpu"] == 1.0


def test_time_of_tasks_no_dag_owns_is_kept_unattributed():
    ledger = ActivityLedger()
    ledger.add(execute("before-preload", "thread-cpu", 1.0))
    assert table(ledger) == {("seconds", "", "", "before-preload", "thread-cpu"): 1.0}


def test_only_positive_execute_values_count_so_counters_never_go_down():
    tracker, ledger = JobTracker(), ActivityLedger()
    dag = submit(tracker, "a", ["f-1"])
    ledger.observe(dag, {(SPAN, "f"): 1})
    ledger.add(execute("f", "custom", 5.0))
    ledger.add({**execute("f", "custom", -2.0), **execute("f", "x", math.nan)})
    ledger.add({("p2p", SPAN, "shuffle", "disk-write", "seconds"): 9.0,  # repeats execute
                ("gather-dep", "network", "seconds"): 9.0, "latency": 1.0})
    assert table(ledger) == {("seconds", "0", "0", "f", "custom"): 5.0}


def test_ten_thousand_prefixes_stay_within_the_cap_and_no_counter_moves():
    tracker, ledger = JobTracker(), ActivityLedger(max_prefixes=50)
    dag = submit(tracker, "a", ["p0-1"])
    ledger.observe(dag, {(SPAN, f"p{i}"): 1 for i in range(10_000)})
    before = None
    for round_ in range(2):
        ledger.add({("execute", SPAN, f"p{i}", "thread-cpu", "seconds"): 1.0
                    for i in range(10_000)})
        got = table(ledger)
        assert len(got) == 51
        assert got["seconds", "0", "0", OTHER_PREFIX, "thread-cpu"] == 9_950.0 * (round_ + 1)
        assert {k[3] for k in got} == {f"p{i}" for i in range(50)} | {OTHER_PREFIX}
        if before is not None:
            assert all(got[k] >= v for k, v in before.items())  # monotonic
        before = got
    assert ledger.prefix_label(dag.job, "p3") == "p3"
    assert ledger.prefix_label(dag.job, "p9999") == OTHER_PREFIX
    assert ledger.prefix_label(None, "fresh") == "fresh"  # the unattributed bucket: own slots


def test_forgotten_dags_and_jobs_take_their_counters_and_tables_with_them():
    ledger = ActivityLedger()
    tracker = JobTracker(max_finished_dags=1, max_unscraped_dags=1, max_jobs=1,
                         on_forget=ledger.forget)
    first = tracker.submit(client="a", tasks=["inc-1"], wanted=["inc-1"],
                           state_of=lambda k: "waiting")
    second = tracker.submit(client="a", tasks=["inc-2"], wanted=["inc-2"],
                            state_of=lambda k: "waiting")
    ledger.observe(first, {(SPAN, "inc"): 1, (SPAN, "solo"): 1})
    ledger.observe(second, {(SPAN, "inc"): 1})
    ledger.add({**execute("inc", "thread-cpu", 1.0), **execute("solo", "thread-cpu", 1.0)})
    assert set(table(ledger)) == {("seconds", "0", "", "inc", "thread-cpu"),
                                  ("seconds", "0", "0", "solo", "thread-cpu")}
    tracker.transition("inc-1", "waiting", "memory")  # first finishes: kept (max 1)
    tracker.transition("inc-2", "waiting", "memory")  # second finishes: first is forgotten
    assert [d.id for d in tracker.dags()] == [1]
    assert set(table(ledger)) == {("seconds", "0", "", "inc", "thread-cpu")}
    ledger.add(execute("inc", "thread-cpu", 1.0))  # now the second DAG's alone
    assert table(ledger)["seconds", "0", "1", "inc", "thread-cpu"] == 1.0
    tracker.client_left("a")
    submit(tracker, "b", ["x-1"])  # job 1
    tracker.transition("x-1", "waiting", "memory")  # its DAG is kept, job 0's DAG 1 goes
    assert [(d.job.id, d.id) for d in tracker.dags()] == [(1, 0)]
    assert table(ledger) == {}  # job 0 is idle and beyond max_jobs=1: forgotten
    assert ledger.stats() == {"owned_pairs": 0, "dags": 0, "counters": 0, "jobs": 0}


def test_a_dag_forgotten_at_submission_leaves_nothing_behind():
    ledger = ActivityLedger()
    tracker = JobTracker(max_finished_dags=0, max_unscraped_dags=0, on_forget=ledger.forget)
    dag = tracker.submit(client="a", tasks=["f-1"], wanted=["f-1"], state_of=lambda k: "memory")
    assert dag.forgotten and tracker.dags() == []  # its result was in memory already
    ledger.observe(dag, {(SPAN, "f"): 1})
    ledger.add(execute("f", "thread-cpu", 1.0))
    assert table(ledger) == {("seconds", "", "", "f", "thread-cpu"): 1.0}
    assert ledger.stats()["owned_pairs"] == ledger.stats()["dags"] == 0


def test_units_and_activities_become_safe_bounded_labels():
    tracker, ledger = JobTracker(), ActivityLedger(label_max_length=16)
    dag = submit(tracker, "a", ["f-1"])
    ledger.observe(dag, {(SPAN, "f"): 1})
    ledger.add({("execute", SPAN, "f", "S3 Infrequent Access, very long", "Widget Count"): 2,
                ("execute", SPAN, "f", ("gpu", "kernel"), "bytes"): 10})
    got = table(ledger)
    assert got == {("widget_count", "0", "0", "f", "S3 Infrequent A…"): 2,
                   ("bytes", "0", "0", "f", "gpu:kernel"): 10}
    assert activity_label(["tab\there"], 128) == "tab?here"


def test_prefix_tasks_are_counted_per_worker_job_dag_and_capped_prefix():
    tracker, ledger = JobTracker(), ActivityLedger(max_prefixes=1)
    dag = submit(tracker, "a", ["train-1", "train-2", "eval-1"])
    executing = [("w0", [("train-1", "train"), ("train-2", "train"), ("eval-1", "eval")]),
                 ("w1", [("old-1", "old")])]
    rows = count_prefix_tasks(executing, tracker.owner, ledger.prefix_label)
    assert sorted(rows) == [("w0", "0", "0", OTHER_PREFIX, 1), ("w0", "0", "0", "train", 2),
                            ("w1", "", "", "old", 1)]
    assert dag.job.id == 0


def test_cluster_rows_name_contexts_activities_and_units():
    rows = ClusterTotals().rows([("gather-dep", ("network",), "seconds", 1.0),
                                 ("memory-monitor", ("evict", "disk-write"), "bytes", 5),
                                 ("get-data", ("network",), "Seconds", 2.0)], 128)
    assert sorted(rows) == [("bytes", "memory-monitor", "evict:disk-write", 5),
                            ("seconds", "gather-dep", "network", 1.0),
                            ("seconds", "get-data", "network", 2.0)]


def test_cluster_counters_count_only_finite_increases_of_dasks_sums():
    """Dask's sums go down on a negative digest and stay NaN/inf after one: the counters
    take each finite increase between scrapes and never go down."""
    totals, key = ClusterTotals(), ("gather-dep", ("network",), "seconds")
    got = [totals.rows([(*key, raw)], 128)[0][3]
           for raw in (5.0, -95.0, -185.0, 10.0, math.inf, 12.0, math.nan, math.nan)]
    assert got == [5.0, 5.0, 5.0, 200.0, 200.0, 202.0, 202.0, 202.0]
    assert ClusterTotals().rows([(*key, -3.0)], 128) == [("seconds", "gather-dep", "network", 0)]


def test_non_finite_execute_values_are_not_counted():
    tracker, ledger = JobTracker(), ActivityLedger()
    dag = submit(tracker, "a", ["f-1"])
    ledger.observe(dag, {(SPAN, "f"): 1})
    ledger.add({**execute("f", "custom", math.inf), **execute("f", "x", -math.inf)})
    ledger.add(execute("f", "custom", 1.5))
    assert table(ledger) == {("seconds", "0", "0", "f", "custom"): 1.5}


@pytest.mark.parametrize("count", [1, 4])
def test_shares_follow_new_owners(count: int):
    tracker, ledger = JobTracker(), ActivityLedger()
    a = submit(tracker, "a", ["f-1"])
    ledger.observe(a, {(SPAN, "f"): 1})
    ledger.add(execute("f", "thread-cpu", 1.0))
    b = submit(tracker, "b", ["f-2"])
    ledger.observe(b, {(SPAN, "f"): count})
    ledger.add(execute("f", "thread-cpu", 1.0 + count))
    got = table(ledger)
    assert got["seconds", "0", "0", "f", "thread-cpu"] == pytest.approx(2.0)
    assert got["seconds", "1", "0", "f", "thread-cpu"] == pytest.approx(count)


@pytest.mark.parametrize(("value", "accepted"), [(7, 7), ("12", 12), (0, None), (2.5, None),
                                                 ("many", None)])
def test_max_prefixes_per_job_setting(value: object, accepted: int | None):
    with dask.config.set({"dask-metrics.scheduler.max-prefixes-per-job": value}):
        if accepted is None:
            with pytest.raises(ValueError, match=f"max-prefixes-per-job: {value!r} is not a "
                                                 "whole number, 1 or more"):
                Settings.from_config()
        else:
            assert Settings.from_config().max_prefixes_per_job == accepted
    assert Settings.from_config().max_prefixes_per_job == 50  # the default, scheduler.yaml
