"""A scheduler restarted in the middle of a monitor session, on the local stack (a real
scheduler, worker, sidecar on the fake driver and Prometheus scraping every second).

Scripted truth: the first life runs job 0 'etl' (one DAG, finished) inside a session,
during which Prometheus and the GPU's sidecar restart too; the scheduler restarts on the
same address; the second life runs job 0 'train' (one DAG,
finished) and a session 0 of another client. Nothing of one life may appear as the
other's: the first session is closed at the old scheduler's last scrape and marked
interrupted, for Monitor, the command line and the watcher; an export over both lives keeps
both jobs 0 apart, with their names and outcomes, and says the range spans a restart.
"""

from __future__ import annotations

import csv
import json
import time
import warnings
from pathlib import Path

import pytest
from distributed import Client

from dask_metrics import Monitor
from dask_metrics.collector.monitor.watch import WatchOptions, export_pending, session_folder
from dask_metrics.demo.localstack import LocalStack, StackOptions, WorkerSpec
from tests.fake_nvml import FakeNVML
from tests.helpers import clean_env, collector_process, wait_for

pytestmark = pytest.mark.integration


def inc(x: int) -> int:
    return x + 1


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def scraped(stack: LocalStack, expr: str) -> bool:
    return bool(stack.query(expr))


@pytest.fixture(scope="module")
def lives(tmp_path_factory, fake_nvml_lib):
    """Yields (stack, the first session's Monitor, its session, the second life's client,
    facts): ``facts`` has the restart's time and the scheduler's two lives."""
    tmp = tmp_path_factory.mktemp("lifetimes")
    fake = FakeNVML(tmp / "nvml_state", fake_nvml_lib, gpus=1)
    fake.write()
    options = StackOptions(tmp / "stack", env=clean_env(fake.env), sample_interval=0.1,
                           worker_specs=[WorkerSpec("w0", gpus=fake.uuid(0))])
    with LocalStack(options) as stack:
        first = Client(stack.scheduler_address, name="etl", set_as_default=False)
        monitor = Monitor(first, owner="alice@lab")
        session = monitor.start()["session"]
        old = session["scheduler_start"]
        assert first.submit(inc, 1, key="etl-0").result(timeout=60) == 2
        wait_for(lambda: scraped(stack, f'dask_job_dag_status{{scheduler_start="{old}"}} == 2'),
                 timeout=30, what="a scrape of the finished DAG")
        # Prometheus and the sidecar restart inside the session: nothing of it is lost
        stack.restart("prometheus")
        stack.restart("w0-exporter")
        back = time.time()
        wait_for(lambda: stack.scraped_since("dask_gpu_up", back, 1), timeout=60,
                 what="Prometheus scraping the restarted sidecar")
        # the session ends at the scheduler's last scrape that showed it: one after the GPU
        # scrape above, so that the session holds GPU samples from after the restarts
        gpu_back = time.time()
        wait_for(lambda: scraped(stack, "timestamp(dask_job_monitor_start_timestamp_seconds)"
                                 f" > {gpu_back}"), timeout=30,
                 what="the restarted Prometheus scraping the session")
        restarted = time.time()
        stack.restart("scheduler")
        stack.restart("w0")  # a worker without a nanny closes with its scheduler
        new = wait_for(lambda: [r["metric"]["scheduler_start"] for r in stack.query(
            "dask_job_current_job") if r["metric"]["scheduler_start"] != old],
            timeout=60, what="a scrape of the restarted scheduler")[0]
        second = Client(stack.scheduler_address, name="train", set_as_default=False)
        second.wait_for_workers(1, timeout=60)
        assert second.submit(inc, 2, key="train-0").result(timeout=60) == 3
        wait_for(lambda: scraped(stack, f'dask_job_dag_status{{scheduler_start="{new}"}} == 2'),
                 timeout=30, what="a scrape of the second life's finished DAG")
        facts = {"restarted": restarted, "back": back, "old": old, "new": new}
        try:
            yield stack, monitor, session, second, facts
        finally:
            first.close()
            second.close()


