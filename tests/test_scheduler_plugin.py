"""The scheduler preload in real in-process clusters: every step is checked on what a scrape
of the scheduler's /metrics returns (HTTP on the dashboard port), as Prometheus would see it."""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
import dask
import pytest
from distributed import Client, Event, LocalCluster, get_client, span, worker_client
from prometheus_client import REGISTRY, generate_latest

from dask_metrics.exporter.identity import STARTUP_KEY, GpuRef, WorkerIdentity, worker_label
from dask_metrics.exporter.job_model import JobMode
from dask_metrics.exporter.scheduler.plugin import PLUGIN_NAME, JobPlugin
from dask_metrics.exporter.scheduler.preload import dask_setup
from dask_metrics.exporter.scheduler.settings import Settings
from tests.helpers import Scrape, scrape, wait_for

RUNNING, FINISHED, ERRED = 1.0, 2.0, 3.0


@contextmanager
def cluster(
    n_workers: int = 2, config: dict[str, Any] | None = None, argv: tuple[str, ...] = (), **kw: Any
) -> Iterator[LocalCluster]:
    with (
        dask.config.set(config or {}),
        LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=False,
            dashboard_address="127.0.0.1:0",
            scheduler_kwargs={"preload": ["dask_metrics.scheduler"], "preload_argv": list(argv)},
            **kw,
        ) as lc,
    ):
        yield lc


def metrics(lc: LocalCluster) -> Scrape:
    """The scheduler's /metrics, without dask_cluster once every series is checked to carry
    the plugin's (tests/test_cluster_label.py is about the label itself)."""
    s = scrape(lc.scheduler.http_server.port)
    plugin = lc.scheduler.plugins.get(PLUGIN_NAME)
    return s.of_cluster(plugin.cluster if plugin is not None else None)


def plugin_of(lc: LocalCluster) -> JobPlugin:
    return lc.scheduler.plugins[PLUGIN_NAME]


def dag_rows(s: Scrape) -> dict[tuple[str, str], tuple[str, str]]:
    """(job_id, dag_id) -> (job_name, client) from dask_job_dag_info."""
    return {
        (j, d): (name, client)
        for (j, d, name, client) in s.rows(
            "dask_job_dag_info", "job_id", "dag_id", "job_name", "client"
        )
    }


def statuses(s: Scrape) -> dict[tuple[str, str], float]:
    return s.rows("dask_job_dag_status", "job_id", "dag_id")


def current(s: Scrape) -> tuple[float | None, float | None]:
    return s.value("dask_job_current_job"), s.value("dask_job_current_dag")


def idle(s: Scrape) -> bool:
    return current(s) == (-1, -1) and not s["dask_job_worker_tasks"]


def inc(x: int) -> int:
    return x + 1


def wait_event(name: str) -> str:
    Event(name).wait()
    return name


def fail(x: int) -> int:
    raise ValueError(f"failing on purpose: {x}")


ATTEMPTS: Counter[str] = Counter()


def flaky(name: str) -> str:
    """Fails on its first attempt only (in-process workers share this counter)."""
    ATTEMPTS[name] += 1
    if ATTEMPTS[name] == 1:
        raise RuntimeError("first attempt fails")
    return name


def spawn_with_get_client(n: int) -> int:
    client = get_client()
    return sum(client.gather(client.map(inc, range(n), pure=False)))


def spawn_with_worker_client(n: int) -> int:
    with worker_client() as client:
        return sum(client.gather(client.map(inc, range(n), pure=False)))


def slow(x: int, delay: float) -> int:
    Event("never").wait(delay)
    return x


