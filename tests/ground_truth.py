"""What the ground-truth suites share: a GPU's scripted timeline, what a number may be off
by at the documented tolerances, and reading the servers and reports they check."""

from __future__ import annotations

import json
import time
from bisect import bisect_right
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import requests

from dask_metrics.demo.localstack import LocalStack, StackOptions, WorkerSpec
from tests.fake_nvml import FakeNVML
from tests.helpers import clean_env, collector, wait_for
from tests.prometheus_helpers import PrometheusServer, newest_scrape, scraping_like

SLACK = 0.3  # seconds: a DAG's edges on the scheduler against the script's (submission, return)


def hold_until(t: float) -> float:
    """A task that keeps its worker until ``t`` (Unix seconds)."""
    time.sleep(max(0.0, t - time.time()))
    return t


class Script:
    """A GPU's fields from each step on (seconds after an epoch), ``base`` before the first."""

    def __init__(self, base: dict[str, Any]) -> None:
        self.base = dict(base)
        self.steps: dict[float, dict[str, Any]] = {}

    def at(self, t: float, **fields: Any) -> Script:
        """From ``t`` on: ``fields`` over the base."""
        self.steps[t] = {**self.base, **fields}
        return self

    def items(self) -> list[tuple[float, dict[str, Any]]]:
        return sorted(self.steps.items())

    def value(self, field: str, t: float) -> Any:
        """``field`` at ``t``."""
        steps = self.items()
        k = bisect_right([s for s, _ in steps], t)
        return (steps[k - 1][1] if k else self.base)[field]

    def near_step(self, t: float, within: float) -> bool:
        """Whether a step of the script lies within ``within`` seconds of ``t``."""
        return any(abs(t - s) <= within for s in self.steps)

    def integral(self, field: str, a: float, b: float) -> float:
        """``field`` integrated over [a, b]."""
        steps = self.items()
        times = [t for t, _ in steps]
        edges = [a, *(t for t in times if a < t < b), b]
        total = 0.0
        for x, y in pairwise(edges):
            k = bisect_right(times, x)
            total += (steps[k - 1][1] if k else self.base)[field] * (y - x)
        return total

    def edge_bound(self, field: str, samples: list[float], edges: tuple[float, ...]) -> float:
        """What a job's ``field`` integral may be off by: the script's integral over each
        scrape interval of the GPU that holds one of ``edges`` (a part's share of it is
        proportional to time), plus the edges' own slack."""
        bound = 0.0
        for edge in edges:
            bound += sum(self.integral(field, t0, t1) for t0, t1 in pairwise(samples)
                         if t0 < edge < t1)
            bound += self.integral(field, edge - SLACK, edge + SLACK)
        return bound

    def idle(self, samples: list[float], start: float, stop: float) -> float:
        """The documented idle time of a job over [start, stop]: its time in the GPU's
        scrape intervals whose mean utilisation, by the script, was under 5 %."""
        return sum(max(0.0, min(stop, t1) - max(start, t0)) for t0, t1 in pairwise(samples)
                   if self.integral("gpu_util", t0, t1) < 5 * (t1 - t0))


@contextmanager
def scripted_stack(folder: Path, lib: Path, base: dict[str, Any], intervals: Iterable[int],
                   workers: Iterable[str] = ("w0",)
                   ) -> Iterator[tuple[FakeNVML, LocalStack, dict[int, PrometheusServer]]]:
    """A local stack of ``workers`` (one, ``w0``, unless told) that all see one fake GPU
    starting at ``base``, and one Prometheus per scrape interval scraping it like the
    stack's own: (fake, stack, servers). The sidecars' peak window covers the slowest
    interval (docs/exporter.md)."""
    fake = FakeNVML(folder / "nvml_state", lib, gpus=1)
    for key, value in base.items():
        setattr(fake.gpus[0], key, value)
    fake.write()
    specs = [WorkerSpec(name, gpus=fake.uuid(0), env={"DASK_METRICS_EXPORTER_PEAK_WINDOW": "60"})
             for name in workers]
    options = StackOptions(folder / "stack", env=clean_env(fake.env), sample_interval=0.1,
                           worker_specs=specs)
    with LocalStack(options) as local, ExitStack() as stack:
        yield fake, local, scraping_like(stack, options.folder / "prometheus.yml", folder,
                                         intervals)


def new_epoch(fake: FakeNVML, at: float) -> None:
    """Count the fake's timeline from ``at`` on (its energy counter goes on from energy_mj
    there, and is not defined before it)."""
    gpu = fake.gpus[0]
    gpu.energy_mj += round(gpu.power_mw * (at - fake.epoch))
    fake.epoch = at


