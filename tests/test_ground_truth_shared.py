"""One GPU that two workers see, against a scripted truth, through a real scheduler, two
workers and their sidecars (both reading the same fake device) and two real Prometheus
servers scraping every 1 s and 15 s.

Job ``a`` runs on ``w0`` for 8 s, job ``b`` on ``w1`` for 3 s inside it; the device is busy
100 % at 250 W throughout ``a``, with a memory spike while both run. The device is one GPU:
each job's figures count it once, gpu_by_prefix.csv's rows add up to the device's busy time
while either worker held a DAG (``b`` half of the 3 s they overlap), never twice, and a
job that no scheduler scrape saw executing keeps its share (docs/collector.md,
"gpu_by_prefix.csv").
"""

from __future__ import annotations

import csv
import time
from collections.abc import Iterator
from contextlib import ExitStack
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
    report_of,
    scraped_past,
    scripted_stack,
)
from tests.prometheus_helpers import PrometheusServer, requires_prometheus

pytestmark = [requires_prometheus, pytest.mark.integration]

INTERVALS = (1, 15)
LEAD = 8.0  # seconds from scripting to the script's epoch
IDLE_MW, BUSY_MW = 60_000, 250_000
# name, worker, from, to (seconds after the epoch)
JOBS = (("a", "w0", 0.0, 8.0), ("b", "w1", 2.0, 5.0))
SPIKE = (3.0, 3.6, 6.0)  # from, to, GiB: while both jobs run
END = 11.0


def script() -> Script:
    """The device's day, in seconds after the epoch: busy through job a."""
    base = {"memory_used": 2 * GiB, "gpu_util": 0, "power_mw": IDLE_MW}
    busy = {"memory_used": 3 * GiB, "gpu_util": 100, "power_mw": BUSY_MW}
    out = Script(base).at(0.0, **busy).at(8.0)
    return out.at(SPIKE[0], **{**busy, "memory_used": int(SPIKE[2] * GiB)}).at(SPIKE[1], **busy)


SCRIPT = script()


class Truth:
    def __init__(self, epoch: float, servers: dict[int, PrometheusServer], folder: Path
                 ) -> None:
        self.epoch, self.servers, self.folder = epoch, servers, folder

    def report(self, every: int) -> dict[str, Any]:
        return report_of(self.folder / f"report-{every}", self.servers[every], self.epoch - 3,
                         self.epoch + END)


@pytest.fixture(scope="module")
def truth(tmp_path_factory: pytest.TempPathFactory, fake_nvml_lib: Path) -> Iterator[Truth]:
    folder = tmp_path_factory.mktemp("truth-shared")
    base = {"memory_used": 2 * GiB, "gpu_util": 0, "power_mw": IDLE_MW}
    with scripted_stack(folder, fake_nvml_lib, base, INTERVALS, workers=("w0", "w1")) as (
            fake, local, servers), ExitStack() as stack:
        clients = {name: stack.enter_context(Client(local.scheduler_address, name=name,
                                                    set_as_default=False))
                   for name, *_ in JOBS}
        for name, worker, *_ in JOBS:  # a client's first submission is slow
            clients[name].wait_for_workers(2, timeout=60)
            clients[name].submit(hold_until, 0.0, key=f"{name}-warm-up", workers=[worker],
                                 pure=False).result(60)
        now = time.time()
        new_epoch(fake, now)
        epoch = now + LEAD
        for t, fields in SCRIPT.items():
            fake.at(t + LEAD, 0, **fields)
        fake.write()
        futures = []
        for name, worker, start, stop in JOBS:
            time.sleep(max(0.0, epoch + start - time.time()))
            futures.append(clients[name].submit(hold_until, epoch + stop, key=f"{name}-0",
                                                workers=[worker], pure=False))
        for future in futures:
            future.result(timeout=60)
        scraped_past(servers, ("dask-gpu", "dask-scheduler"), epoch + END + 1)
        yield Truth(epoch, servers, folder)


