"""Scrape and poll helpers for the scheduler-preload tests: read /metrics over HTTP the way
Prometheus does, and wait for a condition with a deadline instead of sleeping."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

from tests.exporter_helpers import free_port

__all__ = ["Scrape", "free_port", "scrape", "wait_for"]

T = TypeVar("T")

Series = dict[tuple[tuple[str, str], ...], float]


class Scrape:
    """One parsed /metrics page: ``scrape["dask_job_dag_status"]`` maps label sets to values."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: dict[str, Series] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(sorted(sample.labels.items()))
                self.samples.setdefault(sample.name, {})[labels] = sample.value

    def __getitem__(self, name: str) -> Series:
        return self.samples.get(name, {})

    def value(self, name: str, **labels: str) -> float | None:
        return self[name].get(tuple(sorted(labels.items())))

    def rows(self, name: str, *label_names: str) -> dict[tuple[str, ...], float]:
        """The series of ``name`` keyed by the values of ``label_names`` (in that order)."""
        return {
            tuple(dict(labels)[n] for n in label_names): value
            for labels, value in self[name].items()
        }


def scrape(port: int, host: str = "127.0.0.1", path: str = "/metrics") -> Scrape:
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=10) as response:
        return Scrape(response.read().decode())


def wait_for(
    probe: Callable[[], T],
    check: Callable[[T], bool] = bool,
    timeout: float = 20.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Call ``probe`` until ``check`` accepts its result; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {value!r}")
        time.sleep(interval)