def query(server: PrometheusServer, expr: str) -> list[dict[str, Any]]:
    """An instant query: [{metric, values: [(t, v), ...]}] (one value for a vector)."""
    answer = requests.get(f"{server.url}/api/v1/query", params={"query": expr}, timeout=10)
    answer.raise_for_status()
    return [{"metric": r["metric"], "values": [(float(t), float(v)) for t, v in
                                               r.get("values", [r.get("value")])]}
            for r in answer.json()["data"]["result"]]


def scraped_past(servers: dict[int, PrometheusServer], jobs: tuple[str, ...], t: float
                 ) -> None:
    """Wait until each server has scraped each of ``jobs`` after ``t`` (Unix seconds)."""
    for every, server in servers.items():
        for job in jobs:
            wait_for(lambda s=server, j=job: newest_scrape(s, j), lambda last: last > t,
                     timeout=2 * every + 60, interval=0.5,
                     what=f"the {every} s server's scrape of {job} after {t:.3f}")


def report_of(out: Path, server: PrometheusServer, since: float, until: float
              ) -> dict[str, Any]:
    """report.json of [since, until] read from ``server``, made into ``out`` once: the
    tests of one server read the same report."""
    if not (out / "report.json").exists():
        run = collector("report", "--since", f"{since:.3f}", "--until", f"{until:.3f}",
                        "--out", str(out), "--prometheus", server.url)
        assert run.code == 0, run.err
    return json.loads((out / "report.json").read_text())


def jobs_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """report.json's jobs by name."""
    return {job["job_name"]: job for job in report["jobs"]}


def scripted_dag(job: dict[str, Any]) -> dict[str, Any]:
    """The job's DAG that ran the script's task: its last, after its client's warm-up."""
    return max(job["dags"], key=lambda d: int(d["dag"]))


def honest(peak: dict[str, Any] | None, truth: float, what: object = None) -> None:
    """A peak (bytes) exact where it says so, else a bound that holds the ``truth``."""
    assert peak is not None, what
    found = peak["peak_bytes"]
    if peak["exact"]:
        assert found == truth, (what, peak)
    else:
        upper = peak["upper_bound_bytes"]
        if found is not None and upper != found:
            assert found <= truth, (what, peak)
        assert upper is None or truth <= upper, (what, peak)


MAX_AGE = 120.0  # seconds: the collector's default --max-age, the report's here


def gaps(samples: list[float]) -> list[tuple[float, float]]:
    """The intervals between two GPU samples longer than MAX_AGE: they count for nothing."""
    return [(a, b) for a, b in pairwise(samples) if b - a > MAX_AGE]


def in_gaps(samples: list[float], start: float, end: float) -> float:
    """Seconds of [start, end] that lie in ``gaps``."""
    return sum(max(0.0, min(end, b) - max(start, a)) for a, b in gaps(samples))


def use_within(entry: dict[str, Any], script: Script, samples: list[float], start: float,
               end: float, what: object = None, more_busy: float = 0.0) -> None:
    """A job's or DAG's busy seconds and energy over [start, end] against the script, off
    by at most the edges' share (``Script.edge_bound``; ``more_busy``: seconds more where
    the test knows of another cause), less what lies in a gap between GPU samples (a
    Prometheus that missed scrapes: counted for nothing, and said)."""
    lost = in_gaps(samples, start, end)
    # wholly in a gap: nothing measured, and why (a span shorter than SLACK without a gap,
    # a DAG a restart cut short, is measured like any other)
    if lost > 0 and lost >= end - start - SLACK:
        assert entry["busy_seconds"] == 0 and entry["energy_joules"] is None, (what, entry)
        assert "gap longer than --max-age" in entry["energy_note"], (what, entry)
        return
    watts = max(step["power_mw"] for _, step in script.items()) / 1000
    busy = script.integral("gpu_util", start, end) / 100
    bound = script.edge_bound("gpu_util", samples, (start, end)) / 100 + more_busy + lost
    assert abs(entry["busy_seconds"] - busy) <= bound + 1e-6, (
        what, entry["busy_seconds"], busy, bound, samples)
    joules = script.integral("power_mw", start, end) / 1000
    bound = script.edge_bound("power_mw", samples, (start, end)) / 1000 + lost * watts
    assert entry["energy_joules"] is not None, (what, entry)
    assert abs(entry["energy_joules"] - joules) <= bound + 1.0, (
        what, entry["energy_joules"], joules, bound)
