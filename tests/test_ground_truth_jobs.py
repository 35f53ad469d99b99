"""Per-job numbers against a scripted truth, through a real scheduler, worker and sidecar and
four real Prometheus servers scraping both every 1 s, 5 s, 15 s and 60 s.

Three jobs run back to back on one worker whose fake GPU follows a script: ``etl`` (6 s, with a
spike a second before it ends), ``train`` right after it (3 s: shorter than a 5 s scrape), a
gap, ``score`` (2 s); a larger spike a second before ``etl`` starts belongs to no job. Each
job's report must say what the script did: its GPU time, its peak (exact where it says so,
else a bound that holds the truth), and its busy time and energy within the documented
tolerance (docs/collector.md, "How exact the per-job numbers are").
"""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator
from contextlib import ExitStack
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
    jobs_of,
    new_epoch,
    query,
    report_of,
    scraped_past,
    scripted_dag,
    scripted_stack,
    use_within,
)
from tests.helpers import collector
from tests.prometheus_helpers import (
    PrometheusServer,
    requires_prometheus,
)

pytestmark = [requires_prometheus, pytest.mark.integration]

INTERVALS = (1, 5, 15, 60)
LEAD = 10.0  # seconds from scripting to the script's epoch
BASE_GIB, IDLE_MW = 2.0, 60_000
BEFORE = (-1.5, -1.0, 12.0)  # a larger spike a second before etl: no job's
# name, from, to (seconds after the epoch), util %, power mW, GiB, spike (from, to, GiB)
JOBS = (("etl", 0.0, 6.0, 100, 250_000, 3.0, (4.6, 5.0, 9.0)),
        ("train", 6.0, 9.0, 40, 120_000, 4.0, (7.0, 7.4, 5.0)),
        ("score", 9.5, 11.5, 80, 200_000, 2.5, None))
END = 14.0


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def script() -> Script:
    """The GPU's day, in seconds after the epoch."""
    out = Script({"memory_used": int(BASE_GIB * GiB), "gpu_util": 0, "power_mw": IDLE_MW})
    lo, hi, gib = BEFORE
    out.at(lo, memory_used=int(gib * GiB)).at(hi)
    for _, start, stop, util, mw, gib, spike in JOBS:
        out.at(stop)
        job = {"memory_used": int(gib * GiB), "gpu_util": util, "power_mw": mw}
        out.at(start, **job)
        if spike:
            out.at(spike[0], **{**job, "memory_used": int(spike[2] * GiB)}).at(spike[1], **job)
    return out


SCRIPT = script()