def by_job(rows: list[dict[str, Any]], field: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in rows:
        out[r["job_name"]] = out.get(r["job_name"], 0.0) + float(r[field] or 0)
    return out


@pytest.mark.parametrize("every", INTERVALS)
def test_the_device_is_one_gpu_of_each_job(truth: Truth, every: int) -> None:
    report = truth.report(every)
    assert report["session"]["gpu_count"] == 1
    assert report["session"]["shared_gpus"][0]["workers"] == ["w0", "w1"]
    found = jobs_of(report)
    for name, _, start, stop in JOBS:
        job = found[name]
        assert (job["gpus_used"], len(job["per_gpu"])) == (1, 1), (name, job["per_gpu"])
        assert job["gpu_seconds"] == pytest.approx(stop - start, abs=SLACK), (name, job)
        honest(job["peak"], SPIKE[2] * GiB, name)  # the device's spike: both jobs saw it


def test_at_1_s_each_job_gets_the_device_s_time_while_it_ran(truth: Truth) -> None:
    found = jobs_of(truth.report(1))
    for name, _, start, stop in JOBS:
        busy = SCRIPT.integral("gpu_util", start, stop) / 100
        joules = SCRIPT.integral("power_mw", start, stop) / 1000
        assert found[name]["busy_seconds"] == pytest.approx(busy, abs=2 * SLACK), name
        assert found[name]["energy_joules"] == pytest.approx(joules, abs=2 * SLACK * 250), name


def test_at_1_s_gpu_time_per_prefix_counts_the_device_once(truth: Truth) -> None:
    """a alone 0-2 s and 5-8 s, a and b half each 2-5 s: 6.5 and 1.5 busy seconds, 1,625
    and 375 J; together the device's 8 s and 2,000 J, never the 11 s of both jobs' views."""
    rows = truth.report(1)["where_the_time_went"]["gpu_by_prefix"]
    assert {(r["job_name"], r["prefix"]) for r in rows if r["job_name"] in "ab"} == {
        ("a", "a"), ("b", "b")}, rows  # 1 s scrapes saw both tasks executing
    seconds, joules = by_job(rows, "gpu_seconds"), by_job(rows, "energy")
    assert seconds["a"] == pytest.approx(6.5, abs=2 * SLACK), rows
    assert seconds["b"] == pytest.approx(1.5, abs=SLACK), rows
    assert seconds["a"] + seconds["b"] == pytest.approx(8.0, abs=2 * SLACK), rows
    assert joules["a"] == pytest.approx(1625, abs=2 * SLACK * 250), rows
    assert joules["b"] == pytest.approx(375, abs=SLACK * 250), rows


def test_at_15_s_the_short_job_keeps_its_share_and_nothing_is_counted_twice(
        truth: Truth) -> None:
    """At 15 s the edges' intervals are shared in proportion to time (a bound, documented):
    b, which a 15 s scheduler scrape may never see executing, still has its row, and the
    rows of both jobs add up to no more than the device's 8 busy seconds."""
    rows = truth.report(15)["where_the_time_went"]["gpu_by_prefix"]
    seconds = by_job(rows, "gpu_seconds")
    assert 0 < seconds.get("b", 0.0) <= seconds["a"], rows
    assert seconds["a"] + seconds["b"] <= 8.0 + 1e-6, rows
    assert {r["prefix"] for r in rows if r["job_name"] == "b"} <= {"b", ""}, rows


def same_shares(mine: list[dict[str, str]], theirs: list[dict[str, str]]) -> None:
    """gpu_by_prefix.csv's rows alike, their sums as far as the order of additions allows."""
    def rest(rows: list[dict[str, str]]) -> list[dict[str, str]]:
        return [{k: v for k, v in r.items() if k not in ("gpu_seconds", "energy")}
                for r in rows]

    assert rest(mine) == rest(theirs)
    for one, other in zip(mine, theirs, strict=True):
        for key in ("gpu_seconds", "energy"):
            assert float(one[key] or 0) == pytest.approx(float(other[key] or 0), rel=1e-9,
                                                         abs=1e-9), (key, one, other)


@pytest.mark.parametrize("every", INTERVALS)
def test_in_pieces_the_shared_device_is_split_as_in_the_whole_range(
        truth: Truth, every: int, tmp_path: Path) -> None:
    """An export read a piece at a time (chunks of 4 s: edges inside the 1 s and the 15 s
    intervals, inside both jobs) splits the device among the jobs as the whole range does.
    The range is at most four chunks, so that neither export narrows it to its data first
    (data_span, whose resolution follows the chunk)."""
    from dask_metrics.collector.output.export import export
    from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient
    from dask_metrics.contract import GPU_BY_PREFIX_CSV

    def rows(chunk: float) -> tuple[list[dict[str, str]], list[str]]:
        out = tmp_path / str(chunk)
        with PrometheusClient(ConnectionSettings(truth.servers[every].url)) as client:
            found = export(client, truth.epoch - 3, truth.epoch + END, out, chunk=chunk)
        with open(out / GPU_BY_PREFIX_CSV, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh)), [(out / f).read_text() for f in found.files]

    (whole, files), (pieces, piece_files) = rows(3600.0), rows(4.0)
    assert piece_files == files and len(files) == 2
    same_shares(pieces, whole)
    assert sum(float(r["gpu_seconds"]) for r in whole if r["job_name"] in "ab") > 0
    # peaks hold a batch's whole range: sized by its 4 s chunks and read several at a time
    from dask_metrics.collector.peaks.command import peaks

    with PrometheusClient(ConnectionSettings(truth.servers[every].url)) as client:
        for by in ("gpu", "job"):
            found = peaks(client, truth.epoch - 3, truth.epoch + END, by=by)
            assert found and peaks(client, truth.epoch - 3, truth.epoch + END, by=by,
                                   chunk=4.0) == found



