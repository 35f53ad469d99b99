"""Per-job numbers across restarts against a scripted truth, through a real scheduler, worker
and sidecar and four real Prometheus servers scraping every 1 s, 5 s, 15 s and 60 s.

One worker's fake GPU follows a script written as the jobs run: each job a task that holds
the worker for a few seconds while its GPU is busy at a level of its own. Between the jobs,
what restarts in a cluster's week restarts: the sidecar (its busy counter starts over),
every Prometheus server (its data kept), the worker (back under its name), and the
scheduler (a new life: its job ids start over). Each job must still read what the script
did: its name, outcome and life, its own GPU time, its peak (exact where it says so, else a
bound that holds the truth), busy time and energy within the documented tolerance
(docs/collector.md, "How exact the per-job numbers are"), the interval across the
sidecar's restart included.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from distributed import Client

from tests.fake_nvml import GiB
from tests.ground_truth import (
    SLACK,
    Script,
    hold_until,
    honest,
    in_gaps,
    jobs_of,
    new_epoch,
    query,
    report_of,
    scraped_past,
    scripted_dag,
    scripted_stack,
    use_within,
)
from tests.helpers import wait_for
from tests.prometheus_helpers import PrometheusServer, requires_prometheus

pytestmark = [requires_prometheus, pytest.mark.integration]

INTERVALS = (1, 5, 15, 60)
BASE = {"memory_used": 2 * GiB, "gpu_util": 0, "power_mw": 60_000}
# name: seconds, util %, power mW, GiB
JOBS = {"etl": (4.0, 100, 250_000, 3.0), "train": (4.0, 40, 120_000, 5.0),
        "score": (3.0, 80, 200_000, 4.0), "final": (3.0, 60, 150_000, 6.0)}
LEAD = 1.0  # seconds from scripting a job's GPU to its start
RENDER_SLACK = 0.2  # seconds: a scrape stamped this long before a DAG ended may show it ended


class Truth:
    """The script as it ran: each job's (start, stop) and its scheduler's end, and the
    sidecar's restart, in seconds after the epoch, and the servers that scraped it."""

    def __init__(self, epoch: float, servers: dict[int, PrometheusServer], folder: Path,
                 script: Script, ran: dict[str, tuple[float, float, float]], reset: float,
                 end: float, dead: float) -> None:
        self.epoch, self.servers, self.folder = epoch, servers, folder
        self.script, self.ran, self.reset, self.end = script, ran, reset, end
        self.dead = dead  # the restarted scheduler's first life surely over

    def gpu_samples(self, every: int) -> list[float]:
        (series,) = query(self.servers[every], "dask_gpu_memory_used_bytes[10m]")
        return [t - self.epoch for t, _ in series["values"]]

    def scheduler_scrapes(self, every: int) -> list[float]:
        """The server's successful scrapes of the scheduler, in seconds after the epoch."""
        (series,) = query(self.servers[every], 'up{job="dask-scheduler"}[10m]')
        return [t - self.epoch for t, v in series["values"] if v == 1]

    def seen(self, every: int) -> dict[str, tuple[float, float]]:
        """What the server can know of each job's scripted DAG: {name: (start, end)}, the end
        the truth where a scrape showed it ended, else the last scrape that showed it
        running (its scheduler went away first); jobs no scrape showed are left out."""
        scrapes = self.scheduler_scrapes(every)
        out = {}
        for name, (start, stop, gone) in self.ran.items():
            running = [t for t in scrapes if start <= t < stop]
            if any(stop <= t < gone for t in scrapes):
                out[name] = (start, stop)
            elif running:
                out[name] = (start, running[-1])
        return out

    def report(self, every: int) -> dict[str, Any]:
        """The report of the whole script read from the ``every`` s server (made once)."""
        return report_of(self.folder / f"report-{every}", self.servers[every], self.epoch,
                         self.epoch + self.end)