@pytest.mark.integration
def test_several_clients_at_once_get_jobs_in_order_of_first_submission():
    with cluster() as lc:
        clients = {name: Client(lc, name=name) for name in ("c0", "c1", "c2")}
        try:
            first = clients["c1"].submit(wait_event, "go-c1")  # c1 submits first: job 0
            s = wait_for(lambda: metrics(lc), lambda s: statuses(s).get(("0", "0")) == RUNNING)
            assert current(s) == (0, 0)
            assert sum(s["dask_job_worker_tasks"].values()) == 1
            (where,) = s.rows("dask_job_worker_tasks", "worker", "job_id", "dag_id")
            assert where[1:] == ("0", "0") and where[0] in {"0", "1"}
            clients["c0"].submit(inc, 0).result()  # job 1
            clients["c2"].submit(inc, 0).result()  # job 2

            def submit_many(client: Client) -> None:
                for i in range(5):
                    client.submit(inc, i, pure=False).result()

            threads = [threading.Thread(target=submit_many, args=(c,)) for c in clients.values()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            Event("go-c1", client=clients["c0"]).set()
            assert first.result() == "go-c1"

            s = wait_for(lambda: metrics(lc), idle, what="an idle cluster")
            rows = dag_rows(s)
            expected_dags = {"0": 6, "1": 6, "2": 6}  # 1 first DAG + 5 each
            for job_id, name in (("0", "c1"), ("1", "c0"), ("2", "c2")):
                dags = {d: v for (j, d), v in rows.items() if j == job_id}
                assert sorted(dags, key=int) == [str(i) for i in range(expected_dags[job_id])]
                assert {v[0] for v in dags.values()} == {name}
                assert {v[1] for v in dags.values()} == {clients[name].id}
            assert set(statuses(s).values()) == {FINISHED}
            assert s.value("dask_job_dags_completed_total", status="finished") == 18
        finally:
            for c in clients.values():
                c.close()


@pytest.mark.integration
def test_graphs_submitted_from_tasks_count_toward_the_submitting_tasks_job():
    with cluster() as lc, Client(lc, name="alice") as alice, Client(lc, name="bob") as bob:
        # In-process workers hand get_client() the newest client (bob) even inside alice's
        # task: only the submitting task tells whose work it is.
        assert alice.submit(spawn_with_get_client, 3, pure=False).result() == 6
        assert bob.submit(spawn_with_worker_client, 4, pure=False).result() == 10
        s = wait_for(lambda: metrics(lc), idle)
        rows = dag_rows(s)
        assert sorted(rows) == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")]
        assert {rows["0", "0"][0], rows["0", "1"][0]} == {"alice"}
        assert {rows["1", "0"][0], rows["1", "1"][0]} == {"bob"}
        assert set(statuses(s).values()) == {FINISHED}


@pytest.mark.integration
def test_span_mode_takes_the_job_from_the_top_level_span():
    with cluster(argv=("--job-mode", "span")) as lc, Client(lc) as client:
        assert plugin_of(lc).tracker.mode is JobMode.SPAN
        with span("etl"):
            client.submit(inc, 1).result()
            with span("clean"):
                client.submit(inc, 2).result()
        with span("train"):
            client.submit(inc, 3).result()
            client.submit(spawn_with_worker_client, 2, pure=False).result()
        client.submit(inc, 4).result()
        s = wait_for(lambda: metrics(lc), idle)
        names = {k: v[0] for k, v in dag_rows(s).items()}
        assert names == {
            ("0", "0"): "etl",
            ("0", "1"): "etl",  # nested span: same top-level span
            ("1", "0"): "train",
            ("1", "1"): "train",
            ("1", "2"): "train",  # submitted from inside a train task
            ("2", "0"): "default",
        }


@pytest.mark.integration
def test_manual_mode_starts_a_job_when_a_monitor_asks():
    config = {"dask-metrics.scheduler.job-mode": "manual"}
    with cluster(config=config) as lc, Client(lc, name="a") as a, Client(lc, name="b") as b:
        a.submit(inc, 1).result()
        b.submit(inc, 2).result()
        assert a.sync(a.scheduler.dask_metrics_new_job, name="second") == {"ok": True, "job_id": 1}
        b.submit(inc, 3).result()
        s = wait_for(lambda: metrics(lc), idle)
        assert dag_rows(s) == {
            ("0", "0"): ("a", a.id),
            ("0", "1"): ("a", b.id),
            ("1", "0"): ("second", b.id),
        }


@pytest.mark.integration
def test_new_job_is_refused_outside_manual_mode():
    with cluster() as lc, Client(lc) as client:
        reply = client.sync(client.scheduler.dask_metrics_new_job)
        assert reply["ok"] is False and "manual" in reply["error"]


@pytest.mark.integration
def test_errors_retries_and_erred_dependents():
    with cluster() as lc, Client(lc) as client:
        with pytest.raises(ValueError, match="on purpose"):
            client.submit(fail, 1).result()
        bad = client.submit(fail, 2)
        with pytest.raises(ValueError):
            client.submit(inc, bad).result()  # a dependent of an erred task
        assert client.submit(flaky, "f", retries=2).result() == "f"
        s = wait_for(lambda: metrics(lc), idle)
        assert statuses(s) == {("0", "0"): ERRED, ("0", "1"): ERRED, ("0", "2"): ERRED,
                               ("0", "3"): FINISHED}  # fmt: skip
        assert s.value("dask_job_dags_completed_total", status="erred") == 3
        assert s.value("dask_job_plugin_errors_total", hook="transition") == 0


def processing_truth(dask_scheduler: Any) -> tuple[str, dict[str, int]]:
    """A scrape and the scheduler's own per-worker processing count, in one loop tick."""
    text = generate_latest(REGISTRY).decode()
    truth = Counter(
        worker_label(ws.name, ws.address)
        for ws in dask_scheduler.workers.values()
        for _ in ws.processing
    )
    return text, dict(truth)


@pytest.mark.integration
def test_a_stolen_task_counts_on_the_thief():
    config = {"distributed.scheduler.worker-saturation": float("inf")}  # no queuing
    with cluster(n_workers=1, config=config) as lc, Client(lc) as client:
        futures = client.map(slow, range(30), delay=0.2, pure=False)
        s = wait_for(lambda: metrics(lc), lambda s: s.value(
            "dask_job_worker_tasks", worker="0", job_id="0", dag_id="0") == 30)  # fmt: skip
        lc.scale(2)
        client.wait_for_workers(2)
        steals: list[Any] = []
        while not all(f.done() for f in futures):
            text, truth = client.run_on_scheduler(processing_truth)
            exported = Scrape(text).rows("dask_job_worker_tasks", "worker")
            assert {w: int(n) for (w,), n in exported.items()} == truth
            steals = [m for _, m in client.get_events("stealing") if m[0] == "confirm"]
        assert steals, "no task was stolen"
        assert {m[4] for m in steals} == {lc.workers[1].address}  # the new worker stole
        s = wait_for(lambda: metrics(lc), idle)
        assert statuses(s) == {("0", "0"): FINISHED}


@pytest.mark.integration
def test_a_worker_lost_mid_dag_loses_its_series_and_the_dag_still_finishes():
    config = {"distributed.scheduler.worker-saturation": float("inf")}
    with cluster(config=config) as lc, Client(lc) as client:
        futures = client.map(slow, range(10), delay=0.3, pure=False)
        s = wait_for(
            lambda: metrics(lc),
            lambda s: {w for (w,) in s.rows("dask_job_worker_tasks", "worker")} == {"0", "1"},
        )
        lc.sync(lc.workers[1].close)
        s = wait_for(
            lambda: metrics(lc),
            lambda s: {w for (w,) in s.rows("dask_job_worker_tasks", "worker")} == {"0"},
        )
        assert client.gather(futures) == list(range(10))
        s = wait_for(lambda: metrics(lc), idle)
        assert statuses(s) == {("0", "0"): FINISHED}


def gpu_identity(worker: Any) -> dict[str, Any]:
    gpus = (GpuRef(0, f"GPU-{worker.name}-a"), GpuRef(1, "GPU-shared"))
    return WorkerIdentity(str(worker.name), worker.address, os.getpid(), "host", gpus).to_dict()


@pytest.mark.integration
def test_worker_gpu_info_comes_from_the_published_identity_and_leaves_with_the_worker():
    with cluster(startup_information={STARTUP_KEY: gpu_identity}) as lc:
        addresses = {w.name: w.address for w in lc.workers.values()}
        s = wait_for(lambda: metrics(lc), lambda s: len(s["dask_job_worker_gpu_info"]) == 4)
        assert set(s.rows("dask_job_worker_gpu_info", "worker", "address", "gpu", "uuid")) == {
            ("0", addresses[0], "0", "GPU-0-a"),
            ("0", addresses[0], "1", "GPU-shared"),
            ("1", addresses[1], "0", "GPU-1-a"),
            ("1", addresses[1], "1", "GPU-shared"),
        }
        lc.sync(lc.workers[1].close)
        s = wait_for(lambda: metrics(lc), lambda s: len(s["dask_job_worker_gpu_info"]) == 2)
        assert {w for (w,) in s.rows("dask_job_worker_gpu_info", "worker")} == {"0"}


@pytest.mark.integration
def test_monitor_sessions_live_on_the_scheduler_across_clients():
    url = "http://prometheus.example:9090/prefix"
    with cluster(config={"dask-metrics.scheduler.prometheus-url": url}) as lc:
        with Client(lc) as first:
            started = first.sync(first.scheduler.dask_metrics_monitor_start, metrics=["mem-util"])
            assert started["ok"] and started["session"]["metrics"] == ["mem-util"]
        with Client(lc) as second:
            call = second.scheduler
            assert second.sync(call.dask_metrics_prometheus_url) == url
            status = second.sync(call.dask_metrics_monitor_status)
            assert status["running"] and status["session"] == started["session"]
            assert status["prometheus_url"] == url and status["job_mode"] == "client"
            again = second.sync(call.dask_metrics_monitor_start)
            assert not again["ok"] and "already running" in again["error"]
            s = metrics(lc)
            assert (
                s.value("dask_job_monitor_start_timestamp_seconds") == started["session"]["start"]
            )
            # this scheduler's life: a label on its session, job and DAG series and a gauge
            life = started["session"]["scheduler_start"]
            raw = scrape(lc.scheduler.http_server.port)
            assert {dict(labels).get("scheduler_start") for labels in
                    raw["dask_job_monitor_start_timestamp_seconds"]} == {life}
            assert f"{s.value('dask_job_scheduler_start_timestamp_seconds'):.3f}" == life
            assert s.value("dask_job_monitor_stop_timestamp_seconds") == 0

            blocked = second.submit(wait_event, "go-stop")
            wait_for(lambda: statuses(metrics(lc)).get(("0", "0")) == RUNNING)
            timed_out = second.sync(call.dask_metrics_monitor_stop, timeout=0.2)
            assert not timed_out["ok"] and "timed out" in timed_out["error"]
            replies: list[dict[str, Any]] = []
            stopper = threading.Thread(
                target=lambda: replies.append(second.sync(call.dask_metrics_monitor_stop))
            )
            stopper.start()
            assert second.sync(call.dask_metrics_monitor_status)["running"]
            Event("go-stop", client=second).set()
            blocked.result()
            stopper.join(timeout=20)
            (stopped,) = replies
            assert stopped["ok"]
            (dag,) = second.sync(call.dask_metrics_dags)
            assert stopped["session"]["stop"] >= dag["finished"]
            s = metrics(lc)
            assert s.value("dask_job_monitor_stop_timestamp_seconds") == stopped["session"]["stop"]
            assert second.sync(call.dask_metrics_monitor_sessions) == [stopped["session"]]
            assert second.sync(call.dask_metrics_monitor_sessions, since=0) == []
            assert not second.sync(call.dask_metrics_monitor_stop)["ok"]
            single = second.sync(call.dask_metrics_monitor_start, metrics="power")
            assert single["session"]["metrics"] == ["power"] and single["session"]["id"] == 1


@pytest.mark.integration
def test_a_failing_hook_is_counted_and_the_scheduler_carries_on(caplog):
    with cluster() as lc, Client(lc) as client:
        tracker = plugin_of(lc).tracker

        def broken(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("bug in the tracker")

        tracker.transition = broken  # type: ignore[method-assign]
        tracker.submit = broken  # type: ignore[method-assign]
        assert client.gather(client.map(inc, range(5))) == [1, 2, 3, 4, 5]
        s = metrics(lc)
        assert s.value("dask_job_plugin_errors_total", hook="transition") >= 10
        assert s.value("dask_job_plugin_errors_total", hook="update_graph") == 1
        assert "the transition hook failed" in caplog.text

        tracker.snapshot = broken  # type: ignore[method-assign]
        s = metrics(lc)  # the scheduler's own series survive a broken collector
        assert s["dask_scheduler_workers"]
        assert s.value("dask_job_plugin_errors_total", hook="collect") >= 1
        assert not s["dask_job_dag_info"]


@pytest.mark.integration
def test_registered_once_newest_scheduler_wins_and_teardown_unregisters():
    with cluster() as one, Client(one) as c1:
        c1.submit(inc, 1).result()
        c1.submit(inc, 2).result()
        assert len(dag_rows(metrics(one))) == 2
        with cluster() as two, Client(two) as c2:
            c2.submit(inc, 1).result()
            # both /metrics serve the newest, labelled with its cluster
            newest = scrape(one.scheduler.http_server.port).of_cluster(plugin_of(two).cluster)
            assert len(dag_rows(newest)) == 1
            assert generate_latest(REGISTRY).decode().count("# TYPE dask_job_current_job ") == 1
            c2.run_on_scheduler(
                lambda dask_scheduler: dask_setup.callback(dask_scheduler)
            )
            assert (
                sum(isinstance(p, JobPlugin) for p in two.scheduler.plugins.values()) == 1
            )
        assert len(dag_rows(metrics(one))) == 2  # back to the remaining scheduler
    assert "dask_job_" not in generate_latest(REGISTRY).decode()


@pytest.mark.integration
def test_metrics_port_serves_the_series_instead_of_the_scheduler():
    with cluster(config={"dask-metrics.scheduler.metrics-port": 0,
                         "dask-metrics.scheduler.metrics-address": "127.0.0.1"}) as lc, \
            Client(lc) as client:
        client.submit(inc, 1).result()
        port = client.sync(client.scheduler.dask_metrics_monitor_status)["metrics_port"]
        assert port and port != lc.scheduler.http_server.port
        assert plugin_of(lc)._server.addresses == {"127.0.0.1"}  # this host only, as asked
        s = wait_for(lambda: scrape(port).of_cluster(plugin_of(lc).cluster), idle)
        assert statuses(s) == {("0", "0"): FINISHED}
        assert not metrics(lc)["dask_job_current_job"]


def test_settings_come_from_dask_config_and_the_command_line():
    config = {
        "dask-metrics.scheduler.job-mode": "span",
        "dask-metrics.scheduler.finished-dag-ttl": "2 minutes",
        "dask-metrics.scheduler.max-finished-dags": 7,
    }
    with dask.config.set(config):
        settings = Settings.from_config()
        assert (settings.job_mode, settings.finished_dag_ttl) == (JobMode.SPAN, 120.0)
        assert settings.max_finished_dags == 7 and settings.metrics_port is None
        assert Settings.from_config(job_mode="manual").job_mode is JobMode.MANUAL
    with (
        dask.config.set({"dask-metrics.scheduler.job-mode": "bogus"}),
        pytest.raises(ValueError, match="job-mode: 'bogus' is not one of client, span, manual"),
    ):
        Settings.from_config()
    ctx = dask_setup.make_context(
        "dask_setup",
        ["--job-mode", "span", "--metrics-port", "9123", "--prometheus-url", "http://p",
         "--metrics-address", "127.0.0.1"],
    )
    assert ctx.params == {"job_mode": "span", "metrics_port": 9123, "prometheus_url": "http://p",
                          "metrics_address": "127.0.0.1", "cluster": None, "prometheus": None,
                          "local_prometheus_dir": None, "local_prometheus_port": None}
    with pytest.raises(click.BadParameter):
        dask_setup.make_context("dask_setup", ["--job-mode", "bogus"])


@pytest.mark.integration
def test_many_small_dags_keep_retained_dags_and_series_bounded():
    config = {
        "dask-metrics.scheduler.max-finished-dags": 20,
        "dask-metrics.scheduler.max-unscraped-dags": 20,
        "dask-metrics.scheduler.finished-dag-ttl": 0,
    }
    with cluster(config=config) as lc, Client(lc) as client:
        tracker = plugin_of(lc).tracker
        series_counts = []
        for _ in range(10):
            futures = [client.submit(inc, i, pure=False) for i in range(60)]
            client.gather(futures)
            del futures
            s = metrics(lc)
            series_counts.append(
                sum(len(v) for n, v in s.samples.items() if n.startswith("dask_job"))
            )
            assert len(s["dask_job_dag_info"]) <= 20 + len(tracker.unfinished())
        s = wait_for(lambda: metrics(lc), idle)
        assert s.value("dask_job_dags_completed_total", status="finished") == 600
        stats = wait_for(tracker.stats, lambda st: st["tasks"] == 0)
        assert stats["finished_dags"] <= 20 and stats["jobs"] == 1
        assert max(series_counts[2:]) <= max(series_counts[:2]) + 20  # levelled off


@pytest.mark.integration
def test_every_dag_finished_between_two_scrapes_reaches_the_next_up_to_the_bound():
    """2,000 DAGs between two scrapes (what 15 s scrapes meet): the next scrape shows each
    finished, though only 1,000 finished DAGs are kept once seen; past max-unscraped-dags
    the forgotten ones are counted, for the collector to say so."""
    with cluster() as lc, Client(lc) as client:
        metrics(lc)  # the scrape before
        for i in range(2000):
            client.submit(inc, i, key=f"one-{i}").result()
        s = wait_for(lambda: metrics(lc), idle)
        finished = [v for v in statuses(s).values() if v == FINISHED]
        assert len(finished) == 2000
        assert s.value("dask_job_dags_unscraped_total") == 0
    bounds = {"dask-metrics.scheduler.max-finished-dags": 20,
              "dask-metrics.scheduler.max-unscraped-dags": 50}
    with cluster(config=bounds) as lc, Client(lc) as client:
        metrics(lc)
        for i in range(80):  # beyond the bound before the next scrape
            client.submit(inc, i, key=f"two-{i}").result()
        s = wait_for(lambda: metrics(lc), idle)
        assert sorted(int(d) for _, d in statuses(s)) == list(range(30, 80))  # the newest 50
        assert s.value("dask_job_dags_unscraped_total") == 30


@pytest.mark.integration
def test_job_and_client_label_values_are_capped_and_survive_escaping():
    name = 'we"ird\\name ' + "x" * 300
    config = {"dask-metrics.scheduler.label-max-length": 64}
    with cluster(config=config) as lc, Client(lc, name=name) as client:
        client.submit(inc, 1).result()
        ((job_name, client_label),) = dag_rows(wait_for(lambda: metrics(lc), idle)).values()
        assert job_name == name[:63] + "…"
        assert client_label == client.id[:63] + "…"
