"""One declaration per exported series: the code builds metric families from it and the
docs (docs/metrics.md) are generated from it, so the two cannot drift apart."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where families are built: the collector reads names only
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


@dataclass(frozen=True)
class MetricSpec:
    name: str
    type: str  # "gauge" or "counter"
    unit: str  # base unit as in the name ("bytes", "ratio", "seconds", ...) or "" for none
    labels: tuple[str, ...]
    help: str

    def family(self) -> GaugeMetricFamily | CounterMetricFamily:
        """A fresh, empty family to fill with samples during one collect()."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        if self.type == "counter":
            # prometheus_client appends _total itself; the spec keeps the full exposed name.
            base = self.name.removesuffix("_total")
            return CounterMetricFamily(base, self.help, labels=self.labels)
        if self.type == "gauge":
            return GaugeMetricFamily(self.name, self.help, labels=self.labels)
        raise ValueError(f"unknown metric type {self.type!r} for {self.name}")


def markdown_table(title: str, specs: list[MetricSpec]) -> str:
    """The docs/metrics.md section for one part of the project."""
    rows = [
        f"## {title}",
        "",
        "| name | type | unit | labels | meaning |",
        "|---|---|---|---|---|",
    ]
    for s in specs:
        labels = ", ".join(f"`{label}`" for label in s.labels) or "—"
        rows.append(f"| `{s.name}` | {s.type} | {s.unit or '—'} | {labels} | {s.help} |")
    return "\n".join(rows) + "\n"