class Truth:
    def __init__(self, epoch: float, servers: dict[int, PrometheusServer], folder: Path
                 ) -> None:
        self.epoch, self.servers, self.folder = epoch, servers, folder

    def gpu_samples(self, every: int) -> list[float]:
        """The server's samples of the GPU, seconds after the epoch."""
        (series,) = query(self.servers[every], "dask_gpu_memory_used_bytes[10m]")
        return [t - self.epoch for t, _ in series["values"]]

    def evidence(self, every: int) -> dict[str, Any]:
        """What the server holds of the GPU's samples and each worker's DAG edges, in
        seconds after the epoch: for a failure's message."""
        out: dict[str, Any] = {"gpu samples": [round(t, 2) for t in self.gpu_samples(every)]}
        for name in ("start", "end"):
            for s in query(self.servers[every],
                           f"dask_job_worker_dag_{name}_timestamp_seconds[10m]"):
                key = f"{name} {s['metric'].get('job_id')}/{s['metric'].get('dag_id')}"
                out[key] = sorted({round(v - self.epoch, 3) for _, v in s["values"]})
        return out

    def energy(self, every: int) -> list[tuple[float, float, float]]:
        """(time after the epoch, the counter's increase since the previous sample, the
        script's) for each GPU sample of the server: for a failure's message."""
        (series,) = query(self.servers[every], "dask_gpu_energy_joules_total[10m]")
        points = [(t - self.epoch, v) for t, v in series["values"] if -5 < t - self.epoch < 15]
        return [(round(t1, 2), round(v1 - v0, 1),
                 round(SCRIPT.integral("power_mw", t0, t1) / 1000, 1))
                for (t0, v0), (t1, v1) in pairwise(points)]

    def report(self, every: int) -> dict[str, Any]:
        """The report of [epoch - 3 s, epoch + END] read from the ``every`` s server: made
        once per server, read by every test."""
        return report_of(self.folder / f"report-{every}", self.servers[every], self.epoch - 3,
                         self.epoch + END)


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory, fake_nvml_lib: Path) -> Iterator[Truth]:
    folder = tmp_path_factory.mktemp("truth-jobs")
    base = {"memory_used": int(BASE_GIB * GiB), "gpu_util": 0, "power_mw": IDLE_MW}
    with scripted_stack(folder, fake_nvml_lib, base, INTERVALS) as (fake, local, servers), \
            ExitStack() as stack:
        clients = {name: stack.enter_context(Client(local.scheduler_address, name=name,
                                                    set_as_default=False))
                   for name, *_ in JOBS}
        for name, client in clients.items():  # a client's first submission is slow
            client.wait_for_workers(1, timeout=60)
            client.submit(hold_until, 0.0, key=f"{name}-warm-up", pure=False).result(60)
        now = time.time()
        new_epoch(fake, now)  # the script's epoch is LEAD on
        epoch = now + LEAD
        for t, fields in SCRIPT.items():
            fake.at(t + LEAD, 0, **fields)
        fake.write()
        futures = []
        for name, start, stop, *_ in JOBS:
            time.sleep(max(0.0, epoch + start - time.time()))
            futures.append(clients[name].submit(hold_until, epoch + stop, key=f"{name}-0",
                                                pure=False))
        for future in futures:
            future.result(timeout=60)
        scraped_past(servers, ("dask-gpu", "dask-scheduler"), epoch + END + 1)
        yield Truth(epoch, servers, folder)


@pytest.mark.parametrize("every", INTERVALS)
def test_each_job_holds_the_gpu_for_its_own_time_and_peak(truth: Truth, every: int) -> None:
    found = jobs_of(truth.report(every))
    assert set(found) == {name for name, *_ in JOBS}, (
        [(j["job"], j["job_name"], j["gpu_seconds"], j["status"]) for j in found.values()],
        truth.evidence(every))
    for name, start, stop, _, _, gib, spike in JOBS:
        job = found[name]
        assert job["status"] == "finished", job
        # DAG 0: the client's warm-up before the script's epoch (milliseconds on the GPU)
        assert job["gpu_seconds"] == pytest.approx(stop - start, abs=SLACK), (
            name, job["gpu_seconds"], [(d["dag"], d["gpu_seconds"]) for d in job["dags"]],
            truth.evidence(every))
        # a bound: never the spike before etl, never a neighbour's spike as exact
        honest(job["peak"], max(gib, spike[2] if spike else 0) * GiB, name)


@pytest.mark.parametrize("every", INTERVALS)
def test_each_jobs_busy_time_and_energy_are_the_script_within_the_edges_share(
        truth: Truth, every: int) -> None:
    found, samples = jobs_of(truth.report(every)), truth.gpu_samples(every)
    for name, start, stop, *_ in JOBS:
        use_within(found[name], SCRIPT, samples, start, stop, name)
    if every == 1:  # at 1 s the bound is a few percent: the numbers are close to the truth
        etl = found["etl"]
        assert etl["busy_seconds"] == pytest.approx(6.0, abs=1.0)
        assert etl["energy_joules"] == pytest.approx(1500, abs=250), truth.energy(every)


