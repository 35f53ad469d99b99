"""The job/DAG state machine, fed by hand with the transitions Dask's scheduler makes."""

from __future__ import annotations

import threading

import pytest

from dask_metrics.contract import IDLE, DagStatus
from dask_metrics.exporter.job_model import JobMode
from dask_metrics.exporter.job_tracker import JobTracker
from dask_metrics.exporter.label_values import clean_label
from dask_metrics.exporter.monitor_session import SessionError


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Sim:
    """Task states as the scheduler holds them, so every transition has its true start."""

    def __init__(self, mode: JobMode | str = JobMode.CLIENT, **kwargs: object) -> None:
        self.clock = Clock()
        self.tracker = JobTracker(mode, clock=self.clock, **kwargs)  # type: ignore[arg-type]
        self.state: dict[str, str] = {}

    def submit(self, client: str, tasks: list[str], wanted: list[str] | None = None, **kw):
        for key in tasks:
            self.state.setdefault(key, "released")
        return self.tracker.submit(
            client=client,
            tasks=tasks,
            wanted=tasks if wanted is None else wanted,
            state_of=self.state.get,
            **kw,
        )

    def go(self, key: str, finish: str, worker: str | None = None) -> None:
        start = self.state[key]
        self.state[key] = finish
        self.tracker.transition(key, start, finish, worker)
        if finish == "forgotten":
            del self.state[key]

    def start(self, key: str, worker: str) -> None:
        if self.state[key] == "released":
            self.go(key, "waiting")
        self.go(key, "processing", worker)

    def finish(self, *keys: str) -> None:
        for key in keys:
            self.go(key, "memory")

    def per_worker(self) -> dict[tuple[str, int, int], int]:
        return {(w, j, d): n for w, j, d, n in self.tracker.snapshot().worker_tasks}

    def statuses(self) -> dict[tuple[int, int], int]:
        return {(j, d): s for j, d, _, _, s in self.tracker.snapshot().dags}


def test_client_mode_numbers_jobs_by_first_submission_and_dags_within_a_job():
    sim = Sim()
    a0 = sim.submit("Client-a", ["a0"], name="alice")
    b0 = sim.submit("Client-b", ["b0"], name="bob")
    a1 = sim.submit("Client-a", ["a1"], name="alice")
    b1 = sim.submit("Client-b", ["b1"])
    assert [(d.job.id, d.id) for d in (a0, b0, a1, b1)] == [(0, 0), (1, 0), (0, 1), (1, 1)]
    assert a0.job.name == "alice" and b0.job.name == "bob"
    assert sim.tracker.current() == (0, 0)

    sim.start("a0", "w1")
    sim.finish("a0")
    assert sim.tracker.current() == (1, 0)  # the oldest unfinished DAG
    for key in ("b0", "a1", "b1"):
        sim.start(key, "w1")
        sim.finish(key)
    assert sim.tracker.current() == (IDLE, IDLE)
    assert set(sim.statuses().values()) == {DagStatus.FINISHED}


def test_dag_status_goes_waiting_running_finished():
    sim = Sim()
    dag = sim.submit("c", ["x", "y"], wanted=["y"])
    assert sim.statuses() == {(0, 0): DagStatus.WAITING}
    sim.start("x", "w1")
    assert sim.statuses() == {(0, 0): DagStatus.RUNNING}
    assert dag.started == sim.clock.now
    sim.finish("x")
    sim.go("y", "waiting")
    assert sim.statuses() == {(0, 0): DagStatus.RUNNING}
    sim.start("y", "w2")
    sim.clock.now += 5
    sim.finish("y")
    assert sim.statuses() == {(0, 0): DagStatus.FINISHED}
    assert dag.finished == sim.clock.now
    assert sim.tracker.completed[DagStatus.FINISHED] == 1


