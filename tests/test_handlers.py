"""The monitor-session handlers over a bare JobTracker: a caller's wrong arguments are
refusals (``{"ok": False, "error": ...}``), never an exception in the scheduler's log."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dask_metrics.exporter.job_model import JobMode
from dask_metrics.exporter.job_tracker import JobTracker
from dask_metrics.exporter.scheduler.handlers import MonitorHandlers


def handlers(mode: JobMode = JobMode.CLIENT) -> MonitorHandlers:
    return MonitorHandlers(JobTracker(mode), lambda: None, lambda: None)


def refused(reply: Any, word: str) -> bool:
    return isinstance(reply, dict) and reply["ok"] is False and word in reply["error"]


@pytest.mark.parametrize("metrics", [123, [{"a": 1}, None], ["gpu-memory", 5], {"a": 1}])
def test_start_refuses_metrics_that_are_not_names(metrics: Any):
    h = handlers()
    assert refused(h.monitor_start(metrics=metrics), "metrics")
    assert h.tracker.session is None  # nothing started


def test_start_takes_one_name_or_a_list_of_names():
    h = handlers()
    assert h.monitor_start(metrics="gpu-memory")["session"]["metrics"] == ["gpu-memory"]
    assert asyncio.run(h.monitor_stop())["ok"] is True
    assert h.monitor_start(metrics=("a", "b"))["session"]["metrics"] == ["a", "b"]


@pytest.mark.parametrize("kw", [{"timeout": "abc"}, {"timeout": -1}, {"timeout": float("nan")},
                                {"timeout": True}, {"wait": "yes"}])
def test_stop_refuses_arguments_of_the_wrong_kind_and_keeps_the_session(kw: dict[str, Any]):
    h = handlers()
    h.monitor_start()
    assert refused(asyncio.run(h.monitor_stop(**kw)), "timeout")
    assert h.tracker.session is not None and h.tracker.session.stop is None
    assert asyncio.run(h.monitor_stop(timeout=1.5))["ok"] is True


@pytest.mark.parametrize("since", ["zz", 1.5, None, True])
def test_sessions_refuses_a_since_that_is_no_session_id(since: Any):
    h = handlers()
    h.monitor_start()
    asyncio.run(h.monitor_stop())
    assert refused(h.monitor_sessions(since=since), "since")
    assert [s["id"] for s in h.monitor_sessions(since=-1)] == [0]


def test_dags_and_new_job_refuse_wrong_kinds():
    h = handlers(JobMode.MANUAL)
    assert refused(h.dags(job_id="0"), "job_id")
    assert h.dags(job_id=0) == []
    assert refused(h.new_job(name=5), "name")
    assert h.new_job(name="x") == {"ok": True, "job_id": 0}