@pytest.mark.parametrize("every", INTERVALS)
def test_each_jobs_wall_time_utilisation_and_idle_time_are_the_script(truth: Truth, every: int
                                                                     ) -> None:
    found, samples = jobs_of(truth.report(every)), truth.gpu_samples(every)
    for name, start, stop, *_ in JOBS:
        job, length = found[name], stop - start
        dag = scripted_dag(job)
        assert dag["status"] == "finished", (name, dag)
        assert dag["wall_source"] == "jobs.csv (scheduler)", (name, dag)
        assert dag["wall_seconds"] == pytest.approx(length, abs=SLACK), (name, dag)
        # mean utilisation = busy / held: off by the busy time's bound and the edges' slack
        mean = SCRIPT.integral("gpu_util", start, stop) / length
        bound = SCRIPT.edge_bound("gpu_util", samples, (start, stop)) / 100
        slack = (bound + mean / 100 * SLACK) / (length - SLACK) * 100
        assert abs(job["mean_utilization_percent"] - mean) <= slack + 0.01, (
            name, job["mean_utilization_percent"], mean, slack)
        idle = SCRIPT.idle(samples, start, stop)
        assert job["idle_gpu_seconds"] == pytest.approx(idle, abs=2 * SLACK), (
            name, job["idle_gpu_seconds"], idle, samples)


@pytest.mark.parametrize("every", INTERVALS)
def test_gpu_time_per_prefix_adds_up_to_each_jobs_own(truth: Truth, every: int) -> None:
    report = truth.report(every)
    rows = report["where_the_time_went"]["gpu_by_prefix"]
    for name, *_ in JOBS:
        job, mine = jobs_of(report)[name], [r for r in rows if r["job_name"] == name]
        # the task's key is "<name>-0": its prefix is the name, or none where no scheduler
        # scrape saw it executing (a job shorter than the scrape interval)
        assert {r["prefix"] for r in mine} <= {name, ""}, (name, mine)
        assert sum(float(r["gpu_seconds"]) for r in mine) == pytest.approx(
            job["busy_seconds"], abs=0.01), (name, mine, job["busy_seconds"])
        assert sum(float(r["energy"]) for r in mine) == pytest.approx(
            job["energy_joules"], abs=0.5), (name, mine, job["energy_joules"])
    assert {r["job_name"] for r in rows} == {name for name, *_ in JOBS}, rows


@pytest.mark.parametrize("every", INTERVALS)
def test_each_csv_row_says_what_ran_at_its_time_and_the_memory_then(
        truth: Truth, every: int, tmp_path: Path) -> None:
    """The export's rows (raw samples): ``worker_job`` is the job the script ran at the
    row's instant (empty between jobs), ``total-mem`` the memory the GPU held then; rows
    within the edges' slack of a step are left out (the sidecar samples every 0.1 s)."""
    since = -3.0
    run = collector("export", "--since", f"{truth.epoch + since:.3f}", "--until",
                    f"{truth.epoch + END:.3f}", "--out", str(tmp_path), "--prometheus",
                    truth.servers[every].url)
    assert run.code == 0, run.err
    ids = {row["job_name"]: row["job"] for row in read_csv(tmp_path / "jobs.csv")}
    assert set(ids) == {name for name, *_ in JOBS}, ids
    rows = read_csv(tmp_path / "w0.csv")  # every raw sample in the range, none else
    inside = [t for t in truth.gpu_samples(every) if since <= t <= END]
    assert [since + float(r["timestamp"]) for r in rows] == pytest.approx(inside, abs=0.01), (
        rows, inside)
    if not inside:  # a 60 s scrape interval can hold the whole range: said, not an error
        assert "no GPU sample lies inside the range" in run.err, run.err
    for row in rows:
        t = since + float(row["timestamp"])
        if SCRIPT.near_step(t, SLACK):
            continue
        ran = [name for name, start, stop, *_ in JOBS if start <= t < stop]
        assert row["worker_job"] == (ids[ran[0]] if ran else ""), (t, row, ids)
        assert float(row["total-mem"]) == SCRIPT.value("memory_used", t), (t, row)