def test_worker_counts_follow_start_steal_retry_loss_and_error():
    sim = Sim()
    sim.submit("c", ["t1", "t2", "t3", "t4"])
    for key in ("t1", "t2", "t3"):
        sim.start(key, "w1")
    sim.start("t4", "w2")
    assert sim.per_worker() == {("w1", 0, 0): 3, ("w2", 0, 0): 1}

    sim.tracker.task_moved("t3", "w2")  # stolen
    assert sim.per_worker() == {("w1", 0, 0): 2, ("w2", 0, 0): 2}

    sim.go("t3", "waiting")  # failed with retries left: back to waiting
    sim.start("t3", "w1")
    assert sim.per_worker() == {("w1", 0, 0): 3, ("w2", 0, 0): 1}

    sim.go("t4", "released")  # w2 died while t4 ran on it
    sim.tracker.remove_worker("w2")
    assert sim.per_worker() == {("w1", 0, 0): 3}

    sim.go("t1", "erred")
    sim.finish("t2", "t3")
    assert sim.per_worker() == {}  # series disappear at 0
    sim.start("t4", "w1")  # rescheduled after the loss
    sim.finish("t4")
    assert sim.per_worker() == {}
    assert sim.statuses() == {(0, 0): DagStatus.ERRED}


def test_worker_spans_are_the_scheduler_times_a_worker_began_and_stopped_a_dag():
    sim = Sim(finished_dag_ttl=60.0)

    def spans() -> dict[tuple[str, int, int], tuple[float, float | None]]:
        return {(w, j, d): (b, e) for w, j, d, b, e in sim.tracker.snapshot().worker_spans}

    sim.submit("c", ["a1", "a2", "b1"])
    sim.start("a1", "w1")
    sim.clock.now += 0.25  # a second task on the same worker does not move its start
    sim.start("a2", "w1")
    assert spans() == {("w1", 0, 0): (1000.0, None)}
    sim.clock.now += 0.5
    sim.tracker.task_moved("a2", "w2")  # stolen: w2 begins, w1 still has a1
    sim.clock.now += 0.5
    sim.finish("a1")  # w1 stops at 1001.25
    assert spans() == {("w1", 0, 0): (1000.0, 1001.25), ("w2", 0, 0): (1000.75, None)}
    sim.clock.now += 1
    sim.start("b1", "w1")  # w1 resumes: its span is open again, same start
    sim.clock.now += 1
    sim.tracker.remove_worker("w2")  # a worker that leaves stops everything it processed
    sim.go("a2", "released")
    sim.start("a2", "w1")
    sim.clock.now += 1
    sim.finish("a2", "b1")
    assert spans() == {("w1", 0, 0): (1000.0, 1004.25), ("w2", 0, 0): (1000.75, 1003.25)}
    sim.clock.now += 59  # exported for finished-dag-ttl after the DAG finished, then not
    assert len(spans()) == 2
    sim.clock.now += 1
    assert spans() == {}
    assert sim.statuses() == {(0, 0): DagStatus.FINISHED}  # the DAG itself is still retained


def test_a_worker_back_on_another_address_under_its_name_has_one_span_per_dag():
    sim = Sim()
    sim.tracker.add_worker("tcp://a:1", "w0")
    sim.submit("c", ["t1", "t2"])
    sim.start("t1", "tcp://a:1")
    sim.clock.now += 1
    sim.tracker.remove_worker("tcp://a:1")  # it died; it comes back as the same name
    sim.go("t1", "released")
    sim.tracker.add_worker("tcp://a:2", "w0")
    sim.clock.now += 1
    sim.start("t1", "tcp://a:2")
    (only,) = sim.tracker.snapshot().worker_spans  # two series of one label: a bad scrape
    assert only == ("w0", 0, 0, 1000.0, None)
    sim.clock.now += 1
    sim.finish("t1")
    assert sim.tracker.snapshot().worker_spans == [("w0", 0, 0, 1000.0, 1003.0)]


def test_remove_worker_drops_counts_that_no_transition_cleared():
    sim = Sim()
    sim.submit("c", ["t"])
    sim.tracker.add_worker("tcp://w1", "w1")
    sim.start("t", "tcp://w1")
    assert sim.per_worker() == {("w1", 0, 0): 1}
    sim.tracker.remove_worker("tcp://w1")
    assert sim.per_worker() == {}
    sim.go("t", "released")  # a late transition finds nothing to decrement
    assert sim.per_worker() == {}


