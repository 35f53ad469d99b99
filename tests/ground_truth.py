"""What the ground-truth suites share: a GPU's scripted timeline, what a number may be off
by at the documented tolerances, and reading the servers and reports they check."""

from __future__ import annotations

import time
from bisect import bisect_right
from itertools import pairwise
from typing import Any

import requests

from tests.helpers import wait_for
from tests.prometheus_helpers import PrometheusServer, newest_scrape

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


def jobs_of(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """report.json's jobs by name."""
    return {job["job_name"]: job for job in report["jobs"]}


def scripted_dag(job: dict[str, Any]) -> dict[str, Any]:
    """The job's DAG that ran the script's task: its last, after its client's warm-up."""
    return max(job["dags"], key=lambda d: int(d["dag"]))