def test_a_range_that_begins_after_a_scrape_keeps_the_jobs_before_its_first_sample(
        truth: Truth, tmp_path: Path) -> None:
    """A range that begins just after a 15 s scrape and is read in chunks of 1 s (more than
    four: narrowed to its data first) has its first GPU sample after job b ended: b, which
    ran inside the range, is still listed and named, every peak's job has its name, and
    every table, peak and the report are the ones read whole."""
    from dask_metrics.collector.output.export import export
    from dask_metrics.collector.peaks.command import peaks
    from dask_metrics.collector.report.build import make_report
    from dask_metrics.collector.store.client import ConnectionSettings, PrometheusClient
    from dask_metrics.contract import ACTIVITIES_CSV, GPU_BY_PREFIX_CSV, JOBS_CSV

    def table(folder: Path, name: str) -> list[dict[str, str]]:
        with open(folder / name, newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))

    b_end = truth.epoch + JOBS[1][3]
    found = {}
    with PrometheusClient(ConnectionSettings(truth.servers[15].url)) as client:
        (series,) = client.query('dask_gpu_memory_used_bytes{worker="w1"}[50s]', b_end + 20)
        since = max(t for t in series.times if t < b_end * 1000 - 1) / 1000 + 0.001
        assert min(t for t in series.times if t > since * 1000) > b_end * 1000
        for chunk in (3600.0, 1.0):
            out = tmp_path / str(chunk)
            export(client, since, truth.epoch + END, out, chunk=chunk)
            found[chunk] = ({name: table(out, name) for name in (JOBS_CSV, ACTIVITIES_CSV)},
                            table(out, GPU_BY_PREFIX_CSV),
                            [peaks(client, since, truth.epoch + END, by=by, chunk=chunk)
                             for by in ("gpu", "job")],
                            make_report(client, since, truth.epoch + END, None, fmt="text",
                                        chunk=chunk, plots=0).report)
    (tables, shares, peaks_whole, report), (in_chunks, chunk_shares, peaks_in_chunks,
                                            chunk_report) = found[3600.0], found[1.0]
    assert in_chunks == tables and peaks_in_chunks == peaks_whole and chunk_report == report
    same_shares(chunk_shares, shares)
    assert "b" in {row["job_name"] for row in in_chunks[JOBS_CSV]}, in_chunks[JOBS_CSV]
    named = [p for by in peaks_in_chunks for p in by if p.job]
    assert named and all(p.job_name in ("a", "b") for p in named), named
