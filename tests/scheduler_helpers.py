"""Scrape helpers for the scheduler-preload tests: read /metrics over HTTP the way
Prometheus does, keyed by metric name (polling: tests.exporter_helpers.wait_for)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Scrape", "scrape"]

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