def test_steal_of_an_unknown_or_unmoved_task_changes_nothing():
    sim = Sim()
    sim.submit("c", ["t"])
    sim.start("t", "w1")
    sim.tracker.task_moved("t", "w1")
    sim.tracker.task_moved("other", "w2")
    assert sim.per_worker() == {("w1", 0, 0): 1}


def test_worker_label_is_used_and_gpus_are_exported_until_the_worker_leaves():
    sim = Sim()
    sim.tracker.add_worker("tcp://10.0.0.1:1", "gpu-worker-0", [(0, "GPU-a"), (1, "GPU-b")])
    sim.tracker.add_worker("tcp://10.0.0.2:1", "tcp://10.0.0.2:1")
    sim.submit("c", ["t"])
    sim.start("t", "tcp://10.0.0.1:1")
    snap = sim.tracker.snapshot()
    assert snap.worker_tasks == [("gpu-worker-0", 0, 0, 1)]
    assert snap.gpus == [
        ("gpu-worker-0", "tcp://10.0.0.1:1", 0, "GPU-a"),
        ("gpu-worker-0", "tcp://10.0.0.1:1", 1, "GPU-b"),
    ]
    sim.tracker.remove_worker("tcp://10.0.0.1:1")
    assert sim.tracker.snapshot().gpus == []


def test_a_dag_whose_task_erred_is_erred_and_counted():
    sim = Sim()
    sim.submit("c", ["bad", "dependent"], wanted=["dependent"])
    sim.start("bad", "w1")
    sim.go("bad", "erred")
    sim.go("dependent", "erred")  # Dask errs the dependents too
    assert sim.statuses() == {(0, 0): DagStatus.ERRED}
    assert sim.tracker.completed == {DagStatus.FINISHED: 0, DagStatus.ERRED: 1}


def test_a_cancelled_result_marks_the_dag_erred():
    sim = Sim()
    sim.submit("c", ["x"])
    sim.go("x", "waiting")
    sim.go("x", "released")
    sim.go("x", "forgotten")
    assert sim.statuses() == {(0, 0): DagStatus.ERRED}


def test_results_already_in_memory_or_erred_finish_the_dag_at_once():
    sim = Sim()
    sim.submit("c", ["x"])
    sim.start("x", "w1")
    sim.finish("x")
    again = sim.submit("c", ["x"])
    assert again.status is DagStatus.FINISHED
    sim.state["e"] = "erred"
    assert sim.submit("c", ["e"]).status is DagStatus.ERRED


def test_a_shared_task_counts_for_its_first_dag_and_completes_both():
    sim = Sim()
    first = sim.submit("a", ["shared"])
    sim.go("shared", "waiting")
    second = sim.submit("b", ["shared", "own"], wanted=["shared", "own"])
    sim.start("shared", "w1")
    assert sim.per_worker() == {("w1", 0, 0): 1}  # counted once, for the first DAG
    sim.finish("shared")
    assert first.status is DagStatus.FINISHED
    assert second.status is DagStatus.WAITING  # still waits for "own"
    sim.start("own", "w1")
    sim.finish("own")
    assert second.status is DagStatus.FINISHED


def test_a_recomputed_task_counts_for_the_dag_that_submitted_it():
    sim = Sim()
    sim.submit("c", ["x", "y"], wanted=["y"])
    sim.start("x", "w1")
    sim.finish("x")
    sim.go("x", "released")  # the worker holding x died before y ran
    sim.start("x", "w2")
    assert sim.per_worker() == {("w2", 0, 0): 1}


@pytest.mark.parametrize("mode", list(JobMode))
def test_graphs_submitted_from_a_task_join_the_submitting_tasks_job(mode):
    sim = Sim(mode)
    span = ("span-1", "etl") if mode is JobMode.SPAN else None
    parent = sim.submit("Client-user", ["parent"], span=span)
    sim.start("parent", "w1")
    other = sim.submit("Client-other", ["o"], span=("span-2", "other"))
    child = sim.submit("Client-worker-1", ["child"], submitter="parent")
    assert child.job is parent.job
    assert child.id == parent.job.next_dag - 1
    if mode is not JobMode.MANUAL:
        assert other.job is not parent.job