def test_the_old_session_ends_with_its_scheduler_and_a_new_session_0_is_not_it(lives, tmp_path):
    stack, monitor, session, second, facts = lives
    # a new Monitor of the command line: the new scheduler runs no session, the last one
    # ended with the old scheduler
    stop = collector_process("monitor", "stop", "--scheduler", stack.scheduler_address)
    assert stop.returncode == 0, stop.stderr
    assert "ended with its scheduler (interrupted): nothing left to stop" in stop.stdout
    assert "ended with its scheduler" in stop.stderr  # the warning, with how long it ran
    since_monitor = collector_process("export", "--since", "monitor", "--prometheus",
                                      stack.prometheus_url, "--out", str(tmp_path / "cli"))
    assert since_monitor.returncode == 0, since_monitor.stderr
    assert "ended with its scheduler" in since_monitor.stderr
    assert [(j["job_name"], j["status"]) for j in rows(tmp_path / "cli" / "jobs.csv")] == [
        ("etl", "finished")]  # not the second life's job 0, not up to now

    theirs = Monitor(second, owner="alice@lab")  # same user, other notebook: session 0 again
    started = theirs.start()["session"]
    assert started["id"] == session["id"] == 0 and started["start"] != session["start"]
    with pytest.warns(UserWarning, match="ended with its scheduler"):
        reply = monitor.stop()
    ended = reply["session"]
    assert reply["ok"] and reply["interrupted"] and ended["interrupted"]
    assert session["start"] < ended["stop"] < facts["restarted"] + 15  # its last scrape
    assert theirs.status()["running"], "the old Monitor's stop stopped the new session 0"
    assert theirs.stop()["session"]["start"] == started["start"]

    with pytest.warns(UserWarning, match="ended with its scheduler"):
        monitor.to_csv(tmp_path / "old")
    assert json.loads((tmp_path / "old" / "export.json").read_text())["asked"][
        "interrupted"] is True
    gpu = rows(tmp_path / "old" / "w0.csv")
    stamps = [float(r["timestamp"]) for r in gpu]
    assert session["start"] + max(stamps) > facts["back"], stamps  # after the restarts too
    jobs = rows(tmp_path / "old" / "tables" / "jobs.csv")
    assert [(j["job"], j["job_name"], j["status"], j["scheduler_start"]) for j in jobs] == [
        ("0", "etl", "finished", facts["old"])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        listed = monitor.jobs()
    assert [(j["job_id"], [d["status"] for d in j["dags"]]) for j in listed] == [
        (0, ["finished"])]
    assert any("its scheduler restarted" in str(w.message) for w in caught)


def test_the_command_line_says_the_session_ended_with_its_scheduler(lives, tmp_path):
    stack, _, session, _, facts = lives
    out = tmp_path / "export"
    done = collector_process("export", "--since", str(session["start"] - 1), "--until", "now",
                             "--prometheus", stack.prometheus_url, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "spans 2 lives of the scheduler" in done.stderr
    jobs = rows(out / "jobs.csv")
    assert [(j["job"], j["job_name"], j["dag"], j["status"], j["scheduler_start"])
            for j in jobs] == [("0", "etl", "0", "finished", facts["old"]),
                               ("0", "train", "0", "finished", facts["new"])]
    assert json.loads((out / "export.json").read_text())["warnings"]

    report = collector_process("report", "--since", str(session["start"] - 1), "--until",
                               "now", "--prometheus", stack.prometheus_url, "--out",
                               str(tmp_path / "report"), "--format", "text")
    assert report.returncode == 0, report.stderr
    found = json.loads((tmp_path / "report" / "report.json").read_text())
    assert [(j["job"], j["job_name"], j["status"], j["scheduler_start"]) for j in
            found["jobs"]] == [("0", "etl", "finished", facts["old"]),
                               ("0", "train", "finished", facts["new"])]
    assert any("spans 2 lives of the scheduler" in w for w in found["session"]["warnings"])
    assert "spans 2 lives of the scheduler" in report.stderr
    assert found["jobs"][0]["job_label"].startswith("0 (scheduler of ")
    assert found["jobs"][0]["job_label"] != found["jobs"][1]["job_label"]


def test_the_watcher_exports_the_session_it_saw_running_when_the_scheduler_lost_it(
        lives, tmp_path):
    _, _, session, second, _ = lives
    seen = {"watching": [session]}  # what the watcher's poll before the restart saw
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problems = export_pending(Monitor(second), WatchOptions(out=tmp_path), seen)
    assert problems == []
    folder = tmp_path / session_folder(session)
    assert json.loads((folder / "export.json").read_text())["asked"]["interrupted"] is True
    assert [j["job_name"] for j in rows(folder / "tables" / "jobs.csv")] == ["etl"]
