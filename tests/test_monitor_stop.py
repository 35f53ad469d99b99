"""``Monitor.stop()`` against a real in-process cluster with the scheduler preload: a finite
default timeout, and on a timeout a message naming the jobs and DAGs still running and the
tasks in flight, from Python and from ``collector monitor stop``."""

from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
from distributed import Client, Event

from dask_metrics.collector.errors import UsageError
from dask_metrics.collector.monitor.monitor import Monitor, MonitorError
from dask_metrics.collector.monitor.options import STOP_TIMEOUT
from tests.helpers import collector, preload_cluster, wait_for

pytestmark = pytest.mark.integration


def wait_event(name: str) -> str:
    Event(name).wait()
    return name


def running_dags(client: Client) -> list[dict]:
    return [d for d in client.sync(client.scheduler.dask_metrics_dags)
            if d["status"] == "running"]


def test_stop_times_out_naming_what_still_runs_and_the_session_keeps_running():
    with preload_cluster() as lc, Client(lc, name="alice") as client:
        monitor = Monitor(client)
        assert monitor.stop_timeout == STOP_TIMEOUT == 60  # finite by default
        session = monitor.start()["session"]
        blocked = client.submit(wait_event, "go", key="long-task")
        wait_for(lambda: running_dags(client), what="the DAG to run")
        with pytest.raises(MonitorError) as caught:
            monitor.stop(timeout=0.3)
        message = str(caught.value)
        assert "\n" not in message
        assert f"monitor session {session['id']} not stopped after 0.3 s" in message
        assert "1 DAG(s) still running: job 0 'alice' DAG 0 (running" in message
        (worker,) = lc.scheduler.workers
        assert f"1 task(s) processing on {worker} (1)" in message
        assert "stop(force=True)" in message and "longer timeout" in message
        assert monitor.status()["running"]
        Event("go", client=client).set()
        assert blocked.result(timeout=30) == "go"
        stopped = monitor.stop()
        assert stopped["ok"] and stopped["session"]["id"] == session["id"]


def test_the_default_timeout_is_the_monitors_stop_timeout():
    with preload_cluster() as lc, Client(lc, name="bob") as client:
        monitor = Monitor(client, stop_timeout=0.5)
        monitor.start()
        first = client.submit(wait_event, "go-1", key="first")
        second = client.submit(wait_event, "go-2", key="second")
        wait_for(lambda: len(running_dags(client)) == 2, what="both DAGs to run")
        with pytest.raises(MonitorError, match=r"not stopped after 0\.5 s: 2 DAG\(s\) still "
                           r"running: job 0 'bob' DAG 0 \(running.*\), job 0 'bob' DAG 1 "
                           r"\(running.*\); 2 task\(s\) processing"):
            monitor.stop()
        assert monitor.stop(force=True)["ok"]  # force: at once, tasks still running
        assert not monitor.status()["running"]
        Event("go-1", client=client).set()
        Event("go-2", client=client).set()
        assert client.gather([first, second], errors="raise") == ["go-1", "go-2"]
        with pytest.raises(MonitorError, match="no monitor session is running"):
            monitor.stop(timeout=0)


@pytest.mark.parametrize("bad", [-1, math.nan, "soon"])
def test_a_bad_timeout_is_a_usage_error(bad):
    with pytest.raises(UsageError, match=r"timeout must be 0 or more seconds"):
        Monitor(None, stop_timeout=bad)
    with pytest.raises(ValueError, match=r"timeout must be 0 or more seconds"):
        Monitor(Unconnected()).stop(timeout=bad)
    with pytest.raises(UsageError, match=r"scrape_wait must be 0 to 3600 seconds"):
        Monitor(None, scrape_wait=bad)
    run = collector("monitor", "stop", "--scheduler", "tcp://127.0.0.1:9", "--timeout", str(bad))
    assert run.code == 2 and run.out == ""
    assert len(run.err.splitlines()) == 1 and ("--timeout must be 0 or more seconds" in run.err
                                              or "invalid float value" in run.err)