def test_span_mode_makes_one_job_per_top_level_span():
    sim = Sim(JobMode.SPAN)
    etl = sim.submit("c1", ["a"], span=("id-1", "etl"))
    etl2 = sim.submit("c2", ["b"], span=("id-1", "etl"))  # another client, same span
    train = sim.submit("c1", ["c"], span=("id-2", "train"))
    plain = sim.submit("c1", ["d"])
    assert (etl.job.id, etl.id, etl2.job.id, etl2.id) == (0, 0, 0, 1)
    assert (train.job.id, train.job.name) == (1, "train")
    assert (plain.job.id, plain.job.name) == (2, "default")


def test_manual_mode_starts_jobs_on_request():
    sim = Sim(JobMode.MANUAL)
    first = sim.submit("c1", ["a"], name="alice")
    assert (first.job.id, first.job.name) == (0, "alice")
    assert sim.submit("c2", ["b"]).job is first.job  # any client: still job 0
    assert sim.tracker.new_job("training").id == 1
    later = sim.submit("c1", ["c"])
    assert (later.job.id, later.id, later.job.name) == (1, 0, "training")


def test_new_job_is_refused_outside_manual_mode():
    with pytest.raises(ValueError, match="manual"):
        Sim(JobMode.CLIENT).tracker.new_job()


def test_finished_dags_age_out_after_export_and_beyond_the_retention_count():
    sim = Sim(max_finished_dags=3, finished_dag_ttl=10.0)
    for i in range(5):
        sim.submit("c", [f"k{i}"])
        sim.start(f"k{i}", "w1")
        sim.finish(f"k{i}")
    # no scrape has seen them yet: kept beyond the count, so their outcomes reach one
    assert [(d.job.id, d.id) for d in sim.tracker.dags()] == [(0, i) for i in range(5)]
    sim.clock.now += 60
    assert sim.tracker.evict() == 0  # never exported yet: kept
    sim.tracker.snapshot()
    assert sim.tracker.evict() == 5  # exported, and older than the TTL
    assert sim.statuses() == {} and sim.tracker.unscraped_dropped == 0

    for i in range(5, 10):
        sim.submit("c", [f"k{i}"])
        sim.finish(f"k{i}")
    sim.tracker.snapshot()
    assert sim.tracker.evict() == 2  # exported, young: only the count applies
    assert [d.id for d in sim.tracker.dags()] == [7, 8, 9]


def test_scraped_finished_dags_go_oldest_first_beyond_the_series_budget():
    """Each DAG ran on two workers (5 + 2 x 2 series) and has 41 activity counters: 50
    series. A budget of 120 keeps two scraped DAGs; DAGs no scrape has seen are kept
    whatever their series, and count once a scrape saw them."""
    counters = {}
    sim = Sim(max_finished_dags=1000, finished_dag_ttl=300.0, max_finished_series=120,
              series_elsewhere=lambda dag: counters.get(dag.id, 0))
    for i in range(5):
        sim.submit("c", [f"a{i}", f"b{i}"])
        sim.start(f"a{i}", "w1")
        sim.start(f"b{i}", "w2")
        sim.finish(f"a{i}", f"b{i}")
        counters[i] = 41
    assert len(sim.tracker.dags()) == 5  # unscraped: kept
    sim.tracker.snapshot()
    assert [d.series for d in sim.tracker.dags()] == [-1] * 5  # counted by retention
    assert sim.tracker.evict() == 3
    assert [(d.id, d.series) for d in sim.tracker.dags()] == [(3, 50), (4, 50)]
    for i in range(5, 8):  # three more, unscraped: kept beside the two
        sim.submit("c", [f"a{i}"])
        sim.finish(f"a{i}")
    assert sim.tracker.evict() == 0 and len(sim.tracker.dags()) == 5
    sim.tracker.snapshot()  # 3 x 5 series more: 115, within the budget
    assert sim.tracker.evict() == 0
    counters.update({8: 200})
    for i in (8, 9):  # 205 series and 5
        sim.submit("c", [f"a{i}"])
        sim.finish(f"a{i}")
    assert len(sim.tracker.snapshot().dags) == 7  # both scraped: 325
    assert sim.tracker.evict() == 6  # the oldest go until the rest fit: a9 alone
    assert [d.id for d in sim.tracker.dags()] == [9]
    assert sim.tracker.unscraped_dropped == 0