def sidecar_back(server: PrometheusServer, after: float) -> bool:
    """A GPU sample of the restarted sidecar, scraped after ``after``."""
    return bool(query(server, f"timestamp(dask_gpu_up) > {after}"))


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory, fake_nvml_lib: Path) -> Iterator[Truth]:
    folder = tmp_path_factory.mktemp("truth-restarts")
    with scripted_stack(folder, fake_nvml_lib, BASE, INTERVALS) as (fake, local, servers):
        epoch = time.time()
        new_epoch(fake, epoch)
        script, ran = Script(BASE), {}  # {name: (start, stop)}

        def run(name: str) -> None:
            """Job ``name``: its client's warm-up, then its GPU scripted and its task held
            for exactly that stretch."""
            seconds, util, mw, gib = JOBS[name]
            with Client(local.scheduler_address, name=name, set_as_default=False) as client:
                client.wait_for_workers(1, timeout=60)
                client.submit(hold_until, 0.0, key=f"{name}-warm-up", pure=False).result(60)
                start = time.time() - epoch + LEAD
                stop = start + seconds
                script.at(start, memory_used=int(gib * GiB), gpu_util=util, power_mw=mw)
                script.at(stop)
                fake.at(start, 0, **script.steps[start]).at(stop, 0, **script.steps[stop])
                fake.write()
                time.sleep(max(0.0, epoch + start - time.time()))
                client.submit(hold_until, epoch + stop, key=f"{name}-0", pure=False
                              ).result(timeout=60)
            ran[name] = (start, stop)

        run("etl")
        reset = time.time() - epoch
        local.restart("w0-exporter")  # its busy counter starts over
        wait_for(lambda: sidecar_back(servers[1], epoch + reset), timeout=60,
                 what="the 1 s server scraping the restarted sidecar")
        for server in servers.values():
            server.restart()
        run("train")
        local.restart("w0")
        run("score")
        # a new life, right after score ended: job 0 again, and score's outcome may never
        # have been scraped (the slower servers may have seen none of this life's end)
        gone = time.time() - epoch
        local.restart("scheduler")
        dead = time.time() - epoch
        local.restart("w0")  # a worker without a nanny closes with its scheduler
        run("final")
        end = time.time() - epoch + 1.0
        lives = {name: (start, stop, gone if name != "final" else math.inf)
                 for name, (start, stop) in ran.items()}  # final's scheduler lives on
        scraped_past(servers, ("dask-gpu", "dask-scheduler"), epoch + end + 1)
        yield Truth(epoch, servers, folder, script, lives, reset, end, dead)


@pytest.mark.parametrize("every", INTERVALS)
def test_every_job_a_scrape_saw_is_there_with_its_outcome_and_its_schedulers_life(
        truth: Truth, every: int) -> None:
    found, seen = jobs_of(truth.report(every)), truth.seen(every)
    assert set(seen) <= set(found) <= set(JOBS), (sorted(found), seen)
    for name, (_, end) in seen.items():
        dag = scripted_dag(found[name])
        stop = truth.ran[name][1]
        ended = end == stop
        # a scrape is stamped as it starts and the scheduler renders after, and one between
        # the restart's request and the old scheduler's end still reaches it: a scrape that
        # close to the end may show the outcome, or not
        edge = any(stop - RENDER_SLACK <= t < truth.dead for t in truth.scheduler_scrapes(every))
        allowed = {"finished"} if ended else {"finished", "unknown"} if edge else {"unknown"}
        # an outcome no scrape saw is unknown, never "running" past its scheduler's end
        assert dag["status"] in allowed, (name, dag, seen)
    assert found["final"]["job"] == "0"
    if "etl" in found:  # the restarted scheduler numbers from 0 again, in another life
        assert found["etl"]["job"] == "0"
        assert found["etl"]["scheduler_start"] != found["final"]["scheduler_start"]


@pytest.mark.parametrize("every", INTERVALS)
def test_each_job_holds_the_gpu_for_what_the_scrapes_could_see_and_its_peak(
        truth: Truth, every: int) -> None:
    report = truth.report(every)
    found, samples = jobs_of(report), truth.gpu_samples(every)
    for name, (start, end) in truth.seen(every).items():
        dag = scripted_dag(found[name])  # its client's warm-up is a DAG of its own
        lost = in_gaps(samples, start, end)  # a restarted server's missed scrapes
        assert dag["gpu_seconds"] == pytest.approx(end - start - lost, abs=SLACK), (
            name, dag["gpu_seconds"], (start, end), samples)
        if lost:  # said, never silent
            assert any("no GPU sample of 1 worker(s) (w0)" in line
                       for line in report["session"]["warnings"]), report["session"]
        if end < truth.ran[name][1]:
            continue  # its peak is of what was seen of it: a part
        honest(dag["peak"], JOBS[name][3] * GiB, name)


@pytest.mark.parametrize("every", INTERVALS)
def test_busy_time_and_energy_are_the_script_within_the_edges_and_the_restarts_share(
        truth: Truth, every: int) -> None:
    found, samples = jobs_of(truth.report(every)), truth.gpu_samples(every)
    # the scrape interval across the sidecar's restart: its busy counter went back, and
    # counts from 0 there (a lower bound, documented)
    reset = [(t0, t1) for t0, t1 in pairwise(samples) if t0 < truth.reset < t1]
    for name, (start, end) in truth.seen(every).items():
        lost = sum(max(0.0, min(end, t1) - max(start, t0)) for t0, t1 in reset)
        use_within(scripted_dag(found[name]), truth.script, samples, start, end, name, lost)