class Unconnected:
    """Has what a Monitor needs of a Client, and fails if it is asked anything."""

    def sync(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("the bad argument should be refused before any call")


@pytest.mark.parametrize("client", [None, "tcp://127.0.0.1:8786"])
def test_a_monitor_of_something_that_is_no_client_is_a_usage_error(client):
    with pytest.raises(UsageError, match=r"Monitor needs a distributed\.Client"):
        Monitor(client)


@pytest.mark.parametrize("metrics", [123, None, b"mem-util", ["mem-util", 5], ["bogus"]])
def test_attach_of_no_metric_names_is_a_usage_error(metrics):
    with pytest.raises(UsageError, match=r"attach\(\)"):
        Monitor(Unconnected()).attach(metrics)


def test_collector_monitor_stop_timeout_is_one_line_and_exit_1():
    with preload_cluster() as lc, Client(lc, name="carol") as client:
        Monitor(client).start()
        blocked = client.submit(wait_event, "go-cli", key="cli-task")
        wait_for(lambda: running_dags(client), what="the DAG to run")
        result = subprocess.run(
            [sys.executable, "-m", "dask_metrics.collector", "monitor", "stop",
             "--scheduler", lc.scheduler_address, "--timeout", "0.3"],  # the same user
            capture_output=True, text=True, timeout=60)
        Event("go-cli", client=client).set()
        blocked.result(timeout=30)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert re.search(r"not stopped after 0\.3 s: 1 DAG\(s\) still running: job 0 'carol' "
                     r"DAG 0 \(running.*\); 1 task\(s\) processing on tcp://", lines[0])


def test_a_session_belongs_to_the_monitor_that_started_it():
    """Bob cannot stop Alice's session by mistake; with any_owner he can, and his own
    session then runs; Alice's stop is refused (hers has ended) and her session() is still
    hers, with her columns, not Bob's."""
    with preload_cluster() as lc, Client(lc, name="alice") as a, Client(lc, name="bob") as b:
        alice = Monitor(a, owner="alice@lab").attach(["mem-util"])
        bob = Monitor(b, owner="bob@lab").attach(["power"])
        started = alice.start()["session"]
        assert started["owner"] == "alice@lab"
        with pytest.raises(MonitorError, match=rf"monitor session {started['id']} was started "
                           r"by .*alice.*not by this client: stop\(any_owner=True\)"):
            bob.stop()
        with pytest.raises(MonitorError, match="already running"):
            bob.start()
        assert bob.stop(any_owner=True)["session"]["id"] == started["id"]
        theirs = bob.start()["session"]
        with pytest.raises(MonitorError, match=rf"monitor session {started['id']} is not "
                           rf"running: session {theirs['id']}, started by .*bob.* is"):
            alice.stop()
        mine = alice.session()
        assert (mine["id"], list(mine["metrics"]), mine["owner"]) == (started["id"], ["mem-util"],
                                                                alice.owner)
        assert bob.session()["id"] == theirs["id"] and bob.status()["running"]
        assert Monitor(a).session()["id"] == theirs["id"]  # a Monitor that started none
        # the original workflow: a new client and Monitor of the same user stop the session
        same = Monitor(b, owner="bob@lab")
        assert same.stop()["session"]["id"] == theirs["id"]


def test_the_command_line_stops_the_sessions_it_started():
    with preload_cluster() as lc:
        cli = [sys.executable, "-m", "dask_metrics.collector", "monitor"]
        where = ["--scheduler", lc.scheduler_address]
        for action in ("start", "stop"):
            result = subprocess.run([*cli, action, *where], capture_output=True, text=True,
                                    timeout=60)
            assert result.returncode == 0, result.stderr
        assert "stopped monitor session 0" in result.stdout