def test_counters_a_finished_dag_gains_after_it_was_counted_count_against_the_budget():
    """A heartbeat after the scrape that counted a DAG brings it new activity counters
    (series_added): the budget sees them at once, and the oldest DAG goes for them."""
    counters = {}
    sim = Sim(max_finished_dags=1000, finished_dag_ttl=300.0, max_finished_series=120,
              series_elsewhere=lambda dag: counters.get(dag.id, 0))
    for i in range(2):
        sim.submit("c", [f"a{i}"])
        sim.finish(f"a{i}")
        counters[i] = 40
    sim.tracker.snapshot()
    assert sim.tracker.evict() == 0  # 2 x 45 series: within 120
    late = sim.tracker.dags()[1]
    for _ in range(31):  # 121 series now
        counters[late.id] += 1
        sim.tracker.series_added(late)
    assert late.series == 76
    assert sim.tracker.evict() == 1 and [d.id for d in sim.tracker.dags()] == [1]
    sim.tracker.series_added(sim.tracker.dags()[0])
    assert sim.tracker.dags()[0].series == 77


def test_dags_finishing_between_two_scrapes_are_kept_until_one_saw_them_up_to_a_bound():
    """2,000 DAGs between two scrapes, 1,000 kept once scraped: the next scrape shows
    every one of them. Past max_unscraped_dags the oldest go unseen, and are counted."""
    sim = Sim(max_finished_dags=1000, max_unscraped_dags=3000, finished_dag_ttl=300.0)
    for i in range(2000):
        sim.submit(f"c{i % 3}", [f"k{i}"])
        sim.finish(f"k{i}")
    snap = sim.tracker.snapshot()
    assert len(snap.dags) == 2000 and snap.unscraped == 0
    assert {s for *_, s in snap.dags} == {int(DagStatus.FINISHED)}
    sim.tracker.evict()
    assert len(sim.tracker.dags()) == 1000  # seen: the count applies again
    for i in range(2000, 6000):
        sim.submit("c0", [f"k{i}"])
        sim.finish(f"k{i}")
    snap = sim.tracker.snapshot()
    assert len(snap.dags) == 3000 and snap.unscraped == 1000  # the oldest 1,000 unseen
    assert sorted((j, d) for j, d, *_ in snap.dags) == [(0, d) for d in range(1667, 4667)]


def test_idle_jobs_of_gone_clients_are_forgotten_beyond_max_jobs():
    sim = Sim(max_jobs=2, max_finished_dags=0, max_unscraped_dags=0)
    for i in range(5):
        client = f"Client-{i}"
        sim.submit(client, [f"k{i}"])
        sim.start(f"k{i}", "w1")
        sim.finish(f"k{i}")
        sim.tracker.client_left(client)
    assert sim.tracker.stats()["jobs"] <= 2
    assert sim.submit("Client-new", ["n"]).job.id == 5  # ids are never reused


def test_a_connected_clients_job_is_never_forgotten():
    sim = Sim(max_jobs=1, max_finished_dags=0, max_unscraped_dags=0)
    sim.submit("Client-stay", ["a"])
    sim.finish("a")
    for i in range(3):
        sim.submit(f"Client-{i}", [f"k{i}"])
        sim.finish(f"k{i}")
        sim.tracker.client_left(f"Client-{i}")
    assert sim.submit("Client-stay", ["b"]).job.id == 0


def test_a_client_that_reconnects_under_its_id_keeps_its_job():
    sim = Sim(max_jobs=1, max_finished_dags=0, max_unscraped_dags=0)
    sim.submit("Client-back", ["a"])
    sim.finish("a")
    sim.tracker.client_left("Client-back")
    sim.submit("Client-back", ["b"])  # back before its job was forgotten
    sim.finish("b")
    for i in range(3):
        sim.submit(f"Client-{i}", [f"k{i}"])
        sim.finish(f"k{i}")
        sim.tracker.client_left(f"Client-{i}")
    assert sim.submit("Client-back", ["c"]).job.id == 0


