"""Faults of the ``Monitor`` API.

| part | fault | test |
|------|-------|------|
| `successful_jobs` | an earlier session's DAGs counted; no ids | `test_a_session_reports_...` |
| every method | after `client.close()`: AttributeError | `test_every_method_after_...` |
| `attach` | after `start()`: silently ignored | `test_attach_while_a_session_...` |
| results | no Prometheus URL known | `test_no_prometheus_url_is_...` |
| `Monitor()` | an unknown connection option ignored | `test_unknown_connection_...` |

The scheduler side runs in-process (LocalCluster with the preload); where the results come
from Prometheus, a real Prometheus scrapes that scheduler's ``/metrics`` every second.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from distributed import Client, wait

from dask_metrics.collector.monitor.monitor import Monitor, MonitorError, MonitorUsageError
from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient
from dask_metrics.collector.store.connection import ENV_URL
from tests.helpers import preload_cluster, wait_for
from tests.prometheus_helpers import run_prometheus

pytestmark = pytest.mark.integration


def inc(x: int) -> int:
    return x + 1


def fail(x: int) -> int:
    raise ValueError(f"DAG fails on purpose ({x})")


def run_dag(client: Client, func, x: int, key: str) -> None:
    """One graph submission (one DAG), waited for."""
    future = client.submit(func, x, key=key, pure=False)
    wait(future)


def scraped(prom_url: str, expr: str) -> list:
    with PrometheusClient(ConnectionSettings(url=prom_url)) as prom:
        return prom.query(expr, time.time())


# -- 1. successful_jobs / jobs: exactly the session's DAGs ------------------------------------


def test_a_session_reports_exactly_the_dags_submitted_while_it_ran(tmp_path: Path):
    with preload_cluster() as lc:
        port = lc.scheduler.http_server.port
        targets = [{"job_name": "dask-scheduler",
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]
        with run_prometheus(tmp_path / "prometheus", scrape_configs=targets) as prom, \
                Client(lc, name="monitor") as client:
            wait_for(lambda: scraped(prom.url, "dask_job_current_job"), timeout=60,
                     what="Prometheus scraping the scheduler")
            monitor = Monitor(client, prometheus=prom.url)

            monitor.start()  # session A: job 'a1' runs two DAGs, job 'a2' one
            with Client(lc, name="a1") as a1:
                run_dag(a1, inc, 0, "a1-0")
                run_dag(a1, inc, 1, "a1-1")
            with Client(lc, name="a2") as a2:
                run_dag(a2, inc, 2, "a2-0")
            monitor.stop()
            assert monitor.successful_jobs() == [[True, True], [True]]

            later = Client(lc, name="late")  # connected before B, submits during B
            run_dag(later, inc, 3, "late-0")  # before B: not B's
            monitor.start()  # session B: job 'b' runs two DAGs, the second errs
            with Client(lc, name="b") as b:
                run_dag(b, inc, 4, "b-0")
                run_dag(b, fail, 5, "b-1")
            run_dag(later, inc, 6, "late-1")
            monitor.stop()
            later.close()

            # A's DAGs are still exported (TTL 300 s) within B's window
            a_status = scraped(prom.url, 'dask_job_dag_status{job_id="0"}')
            assert len(a_status) == 2, a_status
            assert monitor.successful_jobs() == [[True], [True, False]]
            jobs = monitor.jobs()
    assert jobs == [
        {"job_id": 2, "job_name": "late", "dags": [{"dag_id": 1, "status": "finished"}]},
        {"job_id": 3, "job_name": "b", "dags": [{"dag_id": 0, "status": "finished"},
                                                {"dag_id": 1, "status": "erred"}]},
    ]


# -- 2. a closed client ------------------------------------------------------------------------


def test_every_method_after_client_close_is_one_clear_line(tmp_path: Path):
    with preload_cluster() as lc:
        client = Client(lc)
        monitor = Monitor(client, prometheus="http://127.0.0.1:9")
        session = monitor.start()["session"]
        monitor.stop()
        client.close()
        calls = {
            "status": lambda: monitor.status(),
            "start": lambda: monitor.start(),
            "stop": lambda: monitor.stop(),
            "session": lambda: monitor.session(),
            "sessions": lambda: monitor.sessions(),
            "new_job": lambda: monitor.new_job(),
            "to_csv": lambda: monitor.to_csv(tmp_path / "out"),
            "export_session": lambda: monitor.export_session(session, tmp_path / "out"),
            "peak_memory": lambda: monitor.peak_memory(),
            "successful_jobs": lambda: monitor.successful_jobs(),
            "jobs": lambda: monitor.jobs(),
            "attach": lambda: monitor.attach(["mem-util"]),
        }
        for name, call in calls.items():
            with pytest.raises(MonitorError) as caught:
                call()
            message = str(caught.value)
            assert message.startswith("the client is closed: "), (name, message)
            assert "\n" not in message and lc.scheduler_address in message, (name, message)
        assert not (tmp_path / "out").exists()


# -- 3. attach after start -----------------------------------------------------------------------


def test_attach_while_a_session_runs_is_refused():
    with preload_cluster() as lc, Client(lc) as client:
        monitor = Monitor(client).attach(["mem-util"])
        session = monitor.start()["session"]
        with pytest.raises(MonitorError) as caught:
            monitor.attach(["power"])
        message = str(caught.value)
        assert "\n" not in message
        assert f"monitor session {session['id']} is already running and records mem-util" \
            in message and "stop()" in message
        assert monitor.metrics == ["mem-util"]
        other = Monitor(client)  # another Monitor, as another client would have
        with pytest.raises(MonitorError, match="already running"):
            other.attach(["power"])
        monitor.stop()
        assert list(monitor.session()["metrics"]) == ["mem-util"]
        monitor.attach(["power"])  # between sessions: for the next one
        assert list(monitor.start()["session"]["metrics"]) == ["power"]
        monitor.stop()


# -- 4. no Prometheus --------------------------------------------------------------------------


def test_no_prometheus_url_is_one_usage_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(ENV_URL, raising=False)
    config = tmp_path / "collector.yaml"
    config.write_text("timeout: 5\n")
    with preload_cluster() as lc, Client(lc) as client:  # a preload without --prometheus-url
        monitor = Monitor(client)
        session = monitor.start()["session"]
        monitor.stop()
        calls = {
            "to_csv": lambda m: m.to_csv(tmp_path / "out"),
            "export_session": lambda m: m.export_session(session, tmp_path / "out"),
            "peak_memory": lambda m: m.peak_memory(),
            "successful_jobs": lambda m: m.successful_jobs(),
            "jobs": lambda m: m.jobs(),
        }
        for name, call in calls.items():
            with pytest.raises(MonitorUsageError) as caught:
                call(monitor)
            message = str(caught.value)
            assert "\n" not in message and message.startswith("no Prometheus URL: "), name
            for way in ("Monitor(client, prometheus=URL)", ENV_URL, "--prometheus-url"):
                assert way in message, (name, message)
            with pytest.raises(MonitorUsageError) as caught:
                call(Monitor(client, config=str(config)))
            assert f"put 'prometheus:' in {config}" in str(caught.value), name
    assert not (tmp_path / "out").exists()


def test_unknown_connection_option_is_a_usage_error():
    with preload_cluster() as lc, Client(lc) as client, pytest.raises(MonitorUsageError) as caught:
        Monitor(client, prometheus="http://127.0.0.1:9", pasword_file="secret")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("Monitor(pasword_file=...): unknown connection option")
    assert "password_file" in message and "bearer_token_file" in message