def test_many_dags_keep_every_table_bounded():
    sim = Sim(max_finished_dags=50, max_unscraped_dags=50, finished_dag_ttl=0.0)
    sizes = []
    for i in range(20_000):
        key = f"k{i}"
        sim.submit(f"Client-{i % 7}", [key])
        sim.start(key, f"w{i % 3}")
        sim.finish(key)
        sim.go(key, "released")
        sim.go(key, "forgotten")
        if i % 1000 == 999:
            snap = sim.tracker.snapshot()
            sizes.append((len(snap.dags), len(snap.worker_tasks), sim.tracker.stats()))
    for dags, per_worker, stats in sizes:
        assert dags <= 50
        assert per_worker == 0
        assert stats["tasks"] == 0 and stats["wanted"] == 0 and stats["processing"] == 0
        assert stats["jobs"] == 7 and stats["finished_dags"] <= 50


def test_monitor_sessions_start_stop_and_history():
    sim = Sim(max_sessions=2)
    assert sim.tracker.session is None
    first = sim.tracker.start_session(["mem-util"])
    assert sim.tracker.snapshot().session == (sim.clock.now, 0.0)
    with pytest.raises(SessionError, match="already running"):
        sim.tracker.start_session()
    sim.clock.now += 30
    sim.tracker.stop_session()
    assert (first.stop, first.metrics) == (sim.clock.now, ("mem-util",))
    assert sim.tracker.snapshot().session == (first.start, first.stop)
    with pytest.raises(SessionError, match="no monitor session"):
        sim.tracker.stop_session()
    for _ in range(2):
        sim.tracker.start_session()
        sim.tracker.stop_session()
    assert [s.id for s in sim.tracker.sessions()] == [1, 2]  # bounded to 2
    assert [s.id for s in sim.tracker.sessions(since=1)] == [2]


def test_a_session_records_the_dags_submitted_while_it_ran():
    sim = Sim(max_session_jobs=2)
    sim.submit("Client-a", ["a0"], name="alice")  # before the session: not its DAG
    session = sim.tracker.start_session()
    sim.submit("Client-b", ["b0"], name="bob")
    sim.submit("Client-a", ["a1"], name="alice")
    sim.submit("Client-a", ["a2"], name="alice")
    sim.submit("Client-c", ["c0", "c1"], name="carol")  # beyond max_session_jobs: counted
    sim.submit("Client-c", ["c2"], name="carol")
    sim.tracker.stop_session()
    sim.submit("Client-b", ["b1"], name="bob")  # after the stop: not its DAG
    later = sim.tracker.start_session()
    sim.submit("Client-b", ["b2"], name="bob")
    assert session.to_dict()["jobs"] == [
        {"job_id": 0, "job_name": "alice", "first_dag": 1, "last_dag": 2},
        {"job_id": 1, "job_name": "bob", "first_dag": 0, "last_dag": 0},
    ]
    assert session.to_dict()["unrecorded_dags"] == 2
    assert later.to_dict()["jobs"] == [
        {"job_id": 1, "job_name": "bob", "first_dag": 2, "last_dag": 2}]
    assert sim.tracker.sessions()[0].to_dict() == session.to_dict()


def test_labels_are_printable_and_capped():
    assert clean_label('a"b\\c\nd\x00', 128) == 'a"b\\c?d?'
    capped = clean_label("x" * 500, 20)
    assert len(capped) == 20 and capped.endswith("…")
    sim = Sim(label_max_length=16)
    dag = sim.submit("Client-" + "y" * 100, ["k"], name="n\n" * 50)
    assert len(dag.client) == 16 and len(dag.job.name) == 16 and "\n" not in dag.job.name


def test_snapshot_from_another_thread_while_the_tracker_changes():
    sim = Sim(max_finished_dags=100)
    errors: list[BaseException] = []
    stop = threading.Event()

    def scrape() -> None:
        try:
            while not stop.is_set():
                sim.tracker.snapshot()
        except BaseException as exc:  # pragma: no cover - the failure being tested for
            errors.append(exc)

    thread = threading.Thread(target=scrape)
    thread.start()
    try:
        for i in range(20_000):
            sim.submit("c", [f"k{i}"])
            sim.start(f"k{i}", f"w{i % 4}")
            if i % 2:
                sim.finish(f"k{i}")
    finally:
        stop.set()
        thread.join()
    assert errors == []
